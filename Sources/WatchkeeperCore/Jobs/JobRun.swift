import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// What a run tells the engine that started it: one weak reference instead of three
/// closures per run (five allocations on the way to each exec).
protocol JobRunOwner: AnyObject {
    /// Its progress or status changed.
    func runProgressed(_ run: JobRun)
    /// Its main process exited but others of its group live on: they were sent stop_signal,
    /// and the owner kills them after `grace`.
    func run(_ run: JobRun, leftProcesses child: ChildProcess, grace: Duration)
    /// Its record, exactly once.
    func run(_ run: JobRun, ended record: RunRecord)
    /// Its child's setup failed for want of descriptors or processes, learnt after `start`
    /// returned `.started` (a spawn that did not wait for the exec): as `.shortOfResources`,
    /// nothing ran and nothing is recorded, and the job goes back in line.
    func run(_ run: JobRun, wasShortOfResources cause: SpawnError)
}

/// One run of a job, from spawn to its record: owns the child, the budget timers, the
/// progress channel and the expiration handler. Confined to the jobs queue.
// @unchecked Sendable: confined to the jobs queue.
final class JobRun: @unchecked Sendable {
    let request: JobRequest
    private let context: JobContext
    /// A hook of this run spawns through the same context.
    var contextForHooks: JobContext { context }
    private var machine: JobMachine
    private var child: ChildProcess?
    private var expireHandler: ChildProcess?
    /// Waiting for the on_expire handler to end: the hook after an expiry runs after it.
    private var afterExpireHandler: [() -> Void] = []
    /// The run's last lines, kept only when it has an on_failure or on_success hook.
    let outputTail: OutputTail?
    private var timers: [JobDeadline] = []
    private var killTimer: JobDeadline?
    /// When a squeezed expiry sequence must be over (a fleet fence); nil: the configured one.
    private var sequenceEnd: MonotonicInstant?
    /// Its progress pipe, once spawned.
    private var progressChannel: RunProgress?
    /// Told of the run's progress, leftovers and record; weak, as the engine outlives it.
    private weak var owner: (any JobRunOwner)?
    private var recorded = false
    private(set) var startedAt = MonotonicInstant(nanoseconds: 0)
    private(set) var startedWall: WallTime?
    private var deadlineWall: WallTime?

    /// The run's ID as the engine keys it (`request.runID` is its text).
    let id: RunID

    init(request: JobRequest, id: RunID, context: JobContext, owner: any JobRunOwner) {
        self.request = request
        self.id = id
        self.context = context
        self.machine = JobMachine(hasExpireHandler: request.settings.onExpire != nil, stopSignal: request.settings.stopSignal)
        self.outputTail = request.settings.onFailure != nil || request.settings.onSuccess != nil ? OutputTail() : nil
        self.owner = owner
    }

    /// "watch inbox run 0123456789abcdef", made once, after the spawn: its timers, progress
    /// pipe and log lines all name the run.
    private(set) lazy var label: String = request.label

    var pid: pid_t? { child?.pid }
    var phase: JobPhase { machine.phase }
    var progress: ProgressParser { progressChannel?.parser ?? ProgressParser() }
    private var logger: Logger { context.logger }

    // MARK: Start

    enum StartResult {
        case started
        /// Ended before it began; its record went to the owner.
        case failed
        /// Nothing started and nothing was recorded: the daemon is short of descriptors or
        /// processes, not the job at fault. The engine puts the job back in line.
        case shortOfResources(SpawnError)
    }

    func start() -> StartResult {
        dispatchPrecondition(condition: .onQueue(context.queue.queue))
        startedAt = .now
        startedWall = .now()
        let budget = request.settings.budget
        deadlineWall = startedWall!.adding(nanoseconds: budget.nanosecondsClamped)
        do {
            let spawned = try spawnMain()
            scheduleBudget()
            logger.debug("started \(label) as pid \(spawned.pid) in \(Duration.nanoseconds(Int64(spawned.spawnToExecNanoseconds)).compactDescription)")
            return .started
        } catch where error.isResourceShortage {
            return .shortOfResources(error)
        } catch {
            endUnstarted(error)
            return .failed
        }
    }

    /// A run whose process never ran its program: the job failed, unless it is a fleet job
    /// whose exec came past its lease's fence point, which did not start at all. It has no
    /// start time and is never retried, and its claim is released: a fire's as at the gate
    /// (cancelled: another host may run it), a file's as for a claim won too late (held: the
    /// file waits here to be claimed again, FleetInbox).
    private func endUnstarted(_ error: SpawnError) {
        guard error.step == .execDeadline else { return finish(outcome: .failed, exit: nil, expiry: nil, detail: "\(error)") }
        let why = "not started, as its exec came after this host's etcd lease stopped being known alive (the daemon was stopped or starved between the start and the exec); its claim is released"
        if case .schedule = request.subject {
            return finish(outcome: .cancelled, exit: nil, expiry: nil, started: false, detail: "cancelled: " + why)
        }
        finish(outcome: .held, exit: nil, expiry: nil, started: false, detail: "held: " + why)
    }

    /// Every pipe end and the pidfd are owned values: on a failed spawn they close as they
    /// go out of scope; on success they pass to the read sources that close them.
    private func spawnMain() throws(SpawnError) -> (pid: pid_t, spawnToExecNanoseconds: UInt64) {
        let output = try outputPlan(forJob: true)
        // Enlarged: room for bursts between two progress reads.
        let progressPipe = try context.pipeReserve.takeProgress()
        let plan = self.request.plan ?? JobSpawnPlan(key: self.request.key, settings: self.request.settings, context: context)
        var request = try spawnRequest(command: plan.command, shared: plan.environment,
                                       extra: output.environment.isEmpty ? Self.progressEnvironment : Self.progressEnvironment + output.environment,
                                       stdout: output.stdout, stderr: output.stderr, descriptor3: progressPipe.writeEnd.rawValue)
        // The child has its own copy of stdin once spawned; ours closes at the end of this scope.
        var stdin: OwnedFileDescriptor?
        if let input = self.request.standardInput { stdin = try OwnedPipe.filled(with: input) }
        request.standardInput = stdin?.rawValue
        // With other jobs waiting behind this one, the jobs queue goes on at the clone; a
        // failed setup comes back at the child's exit (spawnFailed), as it would have been
        // thrown here. A lone job still waits for its exec: nothing else is held up, and
        // under CLONE_VFORK its child gets the spawning thread's CPU at once, where cloned
        // without waiting it waited for a CPU of its own on a busy machine (latency-path.md,
        // "the clone that does not wait (implementation)").
        request.reportsLater = !self.request.nothingElseWaiting
        request.execDeadline = self.request.execDeadline
        var cgroup: JobCgroup?
        let spawned = try context.spawn(request, runID: self.request.runID, limits: self.request.settings.limits, cgroup: &cgroup, forJob: true)
        let started = (pid: spawned.pid, spawnToExecNanoseconds: spawned.spawnToExecNanoseconds)
        // Our write ends stay open until the read sources are cancelled (see ChildProcess).
        child = ChildProcess(name: self.request.name, kind: self.request.kind, runID: self.request.runID, owner: label, spawned: spawned,
                             output: output, streams: ("stdout", "stderr"), context: context, cgroup: cgroup, tail: outputTail) { [weak self] status in
            guard let self else { return }
            if let failure = self.child?.spawnFailure { return self.spawnFailed(failure) }
            self.perform(self.machine.handle(.exited(status)))
        }
        progressChannel = RunProgress(watching: progressPipe, pid: started.pid, label: label, context: context, owner: self)
        return started
    }

    private static let progressEnvironment = [("WATCHKEEPER_PROGRESS_FD", Array("3".utf8))]

    /// The job's (`forJob`, from the reserve), or a hook's or handler's (pipes of its own).
    func outputPlan(forJob: Bool) throws(SpawnError) -> JobOutputPlan {
        try JobOutputPlan(route: request.settings.output, name: request.name, sink: context.sink, pipes: forJob ? context.pipeReserve : nil) { [logger] in
            logger.warning("\($0)")
        }
    }

    /// Who the job (and its handlers and hooks) runs as; nil: the daemon's user.
    func credentials() throws(SpawnError) -> Credentials? {
        let settings = request.settings
        return try (settings.user != nil || settings.group != nil) ? Credentials.lookup(user: settings.user, group: settings.group) : nil
    }

    /// argv with placeholders expanded inside single elements, and an environment built
    /// from scratch: nothing of the daemon's own (NOTIFY_SOCKET, JOURNAL_STREAM, …) leaks.
    /// `descriptor3` becomes the child's fd 3: a job's progress pipe, a hook's output file.
    /// Both are written into the jobs queue's SpawnStrings, valid until the next spawn
    /// request: spawn it before making another.
    func spawnRequest(command: JobSettings.Command, extra: [(String, [UInt8])], stdout: Int32, stderr: Int32,
                      descriptor3: Int32?, placeholders more: [String: [UInt8]] = [:]) throws(SpawnError) -> SpawnRequest {
        try spawnRequest(command: JobCommand(command, name: request.name), shared: request.plan?.environment, extra: extra, stdout: stdout,
                         stderr: stderr, descriptor3: descriptor3, placeholders: more)
    }

    /// `shared`: the group's environment block, for a job run as the daemon's user (nil: made here).
    private func spawnRequest(command: JobCommand, shared: JobEnvironment?, extra: [(String, [UInt8])], stdout: Int32, stderr: Int32,
                              descriptor3: Int32?, placeholders more: [String: [UInt8]] = [:]) throws(SpawnError) -> SpawnRequest {
        let settings = request.settings
        let credentials = try self.credentials()
        let strings = context.spawnStrings()
        command.write(to: strings, JobPlaceholders(request: request, startedWall: startedWall, pid: child?.pid, more: more))
        strings.addOwn("WATCHKEEPER_RUN_ID", request.runID.utf8)
        strings.addOwn("WATCHKEEPER_ATTEMPT") { $0.appendDecimal(self.request.attempt) }
        if let deadlineWall { strings.addOwn("WATCHKEEPER_DEADLINE") { $0.appendISO8601(deadlineWall) } }
        if let scheduled = request.scheduledAt { strings.addOwn("WATCHKEEPER_SCHEDULED_AT") { $0.appendISO8601(scheduled) } }
        request.subject.writeEnvironment(to: strings)
        for (name, value) in extra { strings.addOwn(name, value) }
        // A job run as another user gets that user's account; the others share the block
        // the engine built for the group.
        let account = credentials == nil ? context.daemonAccount : credentials.flatMap { Account.lookup(uid: $0.uid) } ?? context.daemonAccount
        strings.finishEnvironment(shared: (credentials == nil ? shared : nil)
            ?? JobEnvironment(key: request.key, settings: settings, daemonEnvironment: context.daemonEnvironment, account: account))
        var spawn = SpawnRequest(
            strings: strings,
            workingDirectory: settings.workingDirectory,
            credentials: credentials,
            standardOutput: stdout,
            standardError: stderr,
            progressDescriptor: descriptor3,
            // Set in the child before exec: low priority also yields the CPU (base + 10), and
            // no job inherits the nice value of the worker thread that spawned it.
            niceness: ProcessSpawner.niceness(for: settings.priority)
        )
        spawn.yieldAfterExec = request.nothingElseWaiting
        return spawn
    }

    // MARK: Budget

    private func scheduleBudget() {
        let budget = request.settings.budget
        let targets = request.plan?.timerTargets ?? JobSpawnPlan.timerTargets(request.name, budget)
        if let fraction = request.settings.warnAt {
            addTimer(after: .nanoseconds(Int64(Double(budget.nanosecondsClamped) * fraction)), target: targets.warnAt) { [weak self] in
                guard let self else { return }
                self.perform(self.machine.handle(.warnPointReached))
            }
        }
        addTimer(after: budget, target: targets.budget) { [weak self] in
            self?.expire(.budget)
        }
    }

    @discardableResult
    private func addTimer(after delay: Duration, target: String, _ body: @escaping () -> Void) -> JobDeadline {
        let timer = context.deadlines.schedule(after: delay, owner: label, target: target, handler: body)
        timers.append(timer)
        return timer
    }

    /// The one way a job is ended early: budget, shutdown and replacement all come here.
    /// With `deadline`, the whole sequence (on_expire, stop signal, kill_grace) is squeezed
    /// to end by then: a fenced fleet job must be gone before its lease can expire.
    func expire(_ reason: ExpiryReason, by deadline: MonotonicInstant? = nil) {
        let alreadyEnding = machine.phase != .running
        if let deadline { sequenceEnd = min(sequenceEnd ?? deadline, deadline) }
        perform(machine.handle(.expire(reason)))
        if let deadline, alreadyEnding, machine.phase != .finished {
            // Already ending on a longer schedule (its budget ran out): SIGKILL by the deadline.
            addTimer(after: max(.zero, deadline - .now), target: "\(request.name) fence") { [weak self] in
                guard let self, self.machine.phase != .finished else { return }
                self.child?.signalGroup(SIGKILL)
            }
        }
    }

    /// How long is left of a squeezed sequence, or `configured` if nothing squeezes it.
    private func squeezed(_ configured: Duration, share: Double = 1) -> Duration {
        guard let sequenceEnd else { return configured }
        let left = max(.zero, sequenceEnd - .now)
        return min(configured, .nanoseconds(Int64(Double(left.nanosecondsClamped) * share)))
    }

    // MARK: Actions

    private func perform(_ actions: [JobAction]) {
        for action in actions {
            switch action {
            case .logBudgetWarning:
                let used = Int((request.settings.warnAt ?? 0) * 100)
                logger.warning("\(label) has used \(used)% of its \(request.settings.budget.compactDescription) budget",
                               metadata: [request.kind.rawValue: .string(request.name), "run_id": .string(request.runID)])
            case .logExpiring(let reason):
                let why: String
                switch reason {
                case .budget: why = "its budget of \(request.settings.budget.compactDescription) is exhausted"
                case .shutdown: why = "the daemon is stopping and shutdown_grace ran out"
                case .replaced: why = "overlap = \"replace\" and a new run is due"
                case .cancelled: why = "it was cancelled (watchkeeper cancel \(request.runID))"
                case .fleetLeaseLost: why = "this host could not renew its etcd lease, and another host may take the fire over once it expires"
                }
                logger.warning("\(label) is expiring: \(why)",
                               metadata: [request.kind.rawValue: .string(request.name), "run_id": .string(request.runID), "expiry": .string(reason.rawValue),
                                          JournalFields.messageIDKey: .string(MessageID.jobExpiring.rawValue)])
            case .runExpireHandler(let reason):
                runExpireHandler(reason)
            case .signalGroup(let signal):
                child?.signalGroup(signal)
            case .startKillGrace:
                let grace = squeezed(request.settings.killGrace)
                killTimer = addTimer(after: grace, target: "\(request.name) kill_grace") { [weak self] in
                    guard let self else { return }
                    if self.machine.phase != .finished {
                        let configured = self.request.settings.killGrace
                        // A fence squeezes the sequence: say the time the job had, and why.
                        let within = grace < configured
                            ? "within \(grace.compactDescription) (its kill_grace of \(configured.compactDescription), cut short so that it ends before this host's etcd lease can expire)"
                            : "within kill_grace \(configured.compactDescription)"
                        self.logger.warning("\(self.label) did not stop \(within): SIGKILL to \(self.child?.containerDescription ?? "its process group")")
                    }
                    self.perform(self.machine.handle(.killGraceElapsed))
                }
            case .reapLeftovers(let expired):
                reapLeftovers(expired: expired)
            case .record(let outcome, let status, let reason):
                var detail: String?
                if let kills = child?.oomKills, kills > 0 {
                    let limit = request.settings.limits.memoryMax.map { " at its memory_max \(JobLimits.sizeText($0))" } ?? ""
                    detail = "the OOM killer ended \(kills) of its processes\(limit)"
                }
                // The record follows the job's last lines into the log; a sink that is behind
                // delays it, within the channels' final deadlines, and holds nothing else.
                let finishedAt = MonotonicInstant.now
                let finishedWall = WallTime.now()
                guard let child else {
                    finish(outcome: outcome, exit: status, expiry: reason, detail: detail)
                    break
                }
                child.closeOutputs { [weak self] in
                    self?.finish(outcome: outcome, exit: status, expiry: reason, detail: detail, endedAt: (finishedAt, finishedWall))
                }
            }
        }
    }

    private func reapLeftovers(expired: Bool) {
        guard let child, child.groupHasMembers else {
            self.child?.closeOutputs()
            self.child?.releaseContainment()
            return
        }
        if expired {
            // The cgroup's SIGKILL reaches a setsid escapee too; the cgroup goes once empty.
            child.signalGroup(SIGKILL)
            child.releaseContainment()
        } else {
            logger.warning("\(label) exited but left processes in \(child.containerDescription): sending \(HandledSignals.name(request.settings.stopSignal)), SIGKILL after \(request.settings.killGrace.compactDescription)")
            child.signalGroup(request.settings.stopSignal)
            owner?.run(self, leftProcesses: child, grace: request.settings.killGrace)
        }
        child.closeOutputs()
    }

    private func runExpireHandler(_ reason: ExpiryReason) {
        guard let command = request.settings.onExpire, let pid = child?.pid else {
            perform(machine.handle(.expireHandlerEnded))
            return
        }
        do {
            let output = try outputPlan(forJob: false)
            let elapsed = startedAt.elapsed()
            let spawnRequest = try self.spawnRequest(command: command, extra: [
                ("WATCHKEEPER_EXPIRE_REASON", Array(reason.rawValue.utf8)),
                ("WATCHKEEPER_PID", Array(String(pid).utf8)),
                ("WATCHKEEPER_ELAPSED_SECONDS", Array(String(elapsed.components.seconds).utf8)),
            ] + output.environment, stdout: output.stdout, stderr: output.stderr, descriptor3: nil)
            // Its own cgroup: the job's is killed while the handler may still run.
            var cgroup: JobCgroup?
            let spawned = try context.spawn(spawnRequest, runID: request.runID, suffix: "-on-expire", limits: JobLimits(), cgroup: &cgroup,
                                            forJob: false)
            // Squeezed, the handler gets half of what is left; the stop signal and SIGKILL the rest.
            let handlerBudget = squeezed(request.settings.onExpireBudget, share: 0.5)
            let logger = self.logger
            let label = self.label
            expireHandler = ChildProcess(name: request.name, kind: request.kind, runID: request.runID, owner: label, spawned: spawned,
                                         output: output, streams: ("on_expire stdout", "on_expire stderr"), context: context, cgroup: cgroup,
                                         killAfter: handlerBudget, onKill: { budget in
                                             logger.warning("\(label): on_expire handler exceeded its \(budget.compactDescription) budget; SIGKILL")
                                         }) { [weak self] status in
                logger.info("\(label): on_expire handler ended (\(status))")
                guard let self else { return }
                self.expireHandler?.releaseContainment()
                self.perform(self.machine.handle(.expireHandlerEnded))
                let waiting = self.afterExpireHandler
                self.afterExpireHandler = []
                for body in waiting { body() }
            }
        } catch {
            logger.error("\(label): unable to run on_expire handler: \(error)")
            perform(machine.handle(.expireHandlerEnded))
        }
    }

    /// `body` runs once no on_expire handler of this run runs any more: at once, or when it ends.
    func whenExpireHandlerEnded(_ body: @escaping () -> Void) {
        guard let handler = expireHandler, handler.exit == nil else { return body() }
        afterExpireHandler.append(body)
    }

    /// The child's setup or exec failed after `start` returned (the spawn did not wait):
    /// the run ends as `start` ends one whose spawn threw. Nothing of the job ran, so its
    /// pipes hold nothing and its cgroup nothing to wait for.
    func spawnFailed(_ error: SpawnError) {
        child?.closeOutputs()
        child?.releaseContainment()
        guard error.isResourceShortage else { return endUnstarted(error) }
        stopTimersAndProgress()
        guard !recorded else { return }
        recorded = true
        owner?.run(self, wasShortOfResources: error)
    }

    // MARK: Finish

    private func stopTimersAndProgress() {
        for timer in timers { timer.cancel() }
        timers.removeAll()
        progressChannel?.stop()
    }

    /// `endedAt`: when the job's process exited, if its record waited for its output after.
    /// `started`: false for a run whose program never began (its record has no start time).
    private func finish(outcome: RunOutcome, exit: ProcessExit?, expiry: ExpiryReason?, started: Bool = true, detail: String?,
                        endedAt: (MonotonicInstant, WallTime)? = nil) {
        stopTimersAndProgress()
        let now = endedAt?.0 ?? .now
        let record = RunRecord.ran(request, outcome: outcome, startedAt: started ? startedWall : nil, finishedAt: endedAt?.1 ?? .now(),
                                   duration: now - startedAt, exit: exit, expiry: expiry, detail: detail)
        guard !recorded else { return }
        recorded = true
        owner?.run(self, ended: record)
    }

    func describe(now: MonotonicInstant) -> DumpValue {
        let elapsed = now - startedAt
        let left = request.settings.budget - elapsed
        var fields: [DumpField] = [
            .init("run_id", .string(request.runID)),
            .init("pid", child.map { .int(Int64($0.pid)) } ?? .null),
            .init("phase", .string(phaseName)),
            .init("elapsed", .string(elapsed.compactDescription)),
            .init("budget_left", .string(left > .zero ? left.compactDescription : "0s")),
            // Numbers for `watchkeeper status`'s budget bar, with the warning point marked.
            .init("elapsed_s", .double(elapsed.secondsDouble)),
            .init("budget_s", .double(request.settings.budget.secondsDouble)),
            .init("warn_at_s", request.settings.warnAt.map { .double(request.settings.budget.secondsDouble * $0) } ?? .null),
            .init("progress", progress.progress.map { .double($0) } ?? .null),
            .init("status", progress.status.map { .string($0) } ?? .null),
            .init("progress_updates", .int(Int64(progress.updates))),
        ]
        // An age, not a "since the last dump" flag: building a dump changes nothing.
        fields.append(.init("last_progress_ago_s", progressChannel?.lastUpdateAt.map { .double((now - $0).secondsDouble) } ?? .null))
        if request.attempt > 1 { fields.append(.init("attempt", .int(Int64(request.attempt)))) }
        return .object(fields)
    }

    /// The drain's last resort, when the expiry sequence did not end the job: SIGKILL to
    /// its group, and its last output, if still waiting for a sink, dropped.
    func killGroup() {
        child?.signalGroup(SIGKILL)
        child?.stopWaitingForSinks()
    }

    var phaseName: String {
        switch machine.phase {
        case .running: return "running"
        case .expiring(let reason): return "expiring (\(reason.rawValue)): on_expire running"
        case .stopping(let reason): return "expiring (\(reason.rawValue)): \(HandledSignals.name(request.settings.stopSignal)) sent"
        case .killing(let reason): return "expiring (\(reason.rawValue)): SIGKILL sent"
        case .finished: return child?.isWaitingForSink == true ? "finished: its last output waits for the log sink" : "finished"
        }
    }
}

extension JobRun: RunProgressOwner {
    func progressChanged() { owner?.runProgressed(self) }
}
