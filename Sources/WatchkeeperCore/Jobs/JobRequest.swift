import Dispatch

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

/// One run as the engine starts it: the group's settings in force at that moment, and
/// the subject, which gives the command its placeholders, environment and stdin.
public struct JobRequest: Sendable {
    public let key: JobKey
    public var name: String { key.name }
    public var kind: JobKind { key.kind }
    public let runID: String
    public let settings: JobSettings
    public let subject: JobSubject
    /// The job's whole stdin (`batch = "stdin"`: NUL-terminated paths); nil: /dev/null.
    public var standardInput: [UInt8]? { subject.standardInput }
    public var scheduledAt: WallTime? { subject.scheduledAt }
    public let attempt: Int
    public let submittedAt: MonotonicInstant
    /// What every job of the group shares (its parsed command, its environment), made once
    /// by the engine; nil: the run makes its own.
    var plan: JobSpawnPlan?
    /// Nothing else waited to start when the engine launched it: its spawn gives the CPU
    /// back to it once it has exec'd (SpawnRequest.yieldAfterExec).
    var nothingElseWaiting = false
    /// A fleet job's: the instant its process must exec before (SpawnRequest.execDeadline).
    var execDeadline: MonotonicInstant?

    public init(key: JobKey, runID: String = RunID.random().description, settings: JobSettings, subject: JobSubject = .schedule(scheduledAt: nil),
                attempt: Int = 1, submittedAt: MonotonicInstant = .now) {
        self.key = key
        self.runID = runID
        self.settings = settings
        self.subject = subject
        self.attempt = attempt
        self.submittedAt = submittedAt
    }

    /// "task backup run 0123456789abcdef": how every log line about the run names it.
    public var label: String { "\(key) run \(runID)" }
}
