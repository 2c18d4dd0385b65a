import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// The scheduler's side of fleet tasks (docs/fleet.md): the fleet-aligned timer of `every`,
/// and what `FleetFires` (the decisions, Cluster/FleetFires.swift) asks of its owner: the
/// engine, the task's history and records, timers on this queue.
extension TaskScheduler: FleetListener, FleetFireOwner {
    public var fleetQueue: any FleetQueue { queue }
    public var fleetClock: any FleetClock { DispatchFleetClock(queue: queue, sources: context.sources, owner: "task scheduler") }

    func configureFleet() {
        fleet?.configure(order.compactMap { tasks[$0] }.filter { $0.settings.fleet == .one }.map { task in
            FleetTaskPolicy(name: task.settings.name, persistent: task.settings.persistent, catchUpWindow: task.settings.catchUpWindow,
                            guardRunning: task.settings.overlap == .skip, maxConcurrent: task.settings.maxConcurrent)
        })
    }

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

    /// A fleet fire, claimed in etcd before it runs (FleetFires.fire).
    @discardableResult
    func fireFleet(_ task: ScheduledTask, scheduledAt: WallTime, reason: String) -> String? {
        fleet?.fire(task.settings.name, scheduledAt: scheduledAt, reason: reason)
    }

    // MARK: FleetFireOwner

    public func newRunID() -> RunID { .random() }

    public func activeCount(of task: String) -> Int { engine.activeCount(of: JobKey(.task, task)) }

    public func submitClaimed(task name: String, instant: WallTime, runID: RunID, lease: Int64, ended: @escaping (FleetRunEnd) -> Void) {
        guard let task = tasks[name] else { return }
        let host = cluster?.settings.name
        engine.submitClaimed(task.key, subject: .schedule(scheduledAt: instant), runID: runID, claim: FleetClaimHold(lease: lease, revision: 0)) { [weak self] completion in
            self?.finished(completion, task: task, host: host)
            let final = completion.final
            ended(FleetRunEnd(outcome: final.outcome, startedAt: completion.records.first { $0.startedAt != nil }?.startedAt,
                              finishedAt: final.finishedAt, expiry: final.expiry))
        }
    }

    public func recordNotRun(task name: String, instant: WallTime, runID: RunID, outcome: RunOutcome, detail: String, host: String?) {
        guard let task = tasks[name] else { return }
        let subject = JobSubject.schedule(scheduledAt: instant)
        let record = JobEngine.notRunRecord(task.key, runID: runID, subject: subject, outcome: outcome, detail: detail)
        engine.recordNotRun(record, key: task.key, subject: subject)
        finished(JobCompletion(key: task.key, subject: subject, records: [record]), task: task, host: host)
    }

    public func recordSkip(task name: String, instant: WallTime) {
        guard let task = tasks[name] else { return }
        recordSkip(task, scheduledAt: instant)
    }

    public func persistScheduled(task name: String, instant: WallTime) {
        persist(.taskScheduled(task: name, at: instant))
    }

    // MARK: FleetListener

    public func fleetAvailability(_ available: Bool, cause: String?) { fleet?.availability(available, cause: cause) }

    public func fleetFireReleased(_ fire: FleetFire, why: FleetRelease) { fleet?.released(fire, why: why) }

    public func fleetFireChanged(_ fire: FleetFire, revision: Int64) { fleet?.changed(fire, revision: revision) }
}
