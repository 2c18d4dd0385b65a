import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

public struct RunOptions: Sendable {
    public var configPath: String
    public var logLevelOverride: Logger.Level?
    public var environment: [String: String]
    /// The top of main, for uptime and time-to-READY.
    public var processStart: MonotonicInstant

    public init(configPath: String, logLevelOverride: Logger.Level?, environment: [String: String], processStart: MonotonicInstant) {
        self.configPath = configPath
        self.logLevelOverride = logLevelOverride
        self.environment = environment
        self.processStart = processStart
    }
}

/// The composition root: reads the configuration, builds the log sink, the lifecycle
/// owner and every subsystem on its queue, connects them, and hands over to dispatch.
public enum Daemon {
    /// Never returns: the process ends in the lifecycle's stop (exit 0) or on a fatal
    /// start-up error.
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
        let owner = LifecycleOwner(options: options, configuration: configuration, sink: sink)
        owner.connect(DaemonParts(owner: owner))
        owner.start()
        dispatchMain()
    }
}

/// Every subsystem of the daemon, each on its queue of `owner.queues`, connected to the
/// others and to the lifecycle owner they answer to.
struct DaemonParts {
    let watchdog: Watchdog
    let engine: JobEngine
    let store: StateStore
    let scheduler: TaskScheduler
    let watcher: DirectoryWatcher
    let control: ControlServer
    let metrics: MetricsExporter
    let stateDump: StateDump
    let status: StatusReporter
    let signals: SignalSources
    /// nil without `[cluster]`: nothing of the fleet is made.
    let cluster: ClusterMember?
    /// The engine's fleet starts (nil without `[cluster]`); the member tells it the fence.
    let fleetStarts: FleetStarts?

    init(owner: LifecycleOwner) {
        let queues = owner.queues, sources = owner.sources, sink = owner.sink, logger = owner.logger, notifier = owner.notifier
        let settings = owner.configuration.daemon
        watchdog = Watchdog(queue: queues.watchdog, monitored: queues.gated, notifier: notifier, logger: logger,
                            registry: sources, systemdInterval: SystemdNotifier.watchdogInterval())
        let jobContext = JobContext(queue: queues.jobs, sink: sink, logger: logger, sources: sources,
                                    daemonEnvironment: owner.options.environment, containment: owner.containment)
        engine = JobEngine(context: jobContext, maxJobs: settings.maxJobs)
        store = StateStore(queue: queues.state, sources: sources, logger: logger)
        scheduler = TaskScheduler(engine: engine)
        scheduler.stateStore = store
        cluster = owner.configuration.cluster.map { ClusterMember(settings: $0, queue: queues.cluster, sources: sources, logger: logger) }
        // Fleet jobs start through the cluster's gate and claims, and the fence reaches the engine.
        fleetStarts = cluster.map { [unowned engine] cluster in
            FleetStarts(member: cluster.member, queue: queues.jobs, clock: { .now }) { stopBy in engine.fenceFleet(stopBy: stopBy) }
        }
        engine.fleetStarts = fleetStarts
        scheduler.cluster = cluster?.member
        watcher = DirectoryWatcher(queue: queues.watching, engine: engine)
        watcher.store = store
        watcher.cluster = cluster?.member
        control = ControlServer(queue: queues.control, sources: sources, logger: logger, backend: owner)
        // The scheduler and the cluster only with [cluster]: without it they add no series.
        var fleetMetrics: [any MetricsContributor] = []
        if let cluster { fleetMetrics = [scheduler, cluster] }
        metrics = MetricsExporter(queue: queues.metrics, contributors: [owner, watchdog, engine, watcher] + fleetMetrics, sources: sources, logger: logger,
                                  settings: settings)
        engine.metrics = metrics.jobMetrics
        let clusterSection: [any DumpContributor] = cluster.map { [$0] } ?? []
        stateDump = StateDump(queue: queues.diagnostics, contributors: [owner, watchdog, engine, scheduler, watcher, store, control, metrics] + clusterSection,
                              queues: queues.monitored, sources: sources, sink: sink, notifier: notifier, logger: logger,
                              processStart: owner.options.processStart, settings: settings)
        status = StatusReporter(notifier: notifier, sources: sources, lifecycleQueue: queues.lifecycle, jobsQueue: queues.jobs) { [unowned owner] in
            StatusReporter.Facts(state: owner.machine.state, generation: owner.generation, reloadErrors: owner.lastReload?.errors)
        }
        signals = SignalSources(queue: queues.signals, registry: sources) { [unowned owner] signal in
            owner.received(signal)
        }
    }
}
