/// What the watcher asks of the job engine, and nothing more: the seam a unit test of the
/// watcher fills with a fake that records submissions and completes them when told
/// (Tests/WatchkeeperCoreTests/Watching/WatcherDeliveryTests.swift). Defined here, on the
/// watcher's side, so the dependency runs Watching -> Jobs only. Every call is made on
/// `queue`, the engine's own.
protocol WatchJobSubmitting: AnyObject, Sendable {
    var queue: SubsystemQueue { get }
    /// A rule is new or its job settings changed.
    func configure(_ group: JobGroup)
    /// A rule's batching changed: the waiting work of the old shape, handed back.
    func reshape(_ group: JobGroup) -> [JobSubject]
    /// A rule went: what waits is cancelled with a record each.
    func remove(_ key: JobKey, reason: String)
    /// Queues a job; `completion` runs once, on `replyOn`, with every attempt's record.
    @discardableResult
    func submit(_ key: JobKey, subject: JobSubject, runID: RunID?, replyOn: SubsystemQueue?,
                completion: @escaping (JobCompletion) -> Void) -> RunID
    /// The record of work that never became a job (files left settling when a rule went).
    func recordNotRun(_ record: RunRecord, key: JobKey, subject: JobSubject, inBulk: Bool)
}

extension JobEngine: WatchJobSubmitting {}
