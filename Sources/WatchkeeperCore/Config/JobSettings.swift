#if canImport(Glibc)
import Glibc
#endif

/// What to run and how to end it: shared by `[[task]]` entries and, later, `[[watch]]`
/// rules, since one runner runs both.
public struct JobSettings: Equatable, Sendable {
    public enum Command: Equatable, Sendable {
        /// Run directly: argv templates, each element expanded on its own.
        case arguments([String])
        /// Run through `/bin/sh -c`, only when the configuration says `shell = true`.
        case shell(String)
    }

    public var command: Command
    public var budget: Duration = .seconds(3_600)
    /// Fraction of the budget after which a warning is logged (0.8 for "80%").
    public var warnAt: Double?
    public var onExpire: Command?
    public var onExpireBudget: Duration = .seconds(30)
    /// Run after the last attempt of a run failed or expired (JobHook.swift).
    public var onFailure: Command?
    public var onFailureBudget: Duration = .seconds(30)
    /// Run after a run succeeded.
    public var onSuccess: Command?
    public var onSuccessBudget: Duration = .seconds(30)
    public var stopSignal: Int32 = SIGTERM
    public var killGrace: Duration = .seconds(5)
    public var user: String?
    public var group: String?
    public var workingDirectory: String?
    public var environment: [String: String] = [:]
    public var priority: JobPriority = .default
    public var output: JobOutputRoute = .daemon
    public var limits = JobLimits()

    public init(command: Command) {
        self.command = command
    }
}

/// Where a job's stdout and stderr go.
public enum JobOutputRoute: String, Sendable, CaseIterable {
    /// Through the daemon: each line its own journal entry with the run's fields
    /// (WATCHKEEPER_RUN_ID, the stream, SYSLOG_PID of the job), escaped on stderr.
    case daemon
    /// Straight to where the daemon's own output goes, never read by the daemon: a journal
    /// stream named after the job when the daemon logs to the journal (so the lines carry
    /// SYSLOG_IDENTIFIER and PRIORITY but not the run's fields), else the daemon's stderr
    /// as it is. For jobs that write a lot: it costs the daemon nothing per line.
    case direct
}

public enum JobPriority: String, Sendable, CaseIterable, Comparable {
    case high
    case `default`
    case low

    /// Lower runs first.
    var rank: Int {
        switch self {
        case .high: return 0
        case .default: return 1
        case .low: return 2
        }
    }

    public static func < (lhs: JobPriority, rhs: JobPriority) -> Bool { lhs.rank < rhs.rank }
}
