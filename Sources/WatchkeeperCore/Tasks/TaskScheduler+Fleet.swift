import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// A fleet task's part of the scheduler's state (docs/fleet.md).
struct FleetTaskState {
    /// This host's runs of fires it won: the claim's revision, to record the end against.
    var runs: [RunID: (fire: FleetFire, revision: Int64, guardRunning: Bool)] = [:]
    /// Fires other hosts claimed and are running, by instant: taken over if their claim
    /// vanishes without a record (a persistent task inside catch_up_window).
    var elsewhere: [String: (fire: FleetFire, seenAt: MonotonicInstant)] = [:]
    /// The latest fire that could not be claimed (no etcd lease); earlier ones are
    /// recorded `held` as a later one replaces them.
    var held: (instant: WallTime, cause: String, runID: RunID)?
    /// The last fire this host knows of, wherever it ran.
    var last: FleetFire?
    /// ran_here, ran_elsewhere, taken_over, held: watchkeeper_fleet_fires_total.
    var totals: [String: UInt64] = [:]
}

extension TaskScheduler: FleetListener {
    public var fleetQueue: SubsystemQueue { queue }

    static let fleetOutcomes = ["ran_here", "ran_elsewhere", "taken_over", "held"]

    // MARK: Fires

    /// `every` for a fleet task: whole intervals since the Unix epoch plus the task's
    /// jitter, on the wall clock, so that every host fires at the same instants whatever
    /// time it started.
    func scheduleFleetEvery(_ task: ScheduledTask, interval: Duration, after now: WallTime) {
        let step = max(1_000_000, interval.nanosecondsClamped)
        let offset = jitterOffset(for: task.settings).nanosecondsClamped % step
        let nowNanos = now.secondsSinceEpoch * 1_000_000_000 + Int64(now.nanoseconds)
        let periods = (nowNanos - offset) / step + 1
        let next = periods * step + offset
        let target = WallTime(secondsSinceEpoch: next / 1_000_000_000, nanoseconds: Int32(next % 1_000_000_000))
        task.nextFire = (nil, target)
        setTimer(task, target: "every \(interval.compactDescription), fleet-aligned") { [weak self] in
            guard let self else { return }
            let current = WallTime.now()
            if current < target.adding(nanoseconds: -1_000_000_000) {
                // The wall clock was set back since the timer was armed: not due yet.
                self.scheduleFleetEvery(task, interval: interval, after: current)
                return
            }
            self.fire(task, scheduledAt: target, reason: "schedule")
            self.scheduleFleetEvery(task, interval: interval, after: max(current, target))
        }
        task.timer?.schedule(wallDeadline: DispatchWallTime(timespec: timespec(tv_sec: Int(target.secondsSinceEpoch), tv_nsec: Int(target.nanoseconds))))
    }

    /// A fleet fire: this host's overlap first (no etcd call for a fire it would skip),
    /// then the claim in etcd; the run starts only if this host wins it.
    @discardableResult
    func fireFleet(_ task: ScheduledTask, scheduledAt: WallTime, reason: String, takenOverFrom: String? = nil, runID given: RunID? = nil) -> String? {
        guard let cluster else { return nil }
        let active = engine.activeCount(of: task.key)
        if active > 0 && (task.settings.overlap == .skip || active >= task.settings.maxConcurrent) {
            recordSkip(task, scheduledAt: scheduledAt)
            return nil
        }
        let runID = given ?? RunID.random()
        persist(.taskScheduled(task: task.settings.name, at: scheduledAt))
        let guardRunning = task.settings.overlap == .skip
        let name = task.settings.name
        cluster.claimFire(task: name, instant: scheduledAt, runID: runID.description, guardRunning: guardRunning, takenOverFrom: takenOverFrom,
                          replyOn: queue) { [weak self] claim in
            guard let self, let task = self.tasks[name] else { return }
            self.claimed(claim, task: task, scheduledAt: scheduledAt, runID: runID, reason: reason, takenOverFrom: takenOverFrom)
        }
        return runID.description
    }

    private func claimed(_ claim: FireClaim, task: ScheduledTask, scheduledAt: WallTime, runID: RunID, reason: String, takenOverFrom: String?) {
        let name = task.settings.name
        let subject = JobSubject.schedule(scheduledAt: scheduledAt)
        switch claim {
        case .won(let revision):
            heldRetryDelay = .milliseconds(250)
            guard let cluster else { return }
            var fire = FleetFire(task: name, instant: scheduledAt.iso8601, host: cluster.settings.name, runID: runID.description, state: .running)
            fire.takenOverFrom = takenOverFrom
            task.fleet.runs[runID] = (fire, revision, task.settings.overlap == .skip)
            task.fleet.last = fire
            task.fleet.elsewhere[fire.instant] = nil
            task.fleet.totals[takenOverFrom == nil ? "ran_here" : "taken_over", default: 0] += 1
            if let from = takenOverFrom {
                logger.notice("task \(name): taking over the fire due at \(scheduledAt.iso8601) from \(from), whose etcd lease expired before its run ended; run \(runID)",
                              metadata: [JournalFields.messageIDKey: .string(MessageID.fleetTakeover.rawValue), "task": .string(name),
                                         "scheduled_at": .string(scheduledAt.iso8601), "run_id": .string(runID.description)])
            }
            engine.submit(task.key, subject: subject, runID: runID, replyOn: nil) { [weak self] completion in
                self?.fleetRunEnded(completion, task: task, runID: runID)
            }
        case .elsewhere(let fire):
            heldRetryDelay = .milliseconds(250)
            task.fleet.totals["ran_elsewhere", default: 0] += 1
            task.fleet.last = fire
            if fire.state == .running {
                task.fleet.elsewhere[fire.instant] = (fire, .now)
                armFleetCheck()
            }
            let how = fire.state == .running ? "running on" : "ran on"
            let record = JobEngine.notRunRecord(task.key, runID: RunID(fire.runID) ?? runID, subject: subject, outcome: .ranElsewhere,
                                                detail: "\(how) \(fire.host) (run \(fire.runID)\(fire.outcome.map { ", \($0)" } ?? ""))")
            engine.recordNotRun(record, key: task.key, subject: subject)
            finished(JobCompletion(key: task.key, subject: subject, records: [record]), task: task, host: fire.host)
        case .previousRunning(let fire, let revision) where fire.host == cluster?.settings.name && task.fleet.runs.isEmpty && engine.activeCount(of: task.key) == 0:
            // This host's own claim, which no run of its own holds: its answer was lost and
            // the fire given up. Freed, then this fire is claimed again.
            logger.warning("task \(name): freeing this host's claim of the fire due at \(fire.instant) (run \(fire.runID)), which was never run: its answer from etcd was lost")
            cluster?.releaseOrphan(fire, runningRevision: revision, replyOn: queue) { [weak self] result in
                guard let self, let task = self.tasks[name] else { return }
                if case .success(true) = result {
                    self.fireFleet(task, scheduledAt: scheduledAt, reason: reason)
                } else {
                    self.hold(task, at: scheduledAt, cause: "unable to free this host's unanswered claim of \(fire.instant)")
                }
            }
        case .previousRunning(let fire, _):
            logger.info("task \(name): the fire due at \(scheduledAt.iso8601) is skipped: the previous one still runs on \(fire.host) (run \(fire.runID); overlap = \"skip\" holds across the fleet)")
            recordSkip(task, scheduledAt: scheduledAt)
        case .held(let cause):
            hold(task, at: scheduledAt, cause: cause, runID: runID)
        }
    }

    /// No claim can be made now: the fire waits for etcd, never runs here unclaimed. Only
    /// the latest held fire of a task is kept (as `persistent` catches up only the latest);
    /// the one it replaces is recorded `held`.
    /// The run ID is kept: if the claim's answer was lost after etcd applied it, the next
    /// claim with the same ID finds this host's own and takes it as won.
    private func hold(_ task: ScheduledTask, at instant: WallTime, cause: String, runID: RunID = .random()) {
        if let previous = task.fleet.held, previous.instant != instant {
            recordHeld(task, instant: previous.instant, detail: "held while no etcd quorum answered (\(previous.cause)); a later fire replaces it")
        }
        if task.fleet.held?.instant != instant { task.fleet.totals["held", default: 0] += 1 }
        task.fleet.held = (instant, cause, task.fleet.held?.instant == instant ? task.fleet.held!.runID : runID)
        logger.info("task \(task.settings.name): the fire due at \(instant.iso8601) is held: \(cause)")
        // The lease is good (one call failed: a member went, the call moved on): try again
        // soon rather than at the next change of the lease, which may never come.
        if fleetHeldCause == nil { armHeldRetry() }
    }

    private func armHeldRetry() {
        if heldRetryTimer == nil {
            heldRetryTimer = context.sources.makeTimer(owner: "task scheduler", target: "held fleet fires: claim again", on: queue) { [weak self] in
                self?.retryHeldFires()
            }
        }
        // Backing off, so a claim refused for good (a role without the prefix) is not a loop.
        heldRetryTimer?.schedule(after: heldRetryDelay)
        heldRetryDelay = min(heldRetryDelay * 2, .seconds(8))
    }

    /// Held fires claimed again while the lease is good; when it is not, the lease's
    /// return does it (`fleetAvailability`).
    private func retryHeldFires() {
        guard fleetHeldCause == nil else { return }
        let now = WallTime.now()
        for name in order {
            guard let task = tasks[name], task.settings.fleet == .one, let held = task.fleet.held else { continue }
            task.fleet.held = nil
            let age = Duration.seconds(now.secondsSinceEpoch - held.instant.secondsSinceEpoch)
            if age <= task.settings.catchUpWindow {
                fireFleet(task, scheduledAt: held.instant, reason: "held", runID: held.runID)
            } else {
                recordHeld(task, instant: held.instant, detail: "held: \(held.cause); now beyond catch_up_window \(task.settings.catchUpWindow.compactDescription)")
            }
        }
    }

    private func recordHeld(_ task: ScheduledTask, instant: WallTime, detail: String) {
        let subject = JobSubject.schedule(scheduledAt: instant)
        let record = JobEngine.notRunRecord(task.key, runID: .random(), subject: subject, outcome: .held, detail: detail)
        engine.recordNotRun(record, key: task.key, subject: subject)
        finished(JobCompletion(key: task.key, subject: subject, records: [record]), task: task)
    }

    /// This host's run of a fire ended: recorded here, then in etcd (if the claim is still
    /// this host's), which frees the fire's running key.
    private func fleetRunEnded(_ completion: JobCompletion, task: ScheduledTask, runID: RunID) {
        finished(completion, task: task, host: cluster?.settings.name)
        guard let cluster, let run = task.fleet.runs.removeValue(forKey: runID) else { return }
        var fire = run.fire
        fire.state = .done
        fire.outcome = completion.final.outcome.rawValue
        fire.startedAt = completion.records.first?.startedAt
        fire.finishedAt = completion.final.finishedAt
        task.fleet.last = fire
        let name = task.settings.name
        let instant = fire.instant
        cluster.recordFire(fire, claimRevision: run.revision, guardRunning: run.guardRunning, replyOn: queue) { [weak self] result in
            switch result {
            case .success(true): break
            case .success(false):
                self?.logger.warning("task \(name): the claim of the fire due at \(instant) was gone when its run \(runID) ended (this host's lease expired); its record is kept here only, and another host may have run the fire again")
            case .failure(let error):
                self?.logger.warning("task \(name): unable to record the end of run \(runID) in etcd: \(error); the claim is released with this host's lease")
            }
        }
    }

    // MARK: What the cluster says

    public func fleetFence(stopBy: MonotonicInstant) {
        for task in tasks.values where task.settings.fleet == .one {
            for (runID, run) in task.fleet.runs where engine.cancel(runID: runID, detail: "cancelled: this host lost its etcd lease before the run started") {
                task.fleet.runs[runID] = nil
                _ = run
            }
            engine.expire(task.key, reason: .fleetLeaseLost, by: stopBy)
        }
    }

    public func fleetAvailability(_ available: Bool, cause: String?) {
        fleetHeldCause = available ? nil : cause
        guard available else { return }
        retryHeldFires()
        // Fires seen running elsewhere may have ended, or lost their host, meanwhile.
        checkFiresElsewhere()
    }

    public func fleetFireReleased(_ fire: FleetFire) {
        guard let task = tasks[fire.task], task.settings.fleet == .one, let cluster, fire.host != cluster.settings.name else { return }
        task.fleet.elsewhere[fire.instant] = nil
        takeOver(task, fire: fire)
    }

    public func fleetFireChanged(_ fire: FleetFire) {
        guard let task = tasks[fire.task], task.settings.fleet == .one else { return }
        if fire.state == .done { task.fleet.elsewhere[fire.instant] = nil }
        if let last = task.fleet.last, last.instant > fire.instant { return }
        task.fleet.last = fire
    }

    private func takeOver(_ task: ScheduledTask, fire: FleetFire) {
        let name = task.settings.name
        guard let instant = WallTime(iso8601: fire.instant) else { return }
        guard task.settings.persistent else {
            logger.notice("task \(name): \(fire.host) lost its etcd lease during its run \(fire.runID) of the fire due at \(fire.instant); the task is not persistent, so the fire is not run again")
            return
        }
        let now = WallTime.now()
        let age = Duration.seconds(now.secondsSinceEpoch - instant.secondsSinceEpoch)
        guard age <= task.settings.catchUpWindow else {
            logger.notice("task \(name): \(fire.host) lost its run \(fire.runID) of the fire due at \(fire.instant), which is beyond catch_up_window \(task.settings.catchUpWindow.compactDescription): not run again")
            return
        }
        fireFleet(task, scheduledAt: instant, reason: "takeover", takenOverFrom: fire.host)
    }

    /// The watch tells of a claim that vanished; this checks too, in case the watch was
    /// down when it did: every fire seen running elsewhere for longer than the lease TTL
    /// is read again. Armed only while there is such a fire.
    func armFleetCheck() {
        guard let cluster else { return }
        if fleetCheckTimer == nil {
            fleetCheckTimer = context.sources.makeTimer(owner: "task scheduler", target: "fleet fires running elsewhere", on: queue) { [weak self] in
                self?.checkFiresElsewhere()
            }
        }
        fleetCheckTimer?.schedule(after: cluster.settings.leaseTTL)
    }

    func checkFiresElsewhere() {
        guard let cluster else { return }
        var pending = false
        for task in tasks.values where task.settings.fleet == .one {
            for (instant, entry) in task.fleet.elsewhere {
                pending = true
                guard MonotonicInstant.now - entry.seenAt >= cluster.settings.leaseTTL else { continue }
                let name = task.settings.name
                cluster.readFire(task: name, instant: instant, replyOn: queue) { [weak self] result in
                    guard let self, let task = self.tasks[name], let known = task.fleet.elsewhere[instant] else { return }
                    switch result {
                    case .success(nil):
                        task.fleet.elsewhere[instant] = nil
                        self.takeOver(task, fire: known.fire)
                    case .success(let fire?) where fire.state == .done:
                        task.fleet.elsewhere[instant] = nil
                        self.fleetFireChanged(fire)
                    case .success(let fire?) where fire.runID != known.fire.runID:
                        task.fleet.elsewhere[instant] = (fire, .now)
                    default:
                        task.fleet.elsewhere[instant] = (known.fire, .now)
                    }
                }
            }
        }
        if pending { armFleetCheck() }
    }

    // MARK: The dump

    func describeFleet(_ task: ScheduledTask) -> DumpValue {
        guard task.settings.fleet == .one else { return .null }
        return .object([
            .init("totals", .object(Self.fleetOutcomes.map { .init($0, .int(Int64(task.fleet.totals[$0] ?? 0))) })),
            .init("last_fire", task.fleet.last?.dumpValue ?? .null),
            .init("held_fire", task.fleet.held.map { .string($0.instant.iso8601) } ?? .null),
            .init("held_cause", task.fleet.held.map { .string($0.cause) } ?? .null),
            .init("running_here", .int(Int64(task.fleet.runs.count))),
            .init("running_elsewhere", .int(Int64(task.fleet.elsewhere.count))),
        ])
    }
}
