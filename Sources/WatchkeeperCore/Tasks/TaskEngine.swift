import Dispatch

/// What the task scheduler asks of the job engine: what runs, and to run, expire or
/// cancel. The daemon hands the scheduler its `JobEngine`; the scheduler's unit tests hand
/// it a fake one that runs nothing, so the overlap and `after` rules can be checked one
/// completion at a time, without processes or timing.
public protocol TaskEngine: AnyObject {
    /// The engine's queue, which the scheduler runs on.
    var queue: SubsystemQueue { get }
    var context: JobContext { get }
    func configure(_ group: JobGroup)
    func remove(_ key: JobKey, reason: String)
    @discardableResult
    func submit(_ key: JobKey, subject: JobSubject, runID: RunID?, replyOn: SubsystemQueue?,
                completion: @escaping (JobCompletion) -> Void) -> RunID
    /// A fleet fire this host claimed: it starts only under the claim's lease (FleetStarts).
    @discardableResult
    func submitClaimed(_ key: JobKey, subject: JobSubject, runID: RunID, claim: FleetClaimHold,
                       completion: @escaping (JobCompletion) -> Void) -> RunID
    func recordNotRun(_ record: RunRecord, key: JobKey, subject: JobSubject)
    @discardableResult
    func cancel(runID: RunID, detail: String) -> Bool
    /// With `deadline`, the expiry sequence is squeezed to end by then (a fleet fence).
    func expire(_ key: JobKey, reason: ExpiryReason, by deadline: MonotonicInstant?)
    /// Running, waiting, or waiting for a retry: what an overlap policy counts as busy.
    func activeCount(of key: JobKey) -> Int
    /// The group's running jobs as the dump shows them.
    func describeRuns(of key: JobKey, now: MonotonicInstant) -> [DumpValue]
}

extension TaskEngine {
    /// An engine without fleet starts (a test's fake) runs a claimed fire as any other.
    @discardableResult
    public func submitClaimed(_ key: JobKey, subject: JobSubject, runID: RunID, claim: FleetClaimHold,
                              completion: @escaping (JobCompletion) -> Void) -> RunID {
        submit(key, subject: subject, runID: runID, replyOn: nil, completion: completion)
    }
}

extension JobEngine: TaskEngine {
    public func describeRuns(of key: JobKey, now: MonotonicInstant) -> [DumpValue] {
        runs(of: key).map { $0.describe(now: now) }
    }
}
