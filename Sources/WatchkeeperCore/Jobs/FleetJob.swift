/// The claim a fleet job holds: the lease it is bound to, and its revision in etcd.
public struct FleetClaimHold: Sendable, Equatable {
    public var lease: Int64
    public var revision: Int64

    public init(lease: Int64, revision: Int64) {
        self.lease = lease
        self.revision = revision
    }
}

/// A fleet job, as its start sees it.
public enum FleetJob: Sendable, Equatable {
    /// Its claim is held already: a fire the scheduler claimed at its instant, or a file
    /// whose earlier attempt claimed it.
    case claimed(FleetClaimHold)
    /// A shared inbox's file, claimed now that a slot is free for its job.
    case file(rule: String, relative: [UInt8], size: Int64, modifiedNanoseconds: Int64)
    /// A fleet task run on this host by `watchkeeper trigger` without `--fleet`: unclaimed.
    case unclaimed
}

/// What happens to a fleet job that a free slot came to.
public enum FleetStartDecision: Sendable, Equatable {
    /// It starts, holding this claim (nil: unclaimed), and its process must exec before
    /// `by` (nil: no such instant): the lease's fence point, which a daemon stopped or
    /// starved between this decision and the exec may have passed.
    case start(FleetClaimHold?, by: MonotonicInstant?)
    /// A file's claim is on its way; the slot stays the job's until the answer comes.
    case claiming
    /// It does not start, and ends with this outcome: `ranElsewhere` (another host has or
    /// had the file), `held` (no claim can be made now: handed back to wait for the lease),
    /// or `cancelled`.
    case notStarted(RunOutcome, detail: String)
}

/// What the engine asks of the fleet at a fleet job's start and end: the daemon's is
/// `FleetStarts` (Cluster/FleetStarts.swift, over the etcd member); the engine knows only this.
/// Called on the engine's queue.
public protocol FleetJobStarts: AnyObject {
    /// A slot is free for `job` (its group's limit too). A file's claim answers through
    /// `answered`, on the engine's queue, when this returns `.claiming`.
    func beforeStart(_ job: FleetJob, runID: RunID, answered: @escaping @Sendable (FleetStartDecision) -> Void) -> FleetStartDecision
    /// A job that held a claim ended, or did not start after all.
    func ended(_ job: FleetJob, hold: FleetClaimHold, runID: RunID, ok: Bool)
}

extension FleetJob {
    /// A job of the daemon's engine as a fleet job: its claim if it holds one, a shared
    /// inbox's file, or a fleet task run unclaimed.
    init(_ key: JobKey, _ subject: JobSubject, claim: FleetClaimHold?) {
        if let claim { self = .claimed(claim); return }
        guard key.kind == .watch, case .file(let file) = subject else { self = .unclaimed; return }
        self = .file(rule: key.name, relative: Array(file.relative), size: file.identity?.size ?? -1,
                     modifiedNanoseconds: file.identity?.modifiedNanoseconds ?? -1)
    }
}
