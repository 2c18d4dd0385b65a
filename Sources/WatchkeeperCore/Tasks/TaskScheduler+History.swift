import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The task state that outlives the daemon (written by the StateStore, read through a
/// StateReader), catch-up of missed runs, and the scheduler's part of the dump.
extension TaskScheduler {
    // MARK: Persistence

    /// The store opened the file at start (and said if it had to rebuild it); this queue
    /// reads it through a connection of its own. Without a store (unit tests) nothing is kept.
    func openStore(directory: String) {
        guard let stateStore else { return }
        switch stateStore.openReader() {
        case .success(let opened):
            reader = opened.reader
            storeProblem = nil
            return
        case .failure(let why):
            storeProblem = why.reason
        }
        logger.error("task state will not be kept across restarts (no catch-up of missed runs): \(storeProblem ?? "")")
    }

    /// Submitted to the store, which writes it in order and retries what fails (a full
    /// disk) until written, saying so itself; this queue never waits for it.
    func persist(_ write: StateWrite) {
        guard reader != nil, let stateStore else { return }
        stateStore.submit(write)
    }

    /// The clean stop: the reader goes before the store closes the file last.
    public func closeStore() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        reader?.close()
        reader = nil
    }

    func restoreHistory(_ task: ScheduledTask) {
        guard let reader else { return }
        let runs: [StoredRun]
        do {
            runs = try reader.history(task: task.settings.name, limit: Self.historyLength)
        } catch {
            logger.warning("task \(task.settings.name): unable to read its run history: \(error); the dump starts with an empty one")
            return
        }
        task.history = runs.reversed().map { run in
            var exit: ProcessExit?
            if let code = run.exitCode { exit = .exited(code) } else if let signal = run.signal { exit = .signaled(signal, coreDumped: false) }
            return RunRecord(name: run.task, runID: run.runID, attempt: run.attempt, outcome: RunOutcome(rawValue: run.outcome) ?? .failed,
                             scheduledAt: run.scheduledAt, startedAt: run.startedAt, finishedAt: run.finishedAt,
                             duration: .nanoseconds(run.durationNanoseconds), exit: exit, expiry: run.expiry.flatMap(ExpiryReason.init(rawValue:)),
                             lateness: nil, detail: nil)
        }
        task.lastOutcome = task.history.last?.outcome
    }

    /// `watchkeeper history TASK`: the last runs from the state database, newest first, in
    /// the shape of io.watchkeeper.Control's `Run`. Asked of the store from this queue, after
    /// every run recorded here: those were submitted before the question, so a run that just
    /// ended is in the answer.
    public func history(task name: String, limit: Int, reply: @escaping @Sendable (Result<[DumpValue], VarlinkError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard reader != nil, let stateStore else {
            return reply(.failure(ControlInterface.ErrorName.unavailable.error([.init("reason", .string("the task state database is not open: \(storeProblem ?? "unknown")"))])))
        }
        stateStore.taskHistory(task: name, limit: limit) { result in
            switch result {
            case .failure(let error):
                reply(.failure(ControlInterface.ErrorName.unavailable.error([.init("reason", .string("\(error)"))])))
            case .success(let runs):
                reply(.success(runs.map(Self.historyRow)))
            }
        }
    }

    private static func historyRow(_ run: StoredRun) -> DumpValue {
        .object([
            .init("run_id", .string(run.runID)),
            .init("attempt", .int(Int64(run.attempt))),
            .init("outcome", .string(run.outcome)),
            .init("scheduled_at", run.scheduledAt.map { .string($0.iso8601) } ?? .null),
            .init("started_at", run.startedAt.map { .string($0.iso8601) } ?? .null),
            .init("finished_at", .string(run.finishedAt.iso8601)),
            .init("duration_s", .double(Double(run.durationNanoseconds) / 1e9)),
            .init("exit_code", run.exitCode.map { .int(Int64($0)) } ?? .null),
            .init("signal", run.signal.map { .string(HandledSignals.name($0)) } ?? .null),
            .init("expiry", run.expiry.map { .string($0) } ?? .null),
            .init("host", run.host.map { .string($0) } ?? .null),
        ])
    }

    /// `persistent = true`: the latest run that fell due while the daemon was not running
    /// is run once now, with its scheduled time, if it is within catch_up_window; if even
    /// the latest is older, it is recorded missed. Earlier missed runs are counted in the
    /// log line: running them all would only repeat the same work.
    func catchUp(_ task: ScheduledTask) {
        let settings = task.settings
        guard let reader else { return }
        let state: StoredTaskState?
        do {
            state = try reader.state(task: settings.name)
        } catch {
            logger.error("task \(settings.name): unable to read its state, so a run missed while watchkeeper was down is not caught up: \(error)")
            return
        }
        guard let last = state?.lastScheduledAt else { return }
        let now = WallTime.now()
        guard let (due, missed) = Self.latestMissed(settings.schedule, zone: task.zone, after: last, before: now) else { return }
        let age = Duration.seconds(now.secondsSinceEpoch - due.secondsSinceEpoch) + .nanoseconds(Int64(now.nanoseconds) - Int64(due.nanoseconds))
        let earlier = missed > 1 ? "; \(missed - 1) earlier missed run(s) are not run" : ""
        if age <= settings.catchUpWindow {
            logger.notice("task \(settings.name): the run due at \(due.iso8601) was missed while watchkeeper was not running; running it now (\(age.compactDescription) late, catch_up_window \(settings.catchUpWindow.compactDescription))\(earlier)")
            fire(task, scheduledAt: due, reason: "catch-up")
        } else {
            let subject = JobSubject.schedule(scheduledAt: due)
            let record = JobEngine.notRunRecord(task.key, runID: .random(), subject: subject, outcome: .missed,
                                                detail: "due \(age.compactDescription) ago, beyond catch_up_window \(settings.catchUpWindow.compactDescription)\(earlier)")
            persist(.taskScheduled(task: settings.name, at: due))
            engine.recordNotRun(record, key: task.key, subject: subject)
            finished(JobCompletion(key: task.key, subject: subject, records: [record]), task: task)
        }
    }

    /// The latest instant the schedule fell due after `last` and before `now`, and how many
    /// fell due in between. A cron walk stops after `cronWalkLimit` steps and takes the
    /// latest it reached, which is only ever later than the true one by not at all for any
    /// outage shorter than that many fires.
    static let cronWalkLimit = 100_000

    static func latestMissed(_ schedule: TaskSchedule, zone: TimeZoneRules?, after last: WallTime, before now: WallTime) -> (WallTime, Int)? {
        switch schedule {
        case .every(let interval):
            let step = max(1, interval.nanosecondsClamped)
            let elapsed = (now.secondsSinceEpoch - last.secondsSinceEpoch) * 1_000_000_000 + Int64(now.nanoseconds) - Int64(last.nanoseconds)
            let count = elapsed / step
            guard count >= 1 else { return nil }
            return (last.adding(nanoseconds: count * step), Int(count))
        case .cron, .calendar:
            guard let zone else { return nil }
            var latest: Int64?
            var count = 0
            var cursor = last.secondsSinceEpoch
            while count < cronWalkLimit, let next = schedule.nextFire(after: cursor, in: zone), next < now.secondsSinceEpoch {
                latest = next
                cursor = next
                count += 1
            }
            return latest.map { (WallTime(secondsSinceEpoch: $0, nanoseconds: 0), count) }
        case .manual:
            return nil
        }
    }

    // MARK: Dump

    func describeNext(_ task: ScheduledTask) -> String {
        guard let next = task.nextFire else { return task.settings.schedule == .manual ? "only when triggered" : "none" }
        let now = WallTime.now()
        let delta = Duration.seconds(next.wall.secondsSinceEpoch - now.secondsSinceEpoch)
            + .nanoseconds(Int64(next.wall.nanoseconds) - Int64(now.nanoseconds))
        return "\(next.wall.iso8601) (in \(delta > .zero ? delta.compactDescription : "0s"))"
    }

    public func describeForDump() -> DumpValue {
        let now = MonotonicInstant.now
        let entries: [DumpValue] = order.compactMap { tasks[$0] }.map { task in
            let settings = task.settings
            let schedule: String
            switch settings.schedule {
            case .every(let interval): schedule = "every \(interval.compactDescription)"
            case .cron(_, let zone), .calendar(_, let zone): schedule = "\(settings.schedule.wallClockDescription) (\(zone ?? "local time"))"
            case .manual: schedule = "manual"
            }
            return .object([
                .init("name", .string(settings.name)),
                .init("schedule", .string(schedule)),
                .init("next_run", .string(describeNext(task))),
                .init("overlap", .string(settings.overlap.rawValue)),
                .init("fleet", .string(settings.fleet.rawValue)),
                .init("fleet_state", task.settings.fleet == .one ? fleet?.describe(task.settings.name) ?? .null : .null),
                .init("budget", .string(settings.job.budget.compactDescription)),
                .init("running", .array(engine.describeRuns(of: task.key, now: now))),
                .init("waiting_for_current_run", .bool(task.runAfterCurrent != nil)),
                .init("queued_run_id", task.runAfterCurrent.map { .string($0.runID.description) } ?? .null),
                .init("after", .array(settings.after.map { .string($0) })),
                .init("held_for", .array((task.held?.waitingFor.sorted() ?? []).map { .string($0) })),
                .init("skipped_in_a_row", .int(Int64(task.skipStreak))),
                .init("totals", .object(RunOutcome.allCases.compactMap { outcome in
                    task.totals[outcome].map { .init(outcome.rawValue, .int(Int64($0))) }
                })),
                .init("last_runs", .array(task.history.reversed().prefix(5).map(\.dumpValue))),
            ])
        }
        return .object([
            .init("state_file", reader.map { .string($0.path) } ?? .null),
            .init("state_problem", storeProblem.map { .string($0) } ?? .null),
            .init("tasks", .array(entries)),
            .init("fleet_held_cause", fleet?.heldCause.map { .string($0) } ?? .null),
        ])
    }
}
