/// Where the fleet's state lives in etcd, under `[cluster] prefix` (docs/fleet.md, "Keys"):
///
///     <prefix>/tasks/<task>/fires/<instant>   one fire: who claimed it, then how it ended
///     <prefix>/tasks/<task>/running           overlap = "skip": the fire running somewhere now
///     <prefix>/watches/<rule>/files/<path>    a shared inbox's file: its claim, then its record
///     <prefix>/members/<name>                 the live member holding a name (one per name)
///
/// Instants are UTC ISO 8601 with milliseconds, so keys sort in time order.
struct FleetKeys: Sendable, Equatable {
    let prefix: String

    var tasks: String { "\(prefix)/tasks/" }
    func fires(_ task: String) -> String { "\(prefix)/tasks/\(task)/fires/" }
    func fire(_ task: String, at instant: WallTime) -> String { fires(task) + instant.iso8601 }
    func running(_ task: String) -> String { "\(prefix)/tasks/\(task)/running" }
    var watches: String { "\(prefix)/watches/" }
    func file(_ rule: String, _ relativeKey: String) -> String { "\(prefix)/watches/\(rule)/files/\(relativeKey)" }
    var members: String { "\(prefix)/members/" }
    func member(_ name: String) -> String { members + name }

    /// A file's path relative to its rule's root as a key: bytes other than printable ASCII,
    /// and '%', percent-encoded, so any name (not UTF-8, with newlines) is a key, readable
    /// in etcdctl and the same on every host.
    static func pathKey(_ relative: some Collection<UInt8>) -> String {
        var text = ""
        for byte in relative {
            if byte > 0x20 && byte < 0x7f && byte != UInt8(ascii: "%") {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 15, radix: 16, uppercase: true)
            }
        }
        return text
    }

    static func pathBytes(_ key: String) -> [UInt8]? {
        var bytes: [UInt8] = []
        var iterator = Array(key.utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next(), let low = iterator.next(),
                      let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16) else { return nil }
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        return bytes
    }

    /// A key under `tasks`, taken apart: the task and, for a fire, its instant.
    enum Parsed: Equatable {
        case fire(task: String, instant: String)
        case running(task: String)
        case file(rule: String, relativeKey: String)
        case member(name: String)
    }

    func parse(_ key: String) -> Parsed? {
        // The prefix, then what kind of key: one pass over the bytes (every watch event of
        // every host comes here).
        var bytes = key.utf8[...]
        guard bytes.starts(with: prefix.utf8) else { return nil }
        bytes = bytes.dropFirst(prefix.utf8.count)
        if bytes.starts(with: "/members/".utf8) { return .member(name: String(decoding: bytes.dropFirst(9), as: UTF8.self)) }
        if bytes.starts(with: "/watches/".utf8) {
            let rest = bytes.dropFirst(9)
            guard let slash = rest.firstIndex(of: UInt8(ascii: "/")), rest[slash...].starts(with: "/files/".utf8) else { return nil }
            return .file(rule: String(decoding: rest[..<slash], as: UTF8.self),
                         relativeKey: String(decoding: rest[slash...].dropFirst(7), as: UTF8.self))
        }
        guard bytes.starts(with: "/tasks/".utf8) else { return nil }
        // <task>/fires/<instant> or <task>/running (task names hold no '/').
        let rest = bytes.dropFirst(7)
        guard let slash = rest.firstIndex(of: UInt8(ascii: "/")) else { return nil }
        let task = String(decoding: rest[..<slash], as: UTF8.self)
        let tail = rest[rest.index(after: slash)...]
        if tail.starts(with: "fires/".utf8) {
            let instant = tail.dropFirst(6)
            guard !instant.contains(UInt8(ascii: "/")) else { return nil }
            return .fire(task: task, instant: String(decoding: instant, as: UTF8.self))
        }
        return tail.elementsEqual("running".utf8) ? .running(task: task) : nil
    }
}

/// What a fire's key holds: the claim while the run goes on (bound to the winner's
/// lease), then the record of how it ended (bound to nothing, so it stays), or that the
/// claim was released before its run started (another host may run the fire).
public struct FleetFire: Sendable, Equatable {
    public enum State: String, Sendable { case running, done, released }

    public var task: String
    public var instant: String
    public var host: String
    public var runID: String
    public var state: State
    public var outcome: String?
    public var claimedAt: WallTime?
    public var startedAt: WallTime?
    public var finishedAt: WallTime?
    /// A takeover: the host whose claim expired before its run ended.
    public var takenOverFrom: String?
    /// The run was cut short by its own host (its fence, or its stop): another host may run
    /// the fire again (a persistent task, inside catch_up_window).
    public var interrupted = false

    public init(task: String, instant: String, host: String, runID: String, state: State) {
        self.task = task
        self.instant = instant
        self.host = host
        self.runID = runID
        self.state = state
    }

    var json: String {
        var fields = [DumpField("host", .string(host)), DumpField("run_id", .string(runID)), DumpField("state", .string(state.rawValue)),
                      DumpField("instant", .string(instant))]
        if let outcome { fields.append(DumpField("outcome", .string(outcome))) }
        if let claimedAt { fields.append(DumpField("claimed_at", .string(claimedAt.iso8601))) }
        if let startedAt { fields.append(DumpField("started_at", .string(startedAt.iso8601))) }
        if let finishedAt { fields.append(DumpField("finished_at", .string(finishedAt.iso8601))) }
        if let takenOverFrom { fields.append(DumpField("taken_over_from", .string(takenOverFrom))) }
        if interrupted { fields.append(DumpField("interrupted", .bool(true))) }
        return DumpValue.object(fields).json
    }

    /// nil for a value this version did not write (it is shown raw, never trusted).
    init?(task: String, instant: String, json text: String) {
        guard let value = try? DumpValue.parse(json: text), let host = value["host"]?.stringValue,
              let runID = value["run_id"]?.stringValue, let state = value["state"]?.stringValue.flatMap(State.init(rawValue:)) else { return nil }
        self.init(task: task, instant: instant.isEmpty ? value["instant"]?.stringValue ?? "" : instant, host: host, runID: runID, state: state)
        outcome = value["outcome"]?.stringValue
        claimedAt = value["claimed_at"]?.stringValue.flatMap(WallTime.init(iso8601:))
        startedAt = value["started_at"]?.stringValue.flatMap(WallTime.init(iso8601:))
        finishedAt = value["finished_at"]?.stringValue.flatMap(WallTime.init(iso8601:))
        takenOverFrom = value["taken_over_from"]?.stringValue
        interrupted = value["interrupted"]?.boolValue ?? false
    }

    var dumpValue: DumpValue {
        var fields = [DumpField("task", .string(task)), DumpField("instant", .string(instant)), DumpField("host", .string(host)),
                      DumpField("run_id", .string(runID)), DumpField("state", .string(state.rawValue))]
        fields.append(DumpField("outcome", outcome.map { .string($0) } ?? .null))
        fields.append(DumpField("started_at", startedAt.map { .string($0.iso8601) } ?? .null))
        fields.append(DumpField("finished_at", finishedAt.map { .string($0.iso8601) } ?? .null))
        fields.append(DumpField("taken_over_from", takenOverFrom.map { .string($0) } ?? .null))
        if interrupted { fields.append(DumpField("interrupted", .bool(true))) }
        return .object(fields)
    }
}

#if canImport(Glibc)
import Glibc
#endif

extension WallTime {
    /// The form `iso8601` writes (UTC, "2026-11-26T18:40:00.000Z"), and the same without
    /// the milliseconds; nil for anything else.
    public init?(iso8601 text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 20 || bytes.count == 24, bytes.last == UInt8(ascii: "Z") else { return nil }
        func number(_ range: Range<Int>) -> Int32? {
            var value: Int32 = 0
            for index in range {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else { return nil }
                value = value * 10 + Int32(bytes[index] - UInt8(ascii: "0"))
            }
            return value
        }
        guard bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
              bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
              let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19) else { return nil }
        var milliseconds: Int32 = 0
        if bytes.count == 24 {
            guard bytes[19] == UInt8(ascii: "."), let value = number(20..<23) else { return nil }
            milliseconds = value
        }
        var parts = tm()
        parts.tm_year = year - 1900
        parts.tm_mon = month - 1
        parts.tm_mday = day
        parts.tm_hour = hour
        parts.tm_min = minute
        parts.tm_sec = second
        let seconds = timegm(&parts)
        guard seconds != -1 || (year == 1969) else { return nil }
        self.init(secondsSinceEpoch: Int64(seconds), nanoseconds: milliseconds * 1_000_000)
    }
}

/// What a shared inbox file's key holds: the claim while its job runs (bound to the
/// winner's lease), then, after a success, the record that it was handled in this form.
public struct FleetFile: Sendable, Equatable {
    public enum State: String, Sendable { case running, done }

    public var host: String
    public var runID: String
    public var state: State
    public var size: Int64
    public var modifiedNanoseconds: Int64

    public init(host: String, runID: String, state: State, size: Int64, modifiedNanoseconds: Int64) {
        self.host = host
        self.runID = runID
        self.state = state
        self.size = size
        self.modifiedNanoseconds = modifiedNanoseconds
    }

    var json: String {
        DumpValue.object([DumpField("host", .string(host)), DumpField("run_id", .string(runID)), DumpField("state", .string(state.rawValue)),
                          DumpField("size", .int(size)), DumpField("mtime_ns", .int(modifiedNanoseconds))]).json
    }

    init?(json text: String) {
        guard let value = try? DumpValue.parse(json: text), let host = value["host"]?.stringValue, let runID = value["run_id"]?.stringValue,
              let state = value["state"]?.stringValue.flatMap(State.init(rawValue:)) else { return nil }
        self.init(host: host, runID: runID, state: state, size: value["size"]?.int64Value ?? -1, modifiedNanoseconds: value["mtime_ns"]?.int64Value ?? -1)
    }
}

/// Who holds a member name (`<prefix>/members/<name>`, bound to that member's lease): the
/// host, its machine and boot, its daemon's pid. `stopping` is written just before a clean
/// stop revokes the lease, so that the hosts watching tell a stop from an expiry.
public struct FleetMemberRecord: Sendable, Equatable {
    public var host: String
    public var machineID: String
    public var bootID: String
    public var pid: Int64
    public var since: String
    public var stopping = false

    public init(host: String, machineID: String, bootID: String, pid: Int64, since: String) {
        self.host = host
        self.machineID = machineID
        self.bootID = bootID
        self.pid = pid
        self.since = since
    }

    var json: String {
        var fields = [DumpField("host", .string(host)), DumpField("machine_id", .string(machineID)), DumpField("boot_id", .string(bootID)),
                      DumpField("pid", .int(pid)), DumpField("since", .string(since))]
        if stopping { fields.append(DumpField("state", .string("stopping"))) }
        return DumpValue.object(fields).json
    }

    init?(json text: String) {
        guard let value = try? DumpValue.parse(json: text), let host = value["host"]?.stringValue else { return nil }
        self.init(host: host, machineID: value["machine_id"]?.stringValue ?? "", bootID: value["boot_id"]?.stringValue ?? "",
                  pid: value["pid"]?.int64Value ?? 0, since: value["since"]?.stringValue ?? "")
        stopping = value["state"]?.stringValue == "stopping"
    }

    /// "host web-1 (machine ID 0a1b…, boot ID 9f8e…, pid 4242, since …)"
    public var description: String {
        "host \(host) (machine ID \(machineID.prefix(12)), boot ID \(bootID.prefix(12)), pid \(pid), since \(since))"
    }
}
