import Logging

/// What a fleet task is, as the fleet's decisions need it (from `TaskSettings`).
public struct FleetTaskPolicy: Sendable, Equatable {
    public var name: String
    /// Fires lost with their host are run again by another (docs/fleet.md).
    public var persistent: Bool
    public var catchUpWindow: Duration
    /// overlap = "skip": no host starts a fire while any host runs the previous one.
    public var guardRunning: Bool
    /// How many of the task's runs may go on at once on this host.
    public var maxConcurrent: Int

    public init(name: String, persistent: Bool, catchUpWindow: Duration, guardRunning: Bool, maxConcurrent: Int) {
        self.name = name
        self.persistent = persistent
        self.catchUpWindow = catchUpWindow
        self.guardRunning = guardRunning
        self.maxConcurrent = maxConcurrent
    }
}

/// How this host's run of a fleet fire ended, as its owner tells `FleetFires`.
public struct FleetRunEnd: Sendable, Equatable {
    public var outcome: RunOutcome
    /// The first attempt's start; nil if no attempt started.
    public var startedAt: WallTime?
    public var finishedAt: WallTime
    public var expiry: ExpiryReason?

    public init(outcome: RunOutcome, startedAt: WallTime?, finishedAt: WallTime, expiry: ExpiryReason?) {
        self.outcome = outcome
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.expiry = expiry
    }
}

/// What `FleetFires` asks of the scheduler that owns it (the daemon's `TaskScheduler`, the
/// simulation's host): its engine, its records and its timers, on its own queue.
public protocol FleetFireOwner: AnyObject {
    var fleetQueue: any FleetQueue { get }
    var fleetClock: any FleetClock { get }
    func newRunID() -> RunID
    /// The task's runs running, waiting or waiting for a retry on this host.
    func activeCount(of task: String) -> Int
    /// Runs a fire this host claimed on `lease` (it starts only while that lease is known to
    /// be alive); `ended` once, when its last attempt is over, or when it never started.
    func submitClaimed(task: String, instant: WallTime, runID: RunID, lease: Int64, ended: @escaping (FleetRunEnd) -> Void)
    /// A fire that did not run here: journaled and kept in the task's history.
    func recordNotRun(task: String, instant: WallTime, runID: RunID, outcome: RunOutcome, detail: String, host: String?)
    /// A fire skipped because the previous run still goes on (the overlap policy).
    func recordSkip(task: String, instant: WallTime)
    /// The task's latest scheduled instant, for catch-up after a restart.
    func persistScheduled(task: String, instant: WallTime)
}

/// A fire that could not be claimed yet: claimed again later with the same run ID (if the
/// first claim's answer was lost after etcd applied it, the next finds this host's own).
struct HeldFire: Sendable, Equatable {
    var instant: WallTime
    var cause: String
    var runID: RunID
}

/// A fleet task's part of the decisions' state (docs/fleet.md).
public struct FleetTaskState {
    /// This host's runs of fires it won: the claim's revision, to record the end against.
    var runs: [RunID: (fire: FleetFire, revision: Int64, guardRunning: Bool)] = [:]
    /// Fires other hosts claimed and are running, by instant: taken over if their claim
    /// vanishes without a record (a persistent task inside catch_up_window).
    var elsewhere: [String: (fire: FleetFire, seenAt: MonotonicInstant)] = [:]
    /// Fires that could not be claimed yet, oldest first. While the lease lives (a call
    /// failed: a member went, a leader was being elected, the previous fire's record was on
    /// its way) each is kept and claimed again in turn; without a lease only the latest is
    /// (as `persistent` catches up only the latest), the ones it replaces recorded `held`.
    var held: [HeldFire] = []
    /// How many more fires may wait behind the held ones' late runs instead of being
    /// skipped for them: one per fire held by a failed claim, none once caught up.
    var catchUp = 0
    /// The last fire this host knows of, wherever it ran.
    var last: FleetFire?
    /// Instants whose claim is on its way: not orphans, whatever etcd holds meanwhile.
    var claiming: Set<String> = []
    /// ran_here, ran_elsewhere, taken_over, held: watchkeeper_fleet_fires_total.
    var totals: [String: UInt64] = [:]
}

/// The fleet's decisions about one host's fires of `fleet = "one"` tasks (docs/fleet.md,
/// "One host per fire"): a fire is claimed in etcd, run if won, recorded when it ends, held
/// while no claim can be made, and taken over from a host that lost it. On the owner's
/// queue; the daemon's `TaskScheduler` and the simulation's hosts run this same code.
// @unchecked Sendable: confined to its owner's queue (the jobs queue in the daemon).
public final class FleetFires: @unchecked Sendable {
    public static let outcomes = ["ran_here", "ran_elsewhere", "taken_over", "held"]

    let member: FleetMember
    weak var owner: (any FleetFireOwner)?
    let logger: Logger
    public private(set) var policies: [String: FleetTaskPolicy] = [:]
    var tasks: [String: FleetTaskState] = [:]
    var heldRetryTimer: (any FleetTimer)?
    var heldRetryDelay = Duration.milliseconds(250)
    /// A retry of the held fires is armed and has not gone off yet.
    var heldRetryArmed = false
    var checkTimer: (any FleetTimer)?
    /// Why fleet fires are held now (no etcd lease), for the dump and `status`.
    public private(set) var heldCause: String?
    /// Held fires kept per task while the lease lives: a bound, not a policy (a 1 s task
    /// through a minute of failing calls, with a lease that outlives it).
    static let heldWhileAlive = 120
    /// A claim won this long after its fire was due was slowed by etcd, not by the task.
    static let lateClaim = Duration.milliseconds(250)

    public init(member: FleetMember, owner: any FleetFireOwner, logger: Logger) {
        self.member = member
        self.owner = owner
        self.logger = logger
    }

    var hostName: String { member.settings.name }

    /// Tasks known now (every start and reload); state of the removed ones goes.
    public func configure(_ policies: [FleetTaskPolicy]) {
        self.policies = Dictionary(policies.map { ($0.name, $0) }, uniquingKeysWith: { $1 })
        for name in tasks.keys where self.policies[name] == nil { tasks[name] = nil }
    }

    public func state(of task: String) -> FleetTaskState { tasks[task] ?? FleetTaskState() }

    public func totals(of task: String) -> [String: UInt64] { tasks[task]?.totals ?? [:] }

    // MARK: Fires

    /// A fleet fire: this host's overlap first (no etcd call for a fire it would skip),
    /// then the claim in etcd; the run starts only if this host wins it.
    @discardableResult
    public func fire(_ name: String, scheduledAt: WallTime, reason: String, takenOverFrom: String? = nil, runID given: RunID? = nil) -> String? {
        guard let policy = policies[name], let owner else { return nil }
        // A claim of this very fire is on its way (a takeover, a retry): one at a time.
        guard !(tasks[name]?.claiming.contains(scheduledAt.iso8601) ?? false) else { return nil }
        if given == nil, policy.guardRunning, heldCause == nil, tasks[name]?.catchUp ?? 0 > 0,
           !(tasks[name]?.held.isEmpty ?? true) || busy(name) {
            // Fires held while the lease lives run in turn, late: this one waits behind them
            // rather than being skipped for the late run of an earlier one (as many times as
            // fires were held, so a task slower than its interval goes back to skipping).
            let runID = owner.newRunID()
            tasks[name]?.catchUp -= 1
            hold(name, at: scheduledAt, cause: "waits for the fires held before it", runID: runID, failed: false)
            return runID.description
        }
        let active = owner.activeCount(of: name)
        if active > 0 && (policy.guardRunning || active >= policy.maxConcurrent) {
            owner.recordSkip(task: name, instant: scheduledAt)
            return nil
        }
        let runID = given ?? owner.newRunID()
        owner.persistScheduled(task: name, instant: scheduledAt)
        tasks[name, default: FleetTaskState()].claiming.insert(scheduledAt.iso8601)
        member.claimFire(task: name, instant: scheduledAt, runID: runID.description, guardRunning: policy.guardRunning, takenOverFrom: takenOverFrom,
                         replyOn: owner.fleetQueue) { [weak self] claim in
            self?.tasks[name]?.claiming.remove(scheduledAt.iso8601)
            self?.claimed(claim, task: name, scheduledAt: scheduledAt, runID: runID, reason: reason, takenOverFrom: takenOverFrom)
        }
        return runID.description
    }

    private func claimed(_ claim: FireClaim, task name: String, scheduledAt: WallTime, runID: RunID, reason: String, takenOverFrom: String?) {
        guard let policy = policies[name], let owner else { return }
        switch claim {
        case .won(let revision, let lease):
            heldRetryDelay = .milliseconds(250)
            var fire = FleetFire(task: name, instant: scheduledAt.iso8601, host: hostName, runID: runID.description, state: .running)
            fire.takenOverFrom = takenOverFrom
            tasks[name, default: FleetTaskState()].runs[runID] = (fire, revision, policy.guardRunning)
            tasks[name]?.last = fire
            tasks[name]?.elsewhere[fire.instant] = nil
            tasks[name]?.totals[takenOverFrom == nil ? "ran_here" : "taken_over", default: 0] += 1
            if reason != "held", takenOverFrom == nil, Self.age(of: scheduledAt, at: owner.fleetClock.wallNow) > Self.lateClaim {
                // Won late (etcd was electing a leader): the next fire may wait for this run.
                let credit = min(Self.heldWhileAlive, (tasks[name]?.catchUp ?? 0) + 1)
                tasks[name]?.catchUp = credit
            }
            owner.submitClaimed(task: name, instant: scheduledAt, runID: runID, lease: lease) { [weak self] end in
                self?.runEnded(end, task: name, runID: runID)
            }
        case .elsewhere(let fire, let revision):
            heldRetryDelay = .milliseconds(250)
            if let why = Self.unfinished(fire), fire.host != hostName, takenOverFrom == nil {
                // Another host's run of it was cut short by its fence or its stop, or never
                // started: this claim is a takeover of the record, won by one host.
                return takeOver(fire, why: why, over: revision)
            }
            tasks[name, default: FleetTaskState()].totals["ran_elsewhere", default: 0] += 1
            tasks[name]?.last = fire
            if fire.state == .running {
                tasks[name]?.elsewhere[fire.instant] = (fire, owner.fleetClock.now)
                armCheck()
            }
            let how = fire.state == .running ? "running on" : "ran on"
            owner.recordNotRun(task: name, instant: scheduledAt, runID: RunID(fire.runID) ?? runID, outcome: .ranElsewhere,
                               detail: "\(how) \(fire.host) (run \(fire.runID)\(fire.outcome.map { ", \($0)" } ?? ""))", host: fire.host)
            retryHeld(name)
        case .previousRunning(let fire, _, orphan: true)
        where tasks[name]?.held.contains(where: { $0.instant.iso8601 == fire.instant && $0.runID.description == fire.runID }) ?? false:
            // This host's own claim of a fire it holds, whose answer was lost: that fire runs
            // first (its retry finds the claim and takes it as won), this one after it.
            hold(name, at: scheduledAt, cause: "waits for the held fire due at \(fire.instant), claimed here", runID: runID, failed: false)
            retryHeld(name)
        case .previousRunning(let fire, let revision, orphan: true)
        where (tasks[name]?.runs.isEmpty ?? true) && owner.activeCount(of: name) == 0 && !(tasks[name]?.claiming.contains(fire.instant) ?? false):
            // This host's own claim on its lease, which no run of its own holds: its answer was
            // lost and the fire given up. Freed, then this fire is claimed again.
            logger.warning("task \(name): freeing this host's claim of the fire due at \(fire.instant) (run \(fire.runID)), which was never run: its answer from etcd was lost")
            if let index = tasks[name]?.held.firstIndex(where: { $0.instant.iso8601 == fire.instant }),
               let held = tasks[name]?.held.remove(at: index) {
                // It was a held fire: given up for this later one, never retried beside the release.
                recordHeld(name, instant: held.instant, detail: "held (\(held.cause)); a later fire replaces it")
            }
            member.releaseOrphan(fire, runningRevision: revision, replyOn: owner.fleetQueue) { [weak self] released in
                guard let self else { return }
                if released {
                    self.fire(name, scheduledAt: scheduledAt, reason: reason)
                } else {
                    self.hold(name, at: scheduledAt, cause: "this host's claim of \(fire.instant) is not freed yet")
                }
            }
        case .previousRunning(let fire, _, _):
            logger.info("task \(name): the fire due at \(scheduledAt.iso8601) is skipped: the previous one still runs on \(fire.host) (run \(fire.runID); overlap = \"skip\" holds across the fleet)")
            owner.recordSkip(task: name, instant: scheduledAt)
            retryHeld(name)
        case .held(let cause):
            hold(name, at: scheduledAt, cause: cause, runID: runID)
        }
    }

    /// No claim can be made now: the fire waits for etcd, never runs here unclaimed. While
    /// the lease lives each held fire is kept (a call failed, the fleet still answers); without
    /// one only the latest, and the ones it replaces are recorded `held`.
    /// The run ID is kept: if the claim's answer was lost after etcd applied it, the next
    /// claim with the same ID finds this host's own and takes it as won.
    /// `failed`: a claim could not be made (not a fire waiting behind held ones): one more
    /// fire the task may queue behind their late runs.
    private func hold(_ name: String, at instant: WallTime, cause: String, runID given: RunID? = nil, failed: Bool = true) {
        guard let owner else { return }
        var state = tasks[name] ?? FleetTaskState()
        if let index = state.held.firstIndex(where: { $0.instant == instant }) {
            state.held[index].cause = cause
        } else {
            state.held.append(HeldFire(instant: instant, cause: cause, runID: given ?? owner.newRunID()))
            state.held.sort { $0.instant < $1.instant }
            state.totals["held", default: 0] += 1
            if failed { state.catchUp += 1 }
        }
        tasks[name] = state
        logger.info("task \(name): the fire due at \(instant.iso8601) is held: \(cause)")
        guard heldCause == nil else { return trimHeld(name, keeping: 1) }
        trimHeld(name, keeping: Self.heldWhileAlive)
        // The lease is good (one call failed: a member went, the call moved on): try again
        // soon rather than at the next change of the lease, which may never come.
        armHeldRetry()
    }

    /// The oldest held fires beyond `count` given up for the later ones, each recorded `held`.
    private func trimHeld(_ name: String, keeping count: Int) {
        guard let held = tasks[name]?.held, held.count > count else { return }
        tasks[name]?.held = Array(held.suffix(count))
        for fire in held.dropLast(count) {
            recordHeld(name, instant: fire.instant, detail: "held (\(fire.cause)); a later fire replaces it")
        }
    }

    private func armHeldRetry() {
        // A retry already armed stays where it is: a hold every second (a fire each second,
        // each waiting behind the held ones) must not push it out for ever.
        guard let owner, !heldRetryArmed else { return }
        if heldRetryTimer == nil {
            heldRetryTimer = owner.fleetClock.makeTimer(target: "held fleet fires: claim again") { [weak self] in
                self?.heldRetryArmed = false
                self?.retryHeldFires()
            }
        }
        // Backing off, so a claim refused for good (a role without the prefix) is not a loop.
        heldRetryArmed = true
        heldRetryTimer?.schedule(at: owner.fleetClock.now + heldRetryDelay)
        heldRetryDelay = min(heldRetryDelay * 2, .seconds(8))
    }

    /// Held fires claimed again while the lease is good; when it is not, the lease's
    /// return does it (`availability`).
    private func retryHeldFires() {
        guard heldCause == nil else { return }
        for name in policies.keys.sorted() { retryHeld(name) }
    }

    /// The task's oldest held fire claimed again, each beyond catch_up_window recorded
    /// `held`. With overlap = "skip" one at a time: the next when this one's claim is
    /// answered elsewhere or skipped, or its run's end is recorded, so that a fire run late
    /// does not make the next one skip.
    private func retryHeld(_ name: String) {
        guard heldCause == nil, let policy = policies[name], let owner else { return }
        let now = owner.fleetClock.wallNow
        while let next = tasks[name]?.held.first {
            if policy.guardRunning && busy(name) { return }
            tasks[name]?.held.removeFirst()
            guard Self.age(of: next.instant, at: now) <= policy.catchUpWindow else {
                recordHeld(name, instant: next.instant, detail: "held: \(next.cause); now beyond catch_up_window \(policy.catchUpWindow.compactDescription)")
                continue
            }
            fire(name, scheduledAt: next.instant, reason: "held", runID: next.runID)
            if policy.guardRunning { return }
        }
        if !busy(name) { tasks[name]?.catchUp = 0 }
    }

    /// A run of the task goes on here, or a claim of one of its fires is on its way.
    private func busy(_ name: String) -> Bool {
        !(tasks[name]?.runs.isEmpty ?? true) || !(tasks[name]?.claiming.isEmpty ?? true) || (owner?.activeCount(of: name) ?? 0) > 0
    }

    private func recordHeld(_ name: String, instant: WallTime, detail: String) {
        owner?.recordNotRun(task: name, instant: instant, runID: owner?.newRunID() ?? RunID(0), outcome: .held, detail: detail, host: nil)
    }

    static func age(of instant: WallTime, at now: WallTime) -> Duration {
        .seconds(now.secondsSinceEpoch - instant.secondsSinceEpoch) + .nanoseconds(Int64(now.nanoseconds) - Int64(instant.nanoseconds))
    }

    /// This host's run of a fire ended: its record goes to etcd, at once and until etcd
    /// takes it, and frees the fire's running key. A run stopped by the fence is recorded as
    /// run and fenced, with its times; one cut short by this host's stop as interrupted: a
    /// persistent task's fire is then run again by another host. A run that never started
    /// (refused at the start: the lease not known alive, the daemon stopping) releases its
    /// claim instead, so that another host may run the fire.
    private func runEnded(_ end: FleetRunEnd, task name: String, runID: RunID) {
        guard let run = tasks[name]?.runs.removeValue(forKey: runID), let owner else { return }
        guard end.startedAt != nil else {
            return member.releaseFire(run.fire, claimRevision: run.revision, guardRunning: run.guardRunning)
        }
        var fire = run.fire
        fire.state = .done
        fire.outcome = end.expiry == .fleetLeaseLost ? "fenced" : end.outcome.rawValue
        fire.interrupted = end.expiry == .fleetLeaseLost || end.expiry == .shutdown
        fire.startedAt = end.startedAt
        fire.finishedAt = end.finishedAt
        tasks[name]?.last = fire
        let instant = fire.instant
        member.recordFire(fire, claimRevision: run.revision, guardRunning: run.guardRunning, replyOn: owner.fleetQueue) { [weak self] outcome in
            // The running key is free now: the next held fire's turn.
            self?.retryHeld(name)
            // Given up by a stop (which says so itself, with every record it could not write):
            // the claim was not seen gone, and its lease may well live on.
            guard outcome == .refused else { return }
            self?.logger.warning("task \(name): the claim of the fire due at \(instant) was gone when the end of its run \(runID) reached etcd (this host's lease expired there); its record is kept here only, and another host may have run the fire again")
        }
    }

    // MARK: What the cluster says

    public func availability(_ available: Bool, cause: String?) {
        heldCause = available ? nil : cause
        guard available else {
            // No lease: only each task's latest held fire waits for its return.
            for name in tasks.keys.sorted() {
                trimHeld(name, keeping: 1)
                tasks[name]?.catchUp = 0
            }
            return
        }
        retryHeldFires()
        // Fires seen running elsewhere may have ended, or lost their host, meanwhile.
        checkFiresElsewhere()
    }

    /// Another host's claim vanished before its run's end was recorded: a takeover's cue.
    public func released(_ fire: FleetFire, why: FleetRelease) {
        guard policies[fire.task] != nil, fire.host != hostName else { return }
        tasks[fire.task]?.elsewhere[fire.instant] = nil
        takeOver(fire, why: why.explanation, over: nil)
    }

    /// A fire's key changed: a record of a run cut short by its host is a takeover's cue
    /// too (claimed over its revision, so one host wins).
    public func changed(_ fire: FleetFire, revision: Int64) {
        guard policies[fire.task] != nil else { return }
        if fire.state != .running { tasks[fire.task]?.elsewhere[fire.instant] = nil }
        if let why = Self.unfinished(fire), fire.host != hostName {
            takeOver(fire, why: why, over: revision)
        }
        if let last = tasks[fire.task]?.last, last.instant > fire.instant { return }
        tasks[fire.task, default: FleetTaskState()].last = fire
    }

    /// Why a fire's record leaves it for another host to run, if it does: a run cut short
    /// by its own host (its fence, or its stop), or a claim released before its run started.
    static func unfinished(_ fire: FleetFire) -> String? {
        switch fire.state {
        case .released: return FleetRelease.released.explanation
        case .done where fire.interrupted:
            return fire.outcome == "fenced" ? "whose run was stopped by its fence (recorded fenced)" : "whose run was cut short by its stop (recorded \(fire.outcome ?? "interrupted"))"
        case .done, .running: return nil
        }
    }

    private func takeOver(_ fire: FleetFire, why: String, over revision: Int64?) {
        guard let policy = policies[fire.task], let owner, let instant = WallTime(iso8601: fire.instant) else { return }
        let name = policy.name
        guard policy.persistent else {
            logger.notice("task \(name): the fire due at \(fire.instant) went unfinished on \(fire.host), \(why); the task is not persistent, so the fire is not run again")
            return
        }
        guard Self.age(of: instant, at: owner.fleetClock.wallNow) <= policy.catchUpWindow else {
            logger.notice("task \(name): the fire due at \(fire.instant) went unfinished on \(fire.host), \(why); it is beyond catch_up_window \(policy.catchUpWindow.compactDescription): not run again")
            return
        }
        guard owner.activeCount(of: name) == 0 || !policy.guardRunning, !(tasks[name]?.claiming.contains(fire.instant) ?? false) else { return }
        let runID = owner.newRunID()
        owner.persistScheduled(task: name, instant: instant)
        tasks[name, default: FleetTaskState()].claiming.insert(fire.instant)
        member.claimFire(task: name, instant: instant, runID: runID.description, guardRunning: policy.guardRunning, takenOverFrom: fire.host,
                         over: revision, replyOn: owner.fleetQueue) { [weak self] claim in
            guard let self else { return }
            self.tasks[name]?.claiming.remove(fire.instant)
            if case .won = claim {
                self.logger.notice("task \(name): taking over the fire due at \(fire.instant) from \(fire.host), \(why); run \(runID)",
                                   metadata: [JournalFields.messageIDKey: .string(MessageID.fleetTakeover.rawValue), "task": .string(name),
                                              "scheduled_at": .string(fire.instant), "run_id": .string(runID.description)])
            }
            self.claimed(claim, task: name, scheduledAt: instant, runID: runID, reason: "takeover", takenOverFrom: fire.host)
        }
    }

    /// The watch tells of a claim that vanished; this checks too, in case the watch was
    /// down when it did: every fire seen running elsewhere for longer than the lease TTL
    /// is read again. Armed only while there is such a fire.
    private func armCheck() {
        guard let owner else { return }
        if checkTimer == nil {
            checkTimer = owner.fleetClock.makeTimer(target: "fleet fires running elsewhere") { [weak self] in
                self?.checkFiresElsewhere()
            }
        }
        checkTimer?.schedule(at: owner.fleetClock.now + member.settings.leaseTTL)
    }

    private func checkFiresElsewhere() {
        guard let owner else { return }
        var pending = false
        for name in policies.keys.sorted() {
            for (instant, entry) in (tasks[name]?.elsewhere ?? [:]).sorted(by: { $0.key < $1.key }) {
                pending = true
                guard owner.fleetClock.now - entry.seenAt >= member.settings.leaseTTL else { continue }
                member.readFire(task: name, instant: instant, replyOn: owner.fleetQueue) { [weak self] result in
                    guard let self, let known = self.tasks[name]?.elsewhere[instant], let owner = self.owner else { return }
                    switch result {
                    case .success(nil):
                        self.tasks[name]?.elsewhere[instant] = nil
                        self.takeOver(known.fire, why: FleetRelease.leaseExpired.explanation, over: nil)
                    case .success(let found?) where found.fire.state != .running:
                        self.tasks[name]?.elsewhere[instant] = nil
                        self.changed(found.fire, revision: found.revision)
                    case .success(let found?) where found.fire.runID != known.fire.runID:
                        self.tasks[name]?.elsewhere[instant] = (found.fire, owner.fleetClock.now)
                    default:
                        self.tasks[name]?.elsewhere[instant] = (known.fire, owner.fleetClock.now)
                    }
                }
            }
        }
        if pending { armCheck() }
    }

    // MARK: The dump

    public func describe(_ task: String) -> DumpValue {
        let state = tasks[task] ?? FleetTaskState()
        return .object([
            .init("totals", .object(Self.outcomes.map { .init($0, .int(Int64(state.totals[$0] ?? 0))) })),
            .init("last_fire", state.last?.dumpValue ?? .null),
            .init("held_fire", state.held.last.map { .string($0.instant.iso8601) } ?? .null),
            .init("held_cause", state.held.last.map { .string($0.cause) } ?? .null),
            .init("held_fires", .int(Int64(state.held.count))),
            .init("running_here", .int(Int64(state.runs.count))),
            .init("running_elsewhere", .int(Int64(state.elsewhere.count))),
        ])
    }
}
