/// The job engine's side of the fleet (docs/architecture.md, "Fleet jobs at a free
/// slot"): a fleet job starts only under a lease known to be alive (`FleetStartGate`, read
/// at each start); a shared inbox's file is claimed in etcd only when a slot is free for its
/// job, the slot held while the claim is on its way (the engine never waits on etcd: the
/// answer comes as a turn of its queue); a file job's end is recorded at once; and the fence
/// reaches the engine here. The daemon's `JobEngine` and the simulation's engine both drive
/// it, each holding its own waiting line and slots.
// @unchecked Sendable: confined to the engine's queue (the jobs queue in the daemon).
public final class FleetStarts: FleetJobStarts, FleetJobsListener, @unchecked Sendable {
    public let gate: FleetStartGate
    public let fleetJobsQueue: any FleetQueue
    let member: FleetMember
    let clock: () -> MonotonicInstant
    let onFence: ((MonotonicInstant) -> Void)?
    /// Files whose claim is on its way (their slots held), for the dump.
    public private(set) var claiming = 0
    public private(set) var claimsMade: UInt64 = 0

    /// `queue`: the engine's, where claims are answered; `onFence`: on that queue, the
    /// engine stops every fleet job by the instant given and drops the claims not started.
    public init(member: FleetMember, queue: any FleetQueue, clock: @escaping () -> MonotonicInstant,
                onFence: ((MonotonicInstant) -> Void)? = nil) {
        self.member = member
        gate = member.gate
        fleetJobsQueue = queue
        self.clock = clock
        self.onFence = onFence
    }

    /// A slot is free for `job` (its group's limit too). A file's claim answers through
    /// `answered`, on the engine's queue, when this returns `.claiming`.
    public func beforeStart(_ job: FleetJob, runID: RunID, answered: @escaping @Sendable (FleetStartDecision) -> Void) -> FleetStartDecision {
        let now = clock()
        switch job {
        case .unclaimed:
            return .start(nil, by: nil)
        case .claimed(let hold):
            guard let until = gate.startsUntil(lease: hold.lease, at: now) else {
                return .notStarted(.cancelled, detail: "cancelled: not started, as this host's etcd lease \(FleetMember.hex(hold.lease)) was not known to be alive (it could not be renewed in time); its claim is released")
            }
            return .start(hold, by: until)
        case .file(let rule, let relative, let size, let modified):
            guard gate.openLease(at: now) != nil else {
                return .notStarted(.held, detail: "held: no etcd lease known to be alive")
            }
            claiming += 1
            claimsMade += 1
            member.claimFile(rule: rule, relative: relative, size: size, modifiedNanoseconds: modified, runID: runID.description,
                             replyOn: fleetJobsQueue) { [self] claim in
                claiming -= 1
                answered(decide(claim, job: job, runID: runID))
            }
            return .claiming
        }
    }

    private func decide(_ claim: FileClaim, job: FleetJob, runID: RunID) -> FleetStartDecision {
        switch claim {
        case .won(let revision, let lease):
            let hold = FleetClaimHold(lease: lease, revision: revision)
            if let until = gate.startsUntil(lease: lease, at: clock()) { return .start(hold, by: until) }
            // Won as the lease stopped being known alive: released, and the file waits.
            ended(job, hold: hold, runID: runID, ok: false)
            return .notStarted(.held, detail: "held: claimed as this host's etcd lease stopped being renewed in time; released")
        case .runningElsewhere(let other):
            return .notStarted(.ranElsewhere, detail: "running on \(other.host) (run \(other.runID))")
        case .handledElsewhere(let other):
            return .notStarted(.ranElsewhere, detail: "handled on \(other.host) (run \(other.runID))")
        case .runningHere:
            return .notStarted(.cancelled, detail: "cancelled: its job runs on this host already")
        case .held(let cause):
            return .notStarted(.held, detail: "held: \(cause)")
        }
    }

    /// A job that held a claim ended, or did not start after all: a file's record (ok) or
    /// release goes to etcd at once, before the engine hands its completion on. A fire's end
    /// is its scheduler's to record.
    public func ended(_ job: FleetJob, hold: FleetClaimHold, runID: RunID, ok: Bool) {
        guard case .file(let rule, let relative, let size, let modified) = job else { return }
        member.fileJobEnded(rule: rule, relative: relative, claimRevision: hold.revision, ok: ok, runID: runID.description, size: size,
                            modifiedNanoseconds: modified)
    }

    public func fleetFence(stopBy: MonotonicInstant) {
        onFence?(stopBy)
    }
}

/// The daemon's engine hears the fence itself (the simulation's hears it through its
/// `FleetStarts`): it is made before the member is started, so nothing is set afterwards.
extension JobEngine: FleetJobsListener {
    public var fleetJobsQueue: any FleetQueue { queue }

    public func fleetFence(stopBy: MonotonicInstant) {
        fenceFleet(stopBy: stopBy)
    }
}
