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
/// the subject's placeholders, environment and stdin.
public struct JobRequest: Sendable {
    public let key: JobKey
    public var name: String { key.name }
    public var kind: JobKind { key.kind }
    public let runID: String
    public let settings: JobSettings
    public let subject: JobSubject
    /// Byte values for the command's `{placeholders}`.
    public let placeholders: [String: [UInt8]]
    /// Placeholders that stand alone as an argv element and become one element per value
    /// (`{paths}` of a batch).
    public let listPlaceholders: [String: [[UInt8]]]
    /// WATCHKEEPER_* variables beyond the common ones.
    public let environment: [(String, [UInt8])]
    /// The job's whole stdin (`batch = "stdin"`: NUL-terminated paths); nil: /dev/null.
    public let standardInput: [UInt8]?
    public var scheduledAt: WallTime? { subject.scheduledAt }
    public let attempt: Int
    public let submittedAt: MonotonicInstant
    /// The environment every job of the group shares, built once by the engine; nil: the run
    /// builds it.
    public var sharedEnvironment: JobEnvironment?

    public init(key: JobKey, runID: String = RunID.random().description, settings: JobSettings, subject: JobSubject = .schedule(scheduledAt: nil),
                placeholders: [String: [UInt8]] = [:], listPlaceholders: [String: [[UInt8]]] = [:],
                environment: [(String, [UInt8])] = [], standardInput: [UInt8]? = nil, attempt: Int = 1,
                submittedAt: MonotonicInstant = .now) {
        self.key = key
        self.runID = runID
        self.settings = settings
        self.subject = subject
        self.placeholders = placeholders
        self.listPlaceholders = listPlaceholders
        self.environment = environment
        self.standardInput = standardInput
        self.attempt = attempt
        self.submittedAt = submittedAt
    }

    /// "task backup run 0123456789abcdef": how every log line about the run names it.
    public var label: String { "\(key) run \(runID)" }
}
