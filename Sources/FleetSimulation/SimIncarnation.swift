import Logging
import WatchkeeperCore

/// What a host keeps across restarts: its state file (the ledger of files handled here, each
/// task's latest scheduled instant).
final class SimHostState {
    var handled: Set<String> = []
    var lastScheduled: [String: WallTime] = [:]
    var incarnations = 0
}

/// One life of a host's daemon, from its start to its crash or clean stop: the daemon's own
/// fleet code (`FleetMember` on its cluster turn, `FleetFires` on its jobs turn) over the
/// simulated etcd and clock, with the simulation's engine, scheduler and inbox around it.
// @unchecked Sendable: the simulation runs on one thread, its loop.
final class SimIncarnation: FleetFireOwner, FleetListener, FleetFileListener, @unchecked Sendable {
    let simulation: FleetSimulation
    let index: Int
    let name: String
    let settings: ClusterSettings
    let persistent: SimHostState
    var alive = true
    var accepting = true
    let clock: SimClock
    let clusterQueue: SimQueue
    let jobsQueue: SimQueue
    let watchingQueue: SimQueue
    let client: SimulatedEtcd.Client
    let member: FleetMember
    var fires: FleetFires!
    var engine: SimEngine!
    var inbox: SimInbox!

    init(simulation: FleetSimulation, index: Int, persistent: SimHostState, logger: Logger) {
        self.simulation = simulation
        self.index = index
        self.persistent = persistent
        name = "host\(index)"
        let scenario = simulation.scenario
        let memberName = index < scenario.memberNames.count ? scenario.memberNames[index] : name
        var settings = ClusterSettings(endpoints: [SimulatedEtcd.Client.endpoint], name: memberName)
        settings.prefix = FleetSimulation.prefix
        settings.leaseTTL = .nanoseconds(scenario.leaseTTL)
        self.settings = settings
        let loop = simulation.loop
        // A restarted host's monotonic clock starts again elsewhere (a new boot or not).
        let base = UInt64(1_000_000_000_000) * UInt64(index + 1) + UInt64(persistent.incarnations) * 7_000_000_000_000
        // Everything of this life stops with it: set once `self` exists.
        var isAlive: () -> Bool = { false }
        clock = SimClock(loop: loop, rate: scenario.clockRates[index], base: base,
                         wallBase: FleetScenario.epoch + scenario.wallSkews[index], alive: { isAlive() })
        clusterQueue = SimQueue(loop: loop, alive: { isAlive() })
        jobsQueue = SimQueue(loop: loop, alive: { isAlive() })
        watchingQueue = SimQueue(loop: loop, alive: { isAlive() })
        client = SimulatedEtcd.Client(etcd: simulation.etcd, host: index, turn: clusterQueue, alive: { isAlive() })
        member = FleetMember(settings: settings, store: client, clock: clock, queue: clusterQueue,
                             identity: FleetMemberIdentity(hostName: "sim-\(index)", machineID: "machine-\(index)",
                                                           bootID: "boot-\(index)-\(persistent.incarnations)", pid: Int64(1000 + persistent.incarnations)),
                             logger: logger)
        isAlive = { [weak self] in self?.alive ?? false }
        fires = FleetFires(member: member, owner: self, logger: logger)
        fires.configure(scenario.tasks.map {
            FleetTaskPolicy(name: $0.name, persistent: $0.persistent, catchUpWindow: .seconds(3_600), guardRunning: true, maxConcurrent: 1)
        })
        engine = SimEngine(host: self, maxJobs: scenario.maxJobs[index], ruleLimit: scenario.ruleLimit)
        let clock = self.clock
        engine.starts = FleetStarts(member: member, queue: jobsQueue, clock: { clock.now }) { [weak self] stopBy in
            self?.engine.fence(stopBy: stopBy)
        }
        inbox = SimInbox(host: self)
    }

    var loop: SimLoop { simulation.loop }
    var etcd: SimulatedEtcd { simulation.etcd }
    var history: SimHistory { simulation.history }
    var prefix: String { settings.prefix }

    // MARK: Life

    func start() {
        member.start(listener: self, files: self, jobs: engine.starts)
        for task in simulation.scenario.tasks { armNextFire(task) }
        catchUp()
        loop.after(.seconds(1)) { [weak self] in
            guard let self, self.alive else { return }
            self.inbox.scan()
        }
    }

    func crash() {
        alive = false
        accepting = false
        engine.crash()
        client.drop()
    }

    /// SIGTERM: the drain, then the clean stop; `stopped` when the daemon has exited.
    func terminate(stopped: @escaping @Sendable () -> Void) {
        accepting = false
        engine.drain(grace: simulation.scenario.shutdownGrace) { [weak self] in
            // As the lifecycle does: the watching queue's last turn, then the cluster's stop.
            self?.watchingQueue.enqueue { [weak self] in
                self?.member.stop { [weak self] in
                    self?.alive = false
                    stopped()
                }
            }
        }
    }

    /// The end of the run: no fire, file or job starts any more.
    func quiesce() {
        accepting = false
        engine.stopStarting()
    }

    // MARK: The scheduler

    /// Fleet-aligned instants: whole intervals of the wall clock.
    private func armNextFire(_ task: FleetScenario.Task) {
        let wall = clock.wallNow
        let nanos = wall.secondsSinceEpoch * 1_000_000_000 + Int64(wall.nanoseconds)
        let next = (nanos / task.interval + 1) * task.interval
        loop.after(next - nanos) { [weak self] in
            guard let self, self.alive, self.accepting else { return }
            self.fires.fire(task.name, scheduledAt: Self.wall(next), reason: "schedule")
            self.armNextFire(task)
        }
    }

    static func wall(_ nanos: Int64) -> WallTime {
        WallTime(secondsSinceEpoch: nanos / 1_000_000_000, nanoseconds: Int32(nanos % 1_000_000_000))
    }

    /// `persistent`: the latest fire missed while the daemon was down, as TaskScheduler.catchUp.
    private func catchUp() {
        for task in simulation.scenario.tasks where task.persistent {
            guard let last = persistent.lastScheduled[task.name] else { continue }
            let lastNanos = last.secondsSinceEpoch * 1_000_000_000 + Int64(last.nanoseconds)
            let now = clock.wallNow
            let nowNanos = now.secondsSinceEpoch * 1_000_000_000 + Int64(now.nanoseconds)
            let missed = (nowNanos - lastNanos) / task.interval
            guard missed >= 1 else { continue }
            fires.fire(task.name, scheduledAt: Self.wall(lastNanos + missed * task.interval), reason: "catch-up")
        }
    }

    // MARK: The inbox

    /// As the watcher: the file's job goes to the engine, which claims it at a free slot.
    func admit(_ name: String) {
        guard let file = simulation.directory.files[name] else { return }
        let runID = newRunID()
        let fleet = FleetJob.file(rule: "inbox", relative: Array(name.utf8), size: file.size, modifiedNanoseconds: file.modified)
        let job = fileJob(name, fleet: fleet, runID: runID) { [weak self] end in
            self?.watchingQueue.enqueue { [weak self] in self?.fileFinished(name, end: end) }
        }
        jobsQueue.enqueue { [weak self] in self?.engine.submit(job) }
    }

    /// As FleetInbox.finished: held files wait for the lease; a file handled here
    /// and gone from the inbox has its record bound to the record lease.
    private func fileFinished(_ name: String, end: FleetRunEnd) {
        switch end.outcome {
        case .held:
            inbox.hold(name)
        case .ok:
            inbox.inFlight.remove(name)
            persistent.handled.insert(name)
            if !simulation.directory.isPresent(name) { member.forgetFile(rule: "inbox", relative: Array(name.utf8)) }
        default:
            inbox.inFlight.remove(name)
        }
    }

    func fileJob(_ name: String, fleet: FleetJob, runID: RunID, ended: @escaping (FleetRunEnd) -> Void) -> SimEngine.Job {
        let scenario = simulation.scenario
        let fails = loop.random.chance(scenario.fileFailures)
        let moves = !fails && loop.random.chance(scenario.fileMoves)
        let job = SimEngine.Job(kind: .file(name: name), fleet: fleet, runID: runID, duration: loop.random.nanos(scenario.fileDurations), fails: fails,
                                stubborn: loop.random.chance(scenario.stubbornJobs), ended: ended)
        // The job's last act: the move to done/ (a job that finds its file gone fails).
        job.finishing = { [weak self] outcome in
            if outcome == .ok, moves { self?.simulation.directory.remove(name) }
        }
        return job
    }

    // MARK: FleetFireOwner

    var fleetQueue: any FleetQueue { jobsQueue }
    var fleetClock: any FleetClock { clock }

    func newRunID() -> RunID { RunID(loop.random.next()) }

    func activeCount(of task: String) -> Int { engine.activeCount(of: task) }

    func submitClaimed(task: String, instant: WallTime, runID: RunID, lease: Int64, ended: @escaping (FleetRunEnd) -> Void) {
        guard let spec = simulation.scenario.tasks.first(where: { $0.name == task }) else { return }
        engine.submit(SimEngine.Job(kind: .task(name: task, instant: instant), fleet: .claimed(FleetClaimHold(lease: lease, revision: 0)), runID: runID,
                                    duration: loop.random.nanos(spec.durations), fails: false, stubborn: loop.random.chance(simulation.scenario.stubbornJobs),
                                    ended: ended))
    }

    func recordNotRun(task: String, instant: WallTime, runID: RunID, outcome: RunOutcome, detail: String, host: String?) {
        simulation.notRun[outcome.rawValue, default: 0] += 1
    }

    func recordSkip(task: String, instant: WallTime) {
        simulation.notRun["skipped", default: 0] += 1
    }

    func persistScheduled(task: String, instant: WallTime) {
        if let last = persistent.lastScheduled[task], last >= instant { return }
        persistent.lastScheduled[task] = instant
    }

    // MARK: FleetListener, FleetFileListener

    var fleetFileQueue: any FleetQueue { watchingQueue }

    func fleetAvailability(_ available: Bool, cause: String?) { fires.availability(available, cause: cause) }
    func fleetFireReleased(_ fire: FleetFire, why: FleetRelease) { fires.released(fire, why: why) }
    func fleetFireChanged(_ fire: FleetFire, revision: Int64) { fires.changed(fire, revision: revision) }

    func fleetFileReleased(rule: String, relative: [UInt8]) {
        inbox.see(String(decoding: relative, as: UTF8.self))
    }

    func fleetFilesAvailable() { inbox.retryHeld() }
}
