import WatchkeeperCore

/// What happened in a fleet, as the jobs themselves and the fault injector saw it: the one
/// input of `FleetHistoryChecker`. The deterministic simulation builds it in memory; the
/// nemesis against real processes writes it as JSON lines (one object a line, below), each
/// job appending its own start and end, so the daemons under test never describe themselves.
///
///     {"type":"start","item":"task:report@2026-11-28T17:00:00.000Z","host":"b","run":"b-41","t":1764349200.125}
///     {"type":"end","item":"task:report@2026-11-28T17:00:00.000Z","host":"b","run":"b-41","t":1764349203.2,"ok":true}
///     {"type":"fault","kind":"partition","host":"c","t":1764349210.0,"until":1764349235.0}
///     {"type":"fault","kind":"kill9","host":"a","t":1764349240.5,"until":1764349243.0,"jobs_killed":true}
///     {"type":"observed","kind":"etcd_stall","t":1764349250.25,"until":1764349254.75}
///     {"type":"expect","item":"file:inbox/f00042.dat#1"}
///     {"type":"expect","item":"task:report@2026-11-28T17:00:00.000Z","fire":1795885200.0}
///
/// `t` is seconds on one clock shared by every writer (CLOCK_REALTIME on one machine, or the
/// simulation's clock). An item names one unit of work that must run once: a task's fire, or
/// one version of one file; runs are told apart by `run` (unique across hosts).
public enum FleetHistoryEvent: Sendable, Equatable {
    case start(item: String, host: String, run: String, at: Double)
    case end(item: String, host: String, run: String, at: Double, ok: Bool)
    case fault(FleetFault)
    /// What the injector saw happen without causing it: evidence, never a fault.
    case observed(FleetObservation)
    /// The item must have run to success once by the end of the history (liveness). `fire`:
    /// the item is a task's fire due then, which an etcd outage holds by design
    /// (`EtcdOutages`); nil for anything that must run whatever happened.
    case expect(item: String, fire: Double? = nil)
}

/// Something the injector observed from outside and did not cause, from `at` until `until`
/// (nil: to the end of the history). The one kind, `etcd_stall`: no write through any member
/// was acknowledged in that interval (the nemesis's probe writes one every 0.25 s).
public struct FleetObservation: Sendable, Equatable {
    public static let etcdStall = "etcd_stall"

    public var kind: String
    public var at: Double
    public var until: Double?

    public init(kind: String, at: Double, until: Double? = nil) {
        self.kind = kind
        self.at = at
        self.until = until
    }
}

/// One fault the injector caused, from `at` until `until` (nil: to the end of the history).
public struct FleetFault: Sendable, Equatable {
    public var kind: String
    /// The daemon (host name) it hit; nil for faults of etcd itself.
    public var host: String?
    public var at: Double
    public var until: Double?
    /// Every job of the host died at `at` (SIGKILL of the daemon's cgroup, as systemd does
    /// when the main process is killed): closes that host's runs that had not ended.
    public var jobsKilled: Bool

    public init(kind: String, host: String?, at: Double, until: Double? = nil, jobsKilled: Bool = false) {
        self.kind = kind
        self.host = host
        self.at = at
        self.until = until
        self.jobsKilled = jobsKilled
    }

    /// Faults during which a host that is alive cannot tell etcd that a run ended: it was
    /// killed, frozen or cut off. A run that ended ok just before or during one may be run
    /// again by another host once the lease is gone; that is at-least-once, counted apart.
    public static let silencingKinds: Set<String> = ["kill9", "sigstop", "partition"]

    func silences(_ host: String, over window: ClosedRange<Double>) -> Bool {
        guard self.host == host, Self.silencingKinds.contains(kind) else { return false }
        return at <= window.upperBound && (until ?? .infinity) >= window.lowerBound
    }

    /// A clean stop of a host: it writes its records before it lets its lease go, within a
    /// budget (a third of the TTL, 1 to 3 s), and says the ones etcd did not take.
    public static let stopKinds: Set<String> = ["sigterm", "sigterm_restart"]
    /// etcd without a leader for everyone: nothing is written until it has one again.
    public static let etcdOutageKinds: Set<String> = ["etcd_quorum", "etcd_election", "etcd_two_members"]

    /// A host stopping within `window` while etcd had no leader then: the stop gives its
    /// records up after its budget, even if etcd is back a moment later (a call sent into
    /// the outage waits out its deadline), and the claims they were for go with its lease
    /// (docs/fleet.md, "A clean stop"). A stop alone, or an outage alone, excuses nothing.
    static func stopWithoutEtcd(_ host: String, over window: ClosedRange<Double>, in faults: [FleetFault]) -> Bool {
        func overlaps(_ fault: FleetFault) -> Bool { fault.at <= window.upperBound && (fault.until ?? .infinity) >= window.lowerBound }
        return faults.contains { $0.host == host && stopKinds.contains($0.kind) && overlaps($0) }
            && faults.contains { $0.host == nil && etcdOutageKinds.contains($0.kind) && overlaps($0) }
    }
}

extension FleetHistoryEvent {
    public struct ParseError: Error, Equatable, CustomStringConvertible {
        public let line: Int
        public let reason: String
        public var description: String { "line \(line): \(reason)" }
    }

    /// Reads JSON lines; blank lines are skipped. `lineNumber` is for the error only.
    public static func parse(line text: String, lineNumber: Int) throws(ParseError) -> FleetHistoryEvent? {
        if text.allSatisfy({ $0 == " " || $0 == "\t" || $0 == "\r" }) { return nil }
        let value: DumpValue
        do { value = try DumpValue.parse(json: text) } catch { throw ParseError(line: lineNumber, reason: error.description) }
        func string(_ key: String) throws(ParseError) -> String {
            guard let text = value[key]?.stringValue else { throw ParseError(line: lineNumber, reason: "no string \"\(key)\"") }
            return text
        }
        func time(_ key: String) throws(ParseError) -> Double {
            guard let number = value[key]?.doubleValue else { throw ParseError(line: lineNumber, reason: "no number \"\(key)\"") }
            return number
        }
        switch try string("type") {
        case "start":
            return .start(item: try string("item"), host: try string("host"), run: try string("run"), at: try time("t"))
        case "end":
            guard let ok = value["ok"]?.boolValue else { throw ParseError(line: lineNumber, reason: "no boolean \"ok\"") }
            return .end(item: try string("item"), host: try string("host"), run: try string("run"), at: try time("t"), ok: ok)
        case "fault":
            let until = value["until"].flatMap { $0 == .null ? nil : $0.doubleValue }
            return .fault(FleetFault(kind: try string("kind"), host: value["host"]?.stringValue, at: try time("t"),
                                     until: until, jobsKilled: value["jobs_killed"]?.boolValue ?? false))
        case "observed":
            let until = value["until"].flatMap { $0 == .null ? nil : $0.doubleValue }
            return .observed(FleetObservation(kind: try string("kind"), at: try time("t"), until: until))
        case "expect":
            guard let fire = value["fire"], fire != .null else { return .expect(item: try string("item")) }
            guard let instant = fire.doubleValue else { throw ParseError(line: lineNumber, reason: "\"fire\" is not a number") }
            return .expect(item: try string("item"), fire: instant)
        case let other:
            throw ParseError(line: lineNumber, reason: "unknown type \"\(other)\"")
        }
    }

    /// Orders events from several logs by time; an `expect` has none and goes first. Ties
    /// keep the order they were read in (the caller sorts by this key, then by position).
    public static func sortKey(_ event: FleetHistoryEvent) -> Double {
        switch event {
        case .start(_, _, _, let at), .end(_, _, _, let at, _): return at
        case .fault(let fault): return fault.at
        case .observed(let observation): return observation.at
        case .expect: return -.infinity
        }
    }

    /// The event as the one JSON line `parse` reads back.
    public var jsonLine: String {
        switch self {
        case .start(let item, let host, let run, let at):
            return DumpValue.object([.init("type", .string("start")), .init("item", .string(item)), .init("host", .string(host)),
                                     .init("run", .string(run)), .init("t", .double(at))]).json
        case .end(let item, let host, let run, let at, let ok):
            return DumpValue.object([.init("type", .string("end")), .init("item", .string(item)), .init("host", .string(host)),
                                     .init("run", .string(run)), .init("t", .double(at)), .init("ok", .bool(ok))]).json
        case .fault(let fault):
            var fields: [DumpField] = [.init("type", .string("fault")), .init("kind", .string(fault.kind))]
            if let host = fault.host { fields.append(.init("host", .string(host))) }
            fields.append(.init("t", .double(fault.at)))
            if let until = fault.until { fields.append(.init("until", .double(until))) }
            if fault.jobsKilled { fields.append(.init("jobs_killed", .bool(true))) }
            return DumpValue.object(fields).json
        case .observed(let observation):
            var fields: [DumpField] = [.init("type", .string("observed")), .init("kind", .string(observation.kind)),
                                       .init("t", .double(observation.at))]
            if let until = observation.until { fields.append(.init("until", .double(until))) }
            return DumpValue.object(fields).json
        case .expect(let item, let fire):
            var fields: [DumpField] = [.init("type", .string("expect")), .init("item", .string(item))]
            if let fire { fields.append(.init("fire", .double(fire))) }
            return DumpValue.object(fields).json
        }
    }
}
