import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// What started a job: it names the job's journal field and environment variable
/// (WATCHKEEPER_TASK or WATCHKEEPER_WATCH).
public enum JobKind: String, Sendable {
    case task
    case watch

    var fieldName: String { self == .task ? "WATCHKEEPER_TASK" : "WATCHKEEPER_WATCH" }
}

/// One run to start: what the runner needs, whoever asked for it (a task's schedule,
/// a retry, a manual trigger, later a file event).
public struct JobRequest: Sendable {
    public let name: String
    public let kind: JobKind
    public let runID: String
    public let settings: JobSettings
    /// Byte values for the command's `{placeholders}`.
    public let placeholders: [String: [UInt8]]
    /// Placeholders that stand alone as an argv element and become one element per value
    /// (`{paths}` of a batch).
    public let listPlaceholders: [String: [[UInt8]]]
    /// WATCHKEEPER_* variables beyond the common ones.
    public let environment: [(String, [UInt8])]
    /// The job's whole stdin (`batch = "stdin"`: NUL-terminated paths); nil: /dev/null.
    public let standardInput: [UInt8]?
    public let scheduledAt: WallTime?
    public let attempt: Int
    public let submittedAt: UInt64

    public init(name: String, kind: JobKind = .task, runID: String = JobRequest.makeRunID(), settings: JobSettings,
                placeholders: [String: [UInt8]] = [:], listPlaceholders: [String: [[UInt8]]] = [:],
                environment: [(String, [UInt8])] = [], standardInput: [UInt8]? = nil, scheduledAt: WallTime? = nil, attempt: Int = 1) {
        self.listPlaceholders = listPlaceholders
        self.standardInput = standardInput
        self.name = name
        self.kind = kind
        self.runID = runID
        self.settings = settings
        self.placeholders = placeholders
        self.environment = environment
        self.scheduledAt = scheduledAt
        self.attempt = attempt
        self.submittedAt = DispatchTime.now().uptimeNanoseconds
    }

    /// 16 hex digits from the system random generator (getrandom): unique enough to grep the journal for.
    public static func makeRunID() -> String {
        let value = UInt64.random(in: .min ... .max)
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}

/// How a run ended, for the journal record, the dump and the history.
public struct RunRecord: Sendable, Equatable {
    public let name: String
    public let runID: String
    public let attempt: Int
    public let outcome: RunOutcome
    public let scheduledAt: WallTime?
    public let startedAt: WallTime?
    public let finishedAt: WallTime
    public let duration: Duration
    public let exit: ProcessExit?
    public let expiry: ExpiryReason?
    /// Time between the scheduled instant and the actual start.
    public let lateness: Duration?
    public let detail: String?

    public var summary: String {
        var text = outcome.rawValue
        switch exit {
        case .exited(let code)?: text += " (exit \(code))"
        case .signaled(let signal, let core)?: text += " (\(HandledSignals.name(signal))\(core ? ", core dumped" : ""))"
        case nil: break
        }
        if let expiry { text += " after its \(expiry == .budget ? "budget ran out" : expiry == .shutdown ? "shutdown grace ran out" : "replacement was started")" }
        if let detail { text += ": \(detail)" }
        return text
    }

    var dumpValue: DumpValue {
        var fields: [DumpField] = [
            .init("run_id", .string(runID)),
            .init("outcome", .string(outcome.rawValue)),
            .init("started_at", startedAt.map { .string($0.iso8601) } ?? .null),
            .init("duration", .string(duration.compactDescription)),
        ]
        switch exit {
        case .exited(let code)?: fields.append(.init("exit_code", .int(Int64(code))))
        case .signaled(let signal, _)?: fields.append(.init("signal", .string(HandledSignals.name(signal))))
        case nil: break
        }
        if attempt > 1 { fields.append(.init("attempt", .int(Int64(attempt)))) }
        if let detail { fields.append(.init("detail", .string(detail))) }
        return .object(fields)
    }
}

extension RunRecord {
    /// One structured journal record per run, for tasks and watch rules alike.
    func log(to logger: Logger, kind: JobKind, extra: Logger.Metadata = [:]) {
        var metadata: Logger.Metadata = [
            JournalFields.messageIDKey: .string(MessageID.runFinished),
            kind.rawValue: .string(name),
            "run_id": .string(runID),
            "outcome": .string(outcome.rawValue),
            "duration_ms": .stringConvertible(duration.nanosecondsClamped / 1_000_000),
            "attempt": .stringConvertible(attempt),
        ]
        metadata.merge(extra) { _, new in new }
        if let scheduledAt { metadata["scheduled_at"] = .string(scheduledAt.iso8601) }
        if let startedAt { metadata["started_at"] = .string(startedAt.iso8601) }
        if let lateness { metadata["lateness_ms"] = .string(roundedString(Double(lateness.nanosecondsClamped) / 1e6, digits: 3)) }
        switch exit {
        case .exited(let code)?: metadata["exit_code"] = .stringConvertible(code)
        case .signaled(let signal, _)?: metadata["signal"] = .string(HandledSignals.name(signal))
        case nil: break
        }
        if let expiry { metadata["expiry"] = .string(expiry.rawValue) }
        var message = "\(kind.rawValue) \(name) run \(runID): \(summary) in \(duration.compactDescription)"
        if let lateness, lateness > .milliseconds(1) { message += ", started \(lateness.compactDescription) late" }
        let level: Logger.Level = outcome == .ok ? .info : (outcome == .cancelled ? .notice : .warning)
        logger.log(level: level, "\(message)", metadata: metadata)
    }
}
