import CWatchkeeperSystem

#if canImport(Glibc)
import Glibc
#endif

/// What `watchkeeper logs` reads from the journal for one task, watch rule or run, and how
/// each entry is shown. The entries are the daemon's (JobOutputWriter, RunRecord, JobRun):
///
/// - a job's output lines through the daemon (`output = "daemon"`): WATCHKEEPER_TASK or
///   WATCHKEEPER_WATCH, WATCHKEEPER_RUN_ID, WATCHKEEPER_STREAM, SYSLOG_IDENTIFIER = the name;
/// - the run's record (MESSAGE_ID runFinished) and the daemon's messages about the run
///   (budget warning, expiry, a skipped fire): the kind's field, mostly WATCHKEEPER_RUN_ID;
/// - a job's lines with `output = "direct"`: journald's own stream entries, which carry only
///   SYSLOG_IDENTIFIER = the name, the job's _PID, _STREAM_ID and the _SYSTEMD_UNIT of the
///   daemon's unit (the job's cgroup is under it). They are found by name and unit, never by
///   run ID, and cannot tell a task from a watch rule of the same name.
public struct JobLogQuery: Sendable, Equatable {
    public enum Subject: Sendable, Equatable {
        case run(String)
        /// A task's or a watch rule's name, with the kinds it may be.
        case named(String, kinds: [JobKind])
    }

    public let subject: Subject

    public init(subject: Subject) {
        self.subject = subject
    }

    /// The command's argument: 16 hex digits are a run ID (RunID's form), unless `--task` or
    /// `--watch` says it is a name; anything else is a task's or a watch rule's name, both
    /// unless one of the options narrows it.
    public static func resolve(_ argument: String, task: Bool, watch: Bool) -> JobLogQuery {
        if !task && !watch, argument.utf8.count == 16, argument.utf8.allSatisfy(isLowerHex) {
            return JobLogQuery(subject: .run(argument))
        }
        let kinds: [JobKind] = task == watch ? [.task, .watch] : task ? [.task] : [.watch]
        return JobLogQuery(subject: .named(argument, kinds: kinds))
    }

    private static func isLowerHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }

    /// "task or watch rule backup", "run 0123456789abcdef": for messages.
    public var description: String {
        switch subject {
        case .run(let id): return "run \(LineEscaping.escaped(id))"
        case .named(let name, let kinds):
            let what = kinds.map { $0 == .task ? "task" : "watch rule" }.joined(separator: " or ")
            return "\(what) \(LineEscaping.escaped(name))"
        }
    }

    /// The fields `line(_:)` and `accepts(_:)` look at.
    public static let fields = [
        "MESSAGE", "PRIORITY", "MESSAGE_ID", "SYSLOG_IDENTIFIER", "_PID", "_STREAM_ID",
        "WATCHKEEPER_TASK", "WATCHKEEPER_WATCH", "WATCHKEEPER_RUN_ID", "WATCHKEEPER_STREAM",
    ]

    /// Sets the reader's matches. For a name, the direct-output lines are matched by
    /// SYSLOG_IDENTIFIER within the daemon's unit, which is read off the newest entry that
    /// names the job (a record), so that another program using the same identifier is left out.
    public func apply(to reader: JournalReader) throws(JournalReaderError) {
        reader.flushMatches()
        switch subject {
        case .run(let id):
            try reader.addMatch(field: "WATCHKEEPER_RUN_ID", value: id.utf8)
        case .named(let name, let kinds):
            try addKindMatches(name: name, kinds: kinds, to: reader)
            try reader.seekTail()
            guard try reader.previous(), let unit = reader.field("_SYSTEMD_UNIT") else { return }
            reader.flushMatches()
            try addKindMatches(name: name, kinds: kinds, to: reader)
            try reader.addDisjunction()
            try reader.addMatch(field: "SYSLOG_IDENTIFIER", value: name.utf8)
            try reader.addMatch(field: "_SYSTEMD_UNIT", value: unit)
        }
    }

    private func addKindMatches(name: String, kinds: [JobKind], to reader: JournalReader) throws(JournalReaderError) {
        for (index, kind) in kinds.enumerated() {
            if index > 0 { try reader.addDisjunction() }
            try reader.addMatch(field: kind.fieldName, value: name.utf8)
        }
    }

    /// What the matches cannot say: an entry matched by identifier and unit is the job's
    /// direct output only if it came on a journal stream and names no job; one that names a
    /// job must name this one, as a kind asked for.
    public func accepts(_ entry: JournalEntry) -> Bool {
        guard case .named(let name, let kinds) = subject else { return true }
        let named = Array(name.utf8)
        let task = entry["WATCHKEEPER_TASK"], watch = entry["WATCHKEEPER_WATCH"]
        if task != nil || watch != nil {
            return (kinds.contains(.task) && task == named) || (kinds.contains(.watch) && watch == named)
        }
        return entry["_STREAM_ID"] != nil && entry["WATCHKEEPER_RUN_ID"] == nil && entry["SYSLOG_IDENTIFIER"] == named
    }

    private static let priorityNames = ["emerg", "alert", "crit", "error", "warning", "notice", "info", "debug"]

    /// One entry as one line, everything from outside escaped:
    ///
    ///     2026-11-26T21:47:04.123Z task backup 0123456789abcdef stdout: copying /srv
    ///     2026-11-26T21:47:05.002Z task backup 0123456789abcdef ended: ok (exit 0) in 880ms
    ///     2026-11-26T21:48:00.010Z task backup 89abcdef01234567 warning: task backup has used 80% of its 1m budget
    ///     2026-11-26T21:49:00.001Z backup[4242] output: a line written straight to the journal
    public static func line(_ entry: JournalEntry) -> String {
        var out = Array(entry.time.iso8601.utf8)
        out.append(UInt8(ascii: " "))
        let message = entry["MESSAGE"] ?? []
        let kind: String?
        let name: [UInt8]
        if let task = entry["WATCHKEEPER_TASK"] {
            (kind, name) = ("task", task)
        } else if let watch = entry["WATCHKEEPER_WATCH"] {
            (kind, name) = ("watch", watch)
        } else {
            (kind, name) = (nil, entry["SYSLOG_IDENTIFIER"] ?? Array("?".utf8))
        }
        guard let kind else {
            // Direct output: the job's own stream, known by its identifier and process.
            out += Array(LineEscaping.escaped(name).utf8)
            if let pid = entry["_PID"] { out += Array("[\(LineEscaping.escaped(pid))]".utf8) }
            out += Array(" output: ".utf8)
            appendText(message, to: &out)
            return String(decoding: out, as: UTF8.self)
        }
        out += Array("\(kind) \(LineEscaping.escaped(name))".utf8)
        let runID = entry["WATCHKEEPER_RUN_ID"]
        if let runID { out += Array(" \(LineEscaping.escaped(runID))".utf8) }
        if let stream = entry["WATCHKEEPER_STREAM"] {
            out += Array(" \(LineEscaping.escaped(stream)): ".utf8)
            appendText(message, to: &out)
        } else if entry.text("MESSAGE_ID") == MessageID.runFinished.rawValue {
            // The record says "task backup run ID: ok (exit 0) in 880ms", or with the file
            // "watch inbox run ID (/srv/in/a): ..."; what the line already shows is not repeated.
            let said = Array("\(kind) ".utf8) + name + Array(" run ".utf8) + (runID ?? [])
            out += Array(" ended".utf8)
            if message.starts(with: said) {
                appendText(message[said.count...], to: &out)
            } else {
                out += Array(": ".utf8)
                appendText(message, to: &out)
            }
        } else {
            let priority = entry.text("PRIORITY").flatMap { Int($0) }.flatMap { (0...7).contains($0) ? $0 : nil } ?? 6
            out += Array(" \(priorityNames[priority]): ".utf8)
            appendText(message, to: &out)
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// As the daemon's stderr shows a job's line: controls escaped, backslashes kept.
    private static func appendText(_ text: some Collection<UInt8>, to out: inout [UInt8]) {
        Array(text).withUnsafeBufferPointer { LineEscaping.appendControlsEscaped($0, to: &out) }
    }

    /// The newest `count` entries the query accepts, oldest first, and a cursor just past
    /// the newest entry matched (nil: none), from which `follow` goes on.
    public func last(_ count: Int, in reader: JournalReader) throws(JournalReaderError) -> (entries: [JournalEntry], newest: String?) {
        try reader.seekTail()
        var newest: String?
        var entries: [JournalEntry] = []
        while entries.count < count || newest == nil {
            guard try reader.previous() else { break }
            if newest == nil { newest = try reader.cursor() }
            guard entries.count < count else { break }
            let entry = try reader.entry(fields: Self.fields)
            if accepts(entry) { entries.append(entry) }
        }
        return (entries.reversed(), newest)
    }

    /// Shows each new entry as it comes, from just past `newest` (or from the end), until a
    /// signal arrives on `signalDescriptor`.
    public func follow(from newest: String?, in reader: JournalReader, signalDescriptor: Int32,
                       show: ([JournalEntry]) -> Void) throws(JournalReaderError) {
        if let newest {
            try reader.seek(cursor: newest)
            // Onto the entry the cursor names: the loop below starts after it.
            _ = try reader.next()
        } else {
            try reader.seekTail()
        }
        while true {
            var batch: [JournalEntry] = []
            while try reader.next() {
                let entry = try reader.entry(fields: Self.fields)
                if accepts(entry) { batch.append(entry) }
            }
            if !batch.isEmpty { show(batch) }
            if try reader.wait(orSignalOn: signalDescriptor) == .signal { return }
        }
    }
}
