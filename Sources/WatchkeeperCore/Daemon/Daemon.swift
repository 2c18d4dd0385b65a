import CWatchkeeperSystem
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

public struct RunOptions: Sendable {
    public var configPath: String
    public var logLevelOverride: Logger.Level?
    public var environment: [String: String]
    /// DispatchTime nanoseconds at the top of main, for uptime and time-to-READY.
    public var processStart: UInt64

    public init(configPath: String, logLevelOverride: Logger.Level?, environment: [String: String], processStart: UInt64) {
        self.configPath = configPath
        self.logLevelOverride = logLevelOverride
        self.environment = environment
        self.processStart = processStart
    }
}

/// The lifecycle owner: holds the configuration, turns signals into lifecycle
/// events, and runs the actions the state machine returns. Everything it owns is
/// touched only on the lifecycle queue.
public final class Daemon: DumpContributor, @unchecked Sendable {
    public let lifecycleQueue = SubsystemQueue(name: "lifecycle", qos: .userInitiated)
    public let signalsQueue = SubsystemQueue(name: "signals", qos: .userInitiated)
    public let watchdogQueue = SubsystemQueue(name: "watchdog", qos: .userInitiated)
    public let diagnosticsQueue = SubsystemQueue(name: "diagnostics", qos: .utility)
    /// The job engine and the task scheduler, which asks it directly what runs.
    public let jobsQueue = SubsystemQueue(name: "jobs", qos: .default)
    public let watchingQueue = SubsystemQueue(name: "watching", qos: .default)
    /// The state file's one writer: the ledger, the task state and history.
    public let stateQueue = SubsystemQueue(name: "state", qos: .default)
    /// The control socket: its listener, connections and deadlines.
    public let controlQueue = SubsystemQueue(name: "control", qos: .userInitiated)
    public let metricsQueue = SubsystemQueue(name: "metrics", qos: .utility)

    let options: RunOptions
    let sink: LogSink
    let logger: Logger
    let notifier: SystemdNotifier
    /// How jobs are held together and limited: decided once at start.
    let containment: JobContainment
    /// The network jobs get, as the unit left it: read once at start.
    let jobNetwork = JobNetwork.probe()
    private let sources = SourceRegistry()
    // Internal, not private: Daemon+Control answers the control socket's calls with them.
    var engine: JobEngine!
    private var watchdog: Watchdog!
    var stateDump: StateDump!
    private var signals: SignalSources!
    var scheduler: TaskScheduler!
    var watcher: DirectoryWatcher!
    var store: StateStore!
    var control: ControlServer!
    /// `metrics.render { text in … }`: the Prometheus text, as `watchkeeper metrics` shows it.
    var metrics: MetricsExporter!

    // Confined to the lifecycle queue.
    var machine = LifecycleMachine()
    var configuration: Configuration
    var generation: Int64 = 1
    var loadedAt = WallTime.now()
    var lastReload: (at: WallTime, errors: ConfigErrors?)?
    private var readyAfter: Duration?
    private var drainStartedAt: UInt64?
    private var drainOutcome: DrainReport?
    var reloadInProgress = false
    /// `watchkeeper reload` callers, answered when the reload they asked for is done;
    /// those who asked during a reload wait for the one after it.
    var reloadWaiters: [ControlReply] = []
    var nextReloadWaiters: [ControlReply] = []
    /// Held for the daemon's life; the kernel releases it when the process ends.
    private var stateLock: StateDirectoryLock?
    /// The runtime directory's: a second daemon there would run without a control socket
    /// and overwrite this one's state.json.
    var runtimeLock: StateDirectoryLock?
    var reloadAgain = false
    /// Reads and checks the configuration on reload; not watched by the watchdog, since a
    /// slow parse there harms nothing else.
    let configQueue = SubsystemQueue(name: "config", qos: .utility)
    private var drainExtender: RegisteredTimer?
    /// The daemon's own descriptors once everything was open, before READY=1.
    private var descriptorsHeldAtStart = Daemon.descriptorsForTheDaemonAtLeast
    /// When the engine's current drain phase ends, as it last said (it tells, this queue
    /// never asks: a jobs queue that is behind must not hold the EXTEND_TIMEOUT_USEC pings).
    private var drainPhaseDeadline: UInt64?
    /// The tasks subsystem's view for STATUS=, pushed from its queue.
    private var jobSummary: (running: Int, text: String) = (0, "")
    private var statusThrottle = StatusThrottle(intervalNanoseconds: 500_000_000)
    /// Jobs queue only: job changes are summed up at most every `jobSummaryInterval`, and
    /// handed to this queue only when the summary changed. Once per job, the summary and
    /// the hop cost ~3 % of the daemon's CPU in a burst (perf, watchkeeper-bench watch).
    private var jobSummaryTimer: RegisteredTimer?
    private var jobSummaryPending = false
    private var jobSummarySent: (running: Int, text: String) = (0, "")
    private static let jobSummaryInterval: Duration = .milliseconds(100)

    /// Loads the configuration, starts every subsystem, and never returns: the
    /// process ends in `finishStopping` (exit 0) or on a fatal start-up error.
    public static func run(options: RunOptions) -> Never {
        let configuration: Configuration
        switch ConfigLoader.load(path: options.configPath, environment: options.environment) {
        case .success(let loaded):
            configuration = loaded
        case .failure(let errors):
            StandardError.write(errors.description + "\n")
            StandardError.write("watchkeeper: unable to start: \(options.configPath) has \(errors.total) error(s)\n")
            Glibc.exit(ExitCode.configuration)
        }
        HandledSignals.ignoreBrokenPipe()
        let sink = LogSink(
            target: LogSink.detectTarget(environment: options.environment),
            level: options.logLevelOverride ?? configuration.daemon.logLevel,
            problemCapacity: configuration.daemon.recentProblems
        )
        LoggingSystem.bootstrap { label in WatchkeeperLogHandler(label: label, sink: sink) }
        let daemon = Daemon(options: options, configuration: configuration, sink: sink)
        daemon.start()
        dispatchMain()
    }

    init(options: RunOptions, configuration: Configuration, sink: LogSink) {
        self.options = options
        self.configuration = configuration
        self.sink = sink
        self.logger = Logger(label: "watchkeeper")
        self.notifier = SystemdNotifier(environment: options.environment)
        let gated = [lifecycleQueue, signalsQueue, watchdogQueue, diagnosticsQueue, jobsQueue, watchingQueue, controlQueue, metricsQueue]
        let monitored = gated + [stateQueue]
        // The state queue is left out of the watchdog's gate: a state disk that hangs blocks
        // only its writes (held in order, shown as stuck in the dump), while watching and jobs
        // go on; a restart by systemd would not unhang the disk and would lose what waits.
        watchdog = Watchdog(queue: watchdogQueue, monitored: gated, notifier: notifier, logger: logger,
                            registry: sources, systemdInterval: SystemdNotifier.watchdogInterval())
        // Before any job exists: under systemd this moves the daemon into its own leaf cgroup.
        containment = JobContainment.setUp()
        let jobContext = JobContext(queue: jobsQueue, sink: sink, logger: logger, sources: sources, daemonEnvironment: options.environment,
                                    containment: containment)
        engine = JobEngine(context: jobContext, maxJobs: configuration.daemon.maxJobs)
        store = StateStore(queue: stateQueue, sources: sources, logger: logger)
        scheduler = TaskScheduler(engine: engine)
        scheduler.stateStore = store
        watcher = DirectoryWatcher(queue: watchingQueue, engine: engine)
        watcher.store = store
        control = ControlServer(queue: controlQueue, sources: sources, logger: logger, backend: self)
        metrics = MetricsExporter(queue: metricsQueue, contributors: [self, watchdog, engine, watcher], sources: sources, logger: logger,
                                  settings: configuration.daemon)
        engine.metrics = metrics.jobMetrics
        stateDump = StateDump(queue: diagnosticsQueue, contributors: [self, watchdog, engine, scheduler, watcher, store, control, metrics], queues: monitored, sources: sources,
                              sink: sink, notifier: notifier, logger: logger, processStart: options.processStart,
                              settings: configuration.daemon)
        signals = SignalSources(queue: signalsQueue, registry: sources) { [unowned self] signal in
            self.received(signal)
        }
    }

    public var dumpSectionName: String { "daemon" }
    public var dumpQueue: SubsystemQueue { lifecycleQueue }

    func start() {
        lifecycleQueue.async { self.startOnLifecycleQueue() }
    }

    private func startOnLifecycleQueue() {
        logger.info("starting watchkeeper \(WatchkeeperVersion.current) with \(configuration.path), logging to \(sink.target.rawValue)",
                    metadata: [JournalFields.messageIDKey: .string(MessageID.started.rawValue), "config": .string(configuration.path)])
        prepareRuntimeDirectory(configuration.daemon)
        do {
            try signals.registerAll(timeout: .seconds(5))
        } catch {
            logger.critical("\(error)")
            exitAfterLogging(ExitCode.osError)
        }
        watchdog.start()
        raiseFileLimit(maxJobs: configuration.daemon.maxJobs)
        reportContainment(configuration, atStart: true)
        engine.onBurstOver = { [unowned self] in
            self.watchingQueue.async { self.watcher.releaseMemoryAfterBurst() }
        }
        jobSummaryTimer = sources.makeTimer(owner: "lifecycle", target: "STATUS=: sum up the running jobs, at most every \(Self.jobSummaryInterval.compactDescription)",
                                            on: jobsQueue) { [unowned self] in
            // On the jobs queue: take the figures here, show them from the lifecycle queue.
            self.jobSummaryPending = false
            let summary = (self.engine.runningCount, self.engine.runningSummary)
            guard summary != self.jobSummarySent else { return }
            self.jobSummarySent = summary
            self.lifecycleQueue.async {
                self.jobSummary = summary
                self.jobSummaryChanged()
            }
        }
        engine.onChange = { [unowned self] in
            guard !self.jobSummaryPending else { return }
            self.jobSummaryPending = true
            self.jobSummaryTimer?.schedule(after: Self.jobSummaryInterval)
        }
        let tasks = configuration.tasks
        let settings = configuration.daemon
        lockStateDirectory(settings.stateDirectory)
        if case .failure(let error) = lockRuntimeDirectory(settings.runtimeDirectory), error.holder != nil || error.errorNumber == EWOULDBLOCK {
            logger.critical("unable to start: \(error); give each watchkeeper its own runtime_dir")
            exitAfterLogging(ExitCode.alreadyRunning)
        }
        // The store opens the state file first, alone: if it has to move a damaged file
        // aside, nothing else has it open; the owners then read it through connections of
        // their own. The jobs and watching queues never wait for the state queue.
        stateQueue.queue.sync { _ = store.open(stateDirectory: settings.stateDirectory) }
        // READY=1 promises the initial watches are in place.
        let watches = configuration.watches
        watchingQueue.queue.sync { watcher.apply(watches, isStart: true, stateDirectory: settings.stateDirectory) }
        // The jobs queue never waits for this one, so waiting for it here cannot deadlock.
        jobsQueue.queue.sync { scheduler.apply(tasks, isStart: true, stateDirectory: settings.stateDirectory) }
        // Listening before READY=1, so `systemctl start watchkeeper && watchkeeper status` works.
        controlQueue.queue.sync { control.apply(path: ControlServer.socketPath(runtimeDirectory: settings.runtimeDirectory), group: settings.controlGroup) }
        metrics.start()
        checkFileLimitAtStart(maxJobs: settings.maxJobs)
        perform(machine.handle(.sourcesRegistered))
    }

    /// A running job holds 7 fds (its stdout, stderr and progress pipes, both ends each
    /// until their sources are cancelled, and its pidfd). The daemon's own are counted once
    /// everything is open (29 with one task and one watch rule: the databases, signalfds,
    /// epoll, inotify, the mount table, the locks, the control socket). At EMFILE jobs wait
    /// in line (StartHold) and start as others end, so fewer run at once than max_jobs says:
    /// say so at start, with the numbers, while it is cheap to fix.
    static let descriptorsPerJob = 7
    /// Beside one job: a scan's open directory, or the dump's state.json being written.
    static let descriptorsInPassing = 2
    /// What the daemon holds when all of it opened (30 measured with one task and one watch
    /// rule): counted after a start at a low limit, when its own opens failed, the count
    /// alone would say there is room.
    static let descriptorsForTheDaemonAtLeast = 30

    /// The soft RLIMIT_NOFILE is ours to raise up to the hard one (select(2) is not used
    /// here): done before anything is opened, and a limit below what any daemon needs is
    /// refused at once, before an open fails with a message that names no limit.
    func raiseFileLimit(maxJobs: Int) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        refuseWithoutRoomForAJob(limit: limit, held: Self.descriptorsForTheDaemonAtLeast, maxJobs: maxJobs)
    }

    /// Once everything of the daemon's own is open: a limit that leaves no room for a
    /// single job would make it report READY and then handle nothing, so it refuses to
    /// start; one below what max_jobs needs is a warning.
    func checkFileLimitAtStart(maxJobs: Int) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        // Listing /proc/self/fd takes a descriptor: none left is the limit reached.
        let counted = ResourceUsage.countOpenFileDescriptors() ?? Int(clamping: limit.rlim_cur)
        let held = max(counted, Self.descriptorsForTheDaemonAtLeast)
        descriptorsHeldAtStart = held
        refuseWithoutRoomForAJob(limit: limit, held: held, maxJobs: maxJobs)
        checkFileLimit(maxJobs: maxJobs)
    }

    private func refuseWithoutRoomForAJob(limit: rlimit, held: Int, maxJobs: Int) {
        let forOneJob = held + Self.descriptorsPerJob + Self.descriptorsInPassing
        guard UInt64(limit.rlim_cur) < UInt64(forOneJob) else { return }
        logger.critical("unable to start: the open file limit RLIMIT_NOFILE=\(limit.rlim_cur) (hard \(limit.rlim_max)) leaves no room for a job: the daemon needs \(held) descriptors itself and a job \(Self.descriptorsPerJob) more (\(Self.descriptorsInPassing) spare for scans and dumps); raise LimitNOFILE= in the unit (or ulimit -Hn) to at least \(forOneJob), and to \(held + maxJobs * Self.descriptorsPerJob + Self.descriptorsInPassing) for max_jobs = \(maxJobs)")
        exitAfterLogging(ExitCode.osError)
    }

    func checkFileLimit(maxJobs: Int) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        let held = descriptorsHeldAtStart
        let needed = UInt64(held + maxJobs * Self.descriptorsPerJob + Self.descriptorsInPassing)
        if UInt64(limit.rlim_cur) < needed {
            logger.warning("open file limit RLIMIT_NOFILE=\(limit.rlim_cur) (hard \(limit.rlim_max)) is below what max_jobs = \(maxJobs) needs: \(Self.descriptorsPerJob) per job + the daemon's \(held) + \(Self.descriptorsInPassing) = \(needed); raise LimitNOFILE= in the unit (or ulimit -n) or lower max_jobs; until then jobs wait for descriptors and fewer run at once")
        }
    }

    /// Two daemons on one state directory would run every job twice and write over each
    /// other's ledger: the second refuses to start, naming the first.
    private func lockStateDirectory(_ directory: String) {
        do {
            try makeDirectories(directory)
            stateLock = try StateDirectoryLock(stateDirectory: directory)
        } catch let error as StateDirectoryLockError {
            logger.critical("unable to start: \(error)")
            exitAfterLogging(error.holder == nil ? ExitCode.osError : ExitCode.alreadyRunning)
        } catch {
            logger.critical("unable to start: unable to create the state directory \(directory): \(error)")
            exitAfterLogging(ExitCode.osError)
        }
    }

    /// Locks `directory` as this daemon's runtime directory (the state directory's lock
    /// covers it when they are one). Failing to create it is said where it is used.
    func lockRuntimeDirectory(_ directory: String) -> Result<Void, StateDirectoryLockError> {
        guard stateLock?.directory != directory else {
            runtimeLock?.release()
            runtimeLock = nil
            return .success(())
        }
        do {
            try makeDirectories(directory)
        } catch {
            return .success(())  // prepareRuntimeDirectory says so; nothing there to protect
        }
        do {
            let lock = try StateDirectoryLock(stateDirectory: directory, what: "runtime directory")
            runtimeLock?.release()
            runtimeLock = lock
            return .success(())
        } catch {
            return .failure(error)
        }
    }

    func prepareRuntimeDirectory(_ settings: DaemonSettings) {
        do {
            try makeDirectories(settings.runtimeDirectory)
        } catch {
            logger.warning("unable to create runtime directory \(settings.runtimeDirectory): \(error); state.json will not be written")
        }
    }

    /// Runs on the signals queue: only forwards, the owners act.
    private func received(_ signal: Int32) {
        switch signal {
        case SIGUSR1:
            stateDump.requestDump(reason: "SIGUSR1")
        case SIGHUP:
            lifecycleQueue.async { self.perform(self.machine.handle(.reloadRequested)) }
        case SIGTERM, SIGINT:
            lifecycleQueue.async { self.perform(self.machine.handle(.terminationRequested(signal: signal))) }
        default:
            break
        }
    }

    func perform(_ actions: [LifecycleAction]) {
        dispatchPrecondition(condition: .onQueue(lifecycleQueue.queue))
        for action in actions {
            switch action {
            case .announceReady:
                announceReady()
            case .reload:
                reload()
            case .beginDrain(let signal):
                beginDrain(signal: signal)
            case .expireRunningWorkNow:
                logger.warning("second termination signal while draining: expiring the running jobs now")
                jobsQueue.async { self.engine.expireAllNow() }
            case .finishStopping:
                finishStopping()
            case .ignore(let reason):
                logger.notice("\(reason); ignored")
            }
        }
    }

    private func announceReady() {
        let elapsed = Duration.nanoseconds(Int64(DispatchTime.now().uptimeNanoseconds &- options.processStart))
        readyAfter = elapsed
        logger.info("ready in \(elapsed.compactDescription): \(configuration.tasks.count) task(s), \(configuration.watches.count) watch rule(s), \(HandledSignals.all.count) signal sources registered, watchdog \(watchdog.systemdInterval.map { _ in "every \(watchdog.tickInterval.compactDescription)" } ?? "off")",
                    metadata: [JournalFields.messageIDKey: .string(MessageID.ready.rawValue), "ready_ms": .stringConvertible(elapsed.nanosecondsClamped / 1_000_000)])
        // Logged before READY=1 so the journal shows it before systemd's "Started".
        notifier.send([("READY", "1"), ("STATUS", statusLine())])
        scheduleTestStallIfAsked()
    }

    private func jobSummaryChanged() {
        switch statusThrottle.changed(now: DispatchTime.now().uptimeNanoseconds) {
        case .send:
            sendRunningStatus()
        case .sendAt(let deadline):
            lifecycleQueue.queue.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: deadline)) { [unowned self] in
                if self.statusThrottle.timerFired(now: DispatchTime.now().uptimeNanoseconds) == .send { self.sendRunningStatus() }
            }
        case .none:
            break
        }
    }

    private func sendRunningStatus() {
        if case .running = machine.state { notifier.setStatus(statusLine()) }
    }

    /// One line for `systemctl status`: what runs, and what went wrong last.
    func statusLine() -> String {
        var line = machine.state.description
        if case .draining(let signal) = machine.state {
            line = "stopping on \(HandledSignals.name(signal)): \(jobSummary.running) job(s) still running"
        }
        line += "; config generation \(generation)"
        if case .running = machine.state {
            line += "; \(jobSummary.running) job(s) running"
            if !jobSummary.text.isEmpty { line += ": \(jobSummary.text)" }
        }
        if let errors = lastReload?.errors {
            line += "; last reload FAILED, old config kept: \(errors.summary)"
        }
        return String(line.prefix(400))
    }

    private func beginDrain(signal: Int32) {
        let grace = configuration.daemon.shutdownGrace
        // No new runs: files still settling and runs held for dependencies end with a
        // record; then the engine cancels what waits and drains what runs.
        watchingQueue.queue.sync { watcher.stop() }
        let running = jobsQueue.queue.sync { () -> Int in
            scheduler.stop()
            return engine.runningCount
        }
        drainStartedAt = DispatchTime.now().uptimeNanoseconds
        logger.notice("received \(HandledSignals.name(signal)): stopping; \(running) job(s) running, waiting up to \(grace.compactDescription) for them",
                      metadata: [JournalFields.messageIDKey: .string(MessageID.stopping.rawValue), "signal": .string(HandledSignals.name(signal))])
        notifier.send([("STOPPING", "1"), ("STATUS", statusLine())])
        if running > 0 { startDrainExtender() }
        jobsQueue.async {
            self.engine.beginDrain(grace: grace, onPhaseDeadline: { [unowned self] deadline in
                self.lifecycleQueue.async { self.drainPhaseDeadline = deadline }
            }) { [unowned self] report in
                self.lifecycleQueue.async {
                    self.drainOutcome = report
                    self.perform(self.machine.handle(.drainFinished))
                }
            }
        }
    }

    /// systemd kills a service that takes longer than TimeoutStopSec to stop. While jobs
    /// legitimately finish within the drain's current phase (shutdown_grace, then their
    /// expiry sequences), keep asking for a little more time, in steps, so a hung drain
    /// is still cut off.
    private func startDrainExtender() {
        let step: Duration = .seconds(5)
        let timer = sources.makeTimer(owner: "lifecycle", target: "drain: EXTEND_TIMEOUT_USEC every \(step.compactDescription)", on: lifecycleQueue) { [unowned self] in
            let now = DispatchTime.now().uptimeNanoseconds
            guard let deadline = self.drainPhaseDeadline else { return }
            let remaining = Duration.nanoseconds(Int64(deadline > now ? deadline - now : 0))
            self.notifier.send([("EXTEND_TIMEOUT_USEC", String((min(remaining, step) + step).microseconds + 1_000_000)), ("STATUS", self.statusLine())])
        }
        timer.schedule(at: .now(), repeating: step)
        drainExtender = timer
    }

    private func finishStopping() {
        drainExtender?.cancel()
        let took = Duration.nanoseconds(Int64(DispatchTime.now().uptimeNanoseconds &- (drainStartedAt ?? 0)))
        let how: String
        let code: Int32
        switch drainOutcome {
        case .expired(let names)?:
            how = "expired at the end of shutdown_grace: \(names.joined(separator: ", "))"
            code = ExitCode.success
        case .leftOver(let names)?:
            how = "these jobs did not end even after SIGKILL and are left behind: \(names.joined(separator: ", "))"
            code = ExitCode.software
        case .finished?, nil:
            how = "all work finished"
            code = ExitCode.success
        }
        // Every job has its record, and every owner has submitted its last writes: the
        // readers go, then the store writes what waits (retrying until its deadline), folds
        // the WAL into the file and closes it, saying what it could not write.
        watchingQueue.queue.sync { watcher.close() }
        jobsQueue.queue.sync { scheduler.closeStore() }
        notifier.send([("EXTEND_TIMEOUT_USEC", String((Self.stateCloseBudget + .seconds(5)).microseconds))])
        store.close(within: Self.stateCloseBudget) { [unowned self] _ in
            self.lifecycleQueue.async { self.finishStoppingAfterState(took: took, how: how, code: code) }
        }
    }

    /// The process ends here: what the daemon logged last is written first (its own entries
    /// wait on the log's queue), unless the sink is stuck for longer than this.
    func exitAfterLogging(_ code: Int32) -> Never {
        Self.exit(code, afterLoggingTo: sink)
    }

    static func exit(_ code: Int32, afterLoggingTo sink: LogSink) -> Never {
        sink.flush(within: logFlushBudget)
        Glibc.exit(code)
    }

    static let logFlushBudget: Duration = .seconds(2)

    /// What the state file's last writes may take at a clean stop (a full disk retried).
    static let stateCloseBudget: Duration = .seconds(5)

    private func finishStoppingAfterState(took: Duration, how: String, code: Int32) {
        // A reload still loading is not applied; its callers are answered before the socket
        // goes (their replies are queued on the control queue ahead of the stop).
        refuseReloadWaiters()
        // Served through the drain (`status` shows what it waits for); removed only now.
        controlQueue.queue.sync { control.stop() }
        let logger = logger
        let stateDump = stateDump!
        let sink = sink
        metrics.writeFinal {
            stateDump.writeFinalState(reason: "stopped") {
                let level: Logger.Level = code == ExitCode.success ? .notice : .error
                logger.log(level: level, "stopped after draining for \(took.compactDescription); \(how)",
                           metadata: [JournalFields.messageIDKey: .string(MessageID.stopped.rawValue)])
                Self.exit(code, afterLoggingTo: sink)
            }
        }
    }

    public func describeForDump() -> DumpValue {
        let settings = configuration.daemon
        var reload: DumpValue = .null
        if let lastReload {
            reload = .object([
                .init("at", .string(lastReload.at.iso8601)),
                .init("result", .string(lastReload.errors == nil ? "ok" : "failed")),
                .init("errors", .array((lastReload.errors?.lines ?? []).map { .string($0) })),
            ])
        }
        return .object([
            .init("state", .string(machine.state.description)),
            // How long the drain has been going; null while running (the uptime says that).
            .init("draining_s", drainStartedAt.map { .double(Double(DispatchTime.now().uptimeNanoseconds &- $0) / 1e9) } ?? .null),
            .init("ready_after_ms", readyAfter.map { .double(Double($0.nanosecondsClamped) / 1e6) } ?? .null),
            .init("log_target", .string(sink.target.rawValue)),
            .init("log_level", .string(sink.level.rawValue)),
            // The daemon's own entries on their way to the sink: a stuck journal shows here.
            .init("log_outbox", sink.outbox.describe()),
            .init("config", .object([
                .init("path", .string(configuration.path)),
                .init("generation", .int(generation)),
                .init("loaded_at", .string(loadedAt.iso8601)),
                .init("last_reload", reload),
                .init("shutdown_grace", .string(settings.shutdownGrace.compactDescription)),
                .init("runtime_dir", .string(settings.runtimeDirectory)),
                .init("state_dir", .string(settings.stateDirectory)),
                .init("dump_component_timeout", .string(settings.dumpComponentTimeout.compactDescription)),
                .init("max_jobs", .int(Int64(settings.maxJobs))),
                .init("job_containment", .string(containment.description)),
                .init("job_network", .string(jobNetwork.description)),
                .init("tasks", .int(Int64(configuration.tasks.count))),
            ])),
        ])
    }

    /// Fault injection for the watchdog's tests (docs/testing.md):
    /// WATCHKEEPER_TEST_STALL=<queue>:<duration>[:<delay>] blocks that subsystem's
    /// queue once, after READY, as a stuck handler would.
    private func scheduleTestStallIfAsked() {
        guard let request = options.environment["WATCHKEEPER_TEST_STALL"], !request.isEmpty else { return }
        let parts = request.split(separator: ":").map(String.init)
        let queues = [lifecycleQueue, signalsQueue, watchdogQueue, diagnosticsQueue, jobsQueue, watchingQueue, stateQueue, controlQueue, metricsQueue, configQueue]
        guard parts.count >= 2, let target = queues.first(where: { $0.name == parts[0] }),
              case .success(let stall) = DurationParser.parse(parts[1]) else {
            logger.warning("ignoring WATCHKEEPER_TEST_STALL=\(request): expected <queue>:<duration>[:<delay>] with queue one of \(queues.map(\.name).joined(separator: ", "))")
            return
        }
        var delay: Duration = .zero
        if parts.count > 2, case .success(let parsed) = DurationParser.parse(parts[2]) { delay = parsed }
        logger.warning("test hook: queue \(target.label) will be blocked for \(stall.compactDescription) in \(delay.compactDescription)")
        var hook: RegisteredTimer?
        hook = sources.makeTimer(owner: "lifecycle", target: "test hook: block \(target.label) for \(stall.compactDescription)", on: lifecycleQueue) {
            hook?.cancel()
            hook = nil
            target.async {
                var remaining = timespec(tv_sec: Int(stall.components.seconds), tv_nsec: Int(stall.components.attoseconds / 1_000_000_000))
                var left = timespec()
                while nanosleep(&remaining, &left) != 0 && errno == EINTR { remaining = left }
            }
        }
        hook?.schedule(after: delay)
    }
}

extension Daemon: MetricsContributor {
    public func sampleMetrics() -> [MetricSample] {
        [
            MetricSample(MetricCatalog.reloadSuccessful, value: lastReload?.errors == nil ? 1 : 0),
            MetricSample(MetricCatalog.reloadSuccessTime, value: loadedAt.epochSeconds),
            MetricSample(MetricCatalog.generation, value: Double(generation)),
        ]
    }
}
