import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// One run to start: what the runner needs, whoever asked for it (a task's schedule,
/// a retry, a manual trigger, later a file event).
public struct JobRequest: Sendable {
    public let name: String
    public let runID: String
    public let settings: JobSettings
    /// Byte values for the command's `{placeholders}`.
    public let placeholders: [String: [UInt8]]
    /// WATCHKEEPER_* variables beyond the common ones.
    public let environment: [(String, [UInt8])]
    public let scheduledAt: WallTime?
    public let attempt: Int
    public let submittedAt: UInt64

    public init(name: String, runID: String = JobRequest.makeRunID(), settings: JobSettings, placeholders: [String: [UInt8]] = [:],
                environment: [(String, [UInt8])] = [], scheduledAt: WallTime? = nil, attempt: Int = 1) {
        self.name = name
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
