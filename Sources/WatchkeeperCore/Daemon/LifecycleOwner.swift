import CWatchkeeperSystem
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The lifecycle owner: holds the configuration, turns signals into lifecycle events and
/// runs the actions the state machine returns, touching what it owns only on the
/// lifecycle queue. It drives the subsystems the composition root (`Daemon.run`) made
/// (`DaemonParts`), and makes the parts that answer to it. Its own parts, each in a file:
/// `StatusReporter` (STATUS=), `FileLimitCheck` (RLIMIT_NOFILE), `ReloadRequests` (who
/// waits for which reload) with the reload (+Reload), `DrainProgress` with the stopping
/// sequence (+Stopping), `LifecycleSteps` with the asking of other queues (+Steps), the
/// control socket's answers (+Control), containment's report (+Containment), the
/// watchdog's test hook (+TestStall).
// @unchecked Sendable: its state is confined to the lifecycle queue (`perform`, `handle` and `ask` assert it).
public final class LifecycleOwner: DumpContributor, @unchecked Sendable {
    let options: RunOptions
    let sink: LogSink
    let notifier: SystemdNotifier
    /// The network jobs get, as the unit left it: read once at start.
    let jobNetwork = JobNetwork.probe()
    let parts: DaemonParts
    var queues: DaemonQueues { parts.queues }
    var sources: SourceRegistry { parts.sources }
    var logger: Logger { parts.logger }
    var containment: JobContainment { parts.containment }
    var engine: JobEngine { parts.engine }
    var watchdog: Watchdog { parts.watchdog }
    var scheduler: TaskScheduler { parts.scheduler }
    var cluster: ClusterMember? { parts.cluster }
    var watcher: DirectoryWatcher { parts.watcher }
    var store: StateStore { parts.store }

    // The parts that answer to this owner (the signal handler, the control socket's
    // backend, the dump's and the metrics' "daemon" section, STATUS='s facts): made in
    // `init`, lazily only so that they can be given `self`, before the owner is shared
    // with any queue; read-only from then on.
    private(set) lazy var signals = SignalSources(queue: queues.signals, registry: sources) { [unowned self] signal in
        self.received(signal)
    }
    private(set) lazy var control = ControlServer(queue: queues.control, sources: sources, logger: logger, backend: self)
    /// `metrics.render { text in … }`: the Prometheus text, as `watchkeeper metrics` shows it.
    private(set) lazy var metrics: MetricsExporter = {
        // The scheduler and the cluster only with [cluster]: without it they add no series.
        let fleet: [any MetricsContributor] = cluster.map { [scheduler, $0] } ?? []
        return MetricsExporter(queue: queues.metrics, contributors: [self, watchdog, engine, watcher] + fleet, sources: sources, logger: logger,
                               settings: configuration.daemon, registry: parts.metricsRegistry, jobMetrics: engine.metrics)
    }()
    private(set) lazy var stateDump: StateDump = {
        let clusterSection: [any DumpContributor] = cluster.map { [$0] } ?? []
        return StateDump(queue: queues.diagnostics, contributors: [self, watchdog, engine, scheduler, watcher, store, control, metrics] + clusterSection,
                         queues: queues.monitored, sources: sources, sink: sink, notifier: notifier, logger: logger,
                         processStart: options.processStart, settings: configuration.daemon)
    }()
    /// STATUS= for `systemctl status`.
    private(set) lazy var status = StatusReporter(notifier: notifier, sources: sources, lifecycleQueue: queues.lifecycle, jobsQueue: queues.jobs) { [unowned self] in
        StatusReporter.Facts(state: self.machine.state, generation: self.generation, reloadErrors: self.lastReload?.errors)
    }

    // Confined to the lifecycle queue.
    var machine = LifecycleMachine()
    var configuration: Configuration
    var generation: Int64 = 1
    var loadedAt = WallTime.now()
    var lastReload: (at: WallTime, errors: ConfigErrors?)?
    private var readyAfter: Duration?
    /// The drain, seen from this queue: since when, until when its phase runs, how it ended.
    var drain = DrainProgress()
    /// Who waits for which reload.
    var reloads = ReloadRequests()
    /// What this queue asked of others and waits for, and the events held meanwhile.
    var steps = LifecycleSteps()
    /// Held for the daemon's life; the kernel releases it when the process ends.
    private var stateLock: StateDirectoryLock?
    /// The runtime directory's: a second daemon there would run without a control socket
    /// and overwrite this one's state.json.
    var runtimeLock: StateDirectoryLock?
    /// RLIMIT_NOFILE against the daemon's own descriptors, counted before READY=1.
    private var fileLimits = FileLimitCheck()

    init(options: RunOptions, configuration: Configuration, sink: LogSink, notifier: SystemdNotifier, parts: DaemonParts) {
        self.options = options
        self.configuration = configuration
        self.sink = sink
        self.notifier = notifier
        self.parts = parts
        _ = (signals, control, metrics, stateDump, status)
    }

    public var dumpSectionName: String { "daemon" }
    public var dumpQueue: SubsystemQueue { queues.lifecycle }

    func start() {
        queues.lifecycle.async { self.startOnLifecycleQueue() }
    }

    /// Runs through steps on other queues, each confirmed back here (+Steps); lifecycle
    /// events wait until READY=1.
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
            self.queues.watching.async { self.watcher.releaseMemoryAfterBurst() }
        }
        status.follow(engine)
        let tasks = configuration.tasks
        let settings = configuration.daemon
        lockStateDirectory(settings.stateDirectory)
        if case .failure(let error) = lockRuntimeDirectory(settings.runtimeDirectory), error.holder != nil || error.errorNumber == .wouldBlock {
            logger.critical("unable to start: \(error); give each watchkeeper its own runtime_dir")
            exitAfterLogging(ExitCode.alreadyRunning)
        }
        let watches = configuration.watches
        let (store, watcher, scheduler, control) = (store, watcher, scheduler, control)
        let socket = ControlServer.socketPath(runtimeDirectory: settings.runtimeDirectory)
        // The store opens the state file first, alone: if it has to move a damaged file
        // aside, nothing else has it open; the owners then read it through connections of
        // their own. The jobs and watching queues never wait for the state queue.
        ask(queues.state, "open the state file", { _ = store.open(stateDirectory: settings.stateDirectory) }) {
            // READY=1 promises the initial watches are in place.
            self.ask(self.queues.watching, "watch the roots", { watcher.apply(watches, isStart: true, stateDirectory: settings.stateDirectory) }) {
                self.ask(self.queues.jobs, "arm the tasks", { scheduler.apply(tasks, isStart: true, stateDirectory: settings.stateDirectory) }) {
                    // The lease is asked for once the tasks are armed: fires held until it is
                    // granted are claimed then. READY=1 does not wait for etcd.
                    self.cluster?.start(listener: scheduler, files: watcher, jobs: self.engine)
                    // Listening before READY=1, so `systemctl start watchkeeper && watchkeeper status` works.
                    self.ask(self.queues.control, "listen on \(socket)", {
                        control.apply(path: socket, group: settings.controlGroup, readGroup: settings.readGroup)
                    }) {
                        self.metrics.start()
                        _ = EventPathWarmUp.run()
                        self.checkFileLimitAtStart(maxJobs: settings.maxJobs)
                        self.perform(self.machine.handle(.sourcesRegistered))
                    }
                }
            }
        }
    }

    /// Before anything is opened: the soft limit raised, and a limit below what any daemon
    /// needs refused at once, before an open fails with a message that names no limit.
    func raiseFileLimit(maxJobs: Int) {
        guard let limit = FileLimitCheck.raiseSoftLimit() else { return }
        act(on: fileLimits.verdict(soft: limit.soft, hard: limit.hard, maxJobs: maxJobs, startOnly: true))
    }

    /// Once everything of the daemon's own is open, counted.
    func checkFileLimitAtStart(maxJobs: Int) {
        guard let limit = FileLimitCheck.current() else { return }
        fileLimits.measure(counted: ResourceUsage.countOpenFileDescriptors(), soft: limit.soft)
        act(on: fileLimits.verdict(soft: limit.soft, hard: limit.hard, maxJobs: maxJobs))
    }

    /// On a reload that changes max_jobs: a running daemon says what is wrong and goes on
    /// (the limit can only have been lowered from outside, with prlimit).
    func checkFileLimit(maxJobs: Int) {
        guard let limit = FileLimitCheck.current() else { return }
        act(on: fileLimits.verdict(soft: limit.soft, hard: limit.hard, maxJobs: maxJobs), starting: false)
    }

    private func act(on verdict: FileLimitCheck.Verdict, starting: Bool = true) {
        switch verdict {
        case .fine:
            break
        case .warn(let message):
            logger.warning("\(message)")
        case .refuse(let message) where starting:
            logger.critical("unable to start: \(message)")
            exitAfterLogging(ExitCode.osError)
        case .refuse(let message):
            logger.error("\(message)")
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
    func received(_ signal: Int32) {
        switch signal {
        case SIGUSR1:
            stateDump.requestDump(reason: "SIGUSR1")
        case SIGHUP:
            queues.lifecycle.async { self.handle(.reloadRequested) }
        case SIGTERM, SIGINT:
            queues.lifecycle.async { self.handle(.terminationRequested(signal: signal)) }
        default:
            break
        }
    }

    func perform(_ actions: [LifecycleAction]) {
        dispatchPrecondition(condition: .onQueue(queues.lifecycle.queue))
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
                queues.jobs.async { self.engine.expireAllNow() }
            case .finishStopping:
                finishStopping()
            case .ignore(let reason):
                logger.notice("\(reason); ignored")
            }
        }
    }

    private func announceReady() {
        let elapsed = options.processStart.elapsed()
        readyAfter = elapsed
        logger.info("ready in \(elapsed.compactDescription): \(configuration.tasks.count) task(s), \(configuration.watches.count) watch rule(s), \(HandledSignals.all.count) signal sources registered, watchdog \(watchdog.systemdInterval.map { _ in "every \(watchdog.tickInterval.compactDescription)" } ?? "off")",
                    metadata: [JournalFields.messageIDKey: .string(MessageID.ready.rawValue), "ready_ms": .stringConvertible(elapsed.nanosecondsClamped / 1_000_000)])
        // Logged before READY=1 so the journal shows it before systemd's "Started": the
        // outbox gets a moment to write it, no more (a stuck journal does not hold READY).
        sink.flush(within: Self.readyLineBudget)
        notifier.send([("READY", "1"), ("STATUS", status.line())])
        scheduleTestStallIfAsked()
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
            // Steps asked of other queues and not confirmed yet (a stuck start or reload shows here).
            .init("waiting_for", steps.describe()),
            // How long the drain has been going; null while running (the uptime says that).
            .init("draining_s", drain.startedAt.map { .double($0.elapsed().secondsDouble) } ?? .null),
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
}

extension LifecycleOwner: MetricsContributor {
    public func sampleMetrics() -> [MetricSample] {
        [
            MetricSample(MetricCatalog.reloadSuccessful, value: lastReload?.errors == nil ? 1 : 0),
            MetricSample(MetricCatalog.reloadSuccessTime, value: loadedAt.epochSeconds),
            MetricSample(MetricCatalog.generation, value: Double(generation)),
        ]
    }
}
