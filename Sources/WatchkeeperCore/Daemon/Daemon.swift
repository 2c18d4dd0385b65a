import Dispatch
import Logging
import Prometheus

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
        let queues = DaemonQueues()
        let sources = SourceRegistry()
        let notifier = SystemdNotifier(environment: options.environment)
        // Before any job exists: under systemd this moves the daemon into its own leaf cgroup.
        let containment = JobContainment.setUp()
        let parts = DaemonParts(options: options, configuration: configuration, queues: queues, sources: sources, sink: sink,
                                notifier: notifier, containment: containment)
        let owner = LifecycleOwner(options: options, configuration: configuration, sink: sink, notifier: notifier, parts: parts)
        owner.start()
        MainThreadPark.forever()
    }
}

/// The subsystems that answer to no one but their callers, each on its queue of `queues`,
/// made in the order they depend on each other: every dependency is given at construction.
/// The lifecycle owner is made from them; the parts that answer to it (the signal sources,
/// the control socket, the dump, the metrics, STATUS=) are its own (`LifecycleOwner`).
struct DaemonParts {
    let queues: DaemonQueues
    let sources: SourceRegistry
    let logger: Logger
    /// How jobs are held together and limited: decided once at start.
    let containment: JobContainment
    let watchdog: Watchdog
    let store: StateStore
    /// nil without `[cluster]`: nothing of the fleet is made.
    let cluster: ClusterMember?
    /// The engine's instruments, in the registry the metrics exporter renders.
    let metricsRegistry = PrometheusCollectorRegistry()
    let engine: JobEngine
    let scheduler: TaskScheduler
    let watcher: DirectoryWatcher

    init(options: RunOptions, configuration: Configuration, queues: DaemonQueues, sources: SourceRegistry, sink: LogSink,
         notifier: SystemdNotifier, containment: JobContainment) {
        let logger = Logger(label: "watchkeeper")
        self.queues = queues
        self.sources = sources
        self.logger = logger
        self.containment = containment
        let settings = configuration.daemon
        watchdog = Watchdog(queue: queues.watchdog, monitored: queues.gated, notifier: notifier, logger: logger,
                            registry: sources, systemdInterval: SystemdNotifier.watchdogInterval())
        store = StateStore(queue: queues.state, sources: sources, logger: logger)
        cluster = configuration.cluster.map { ClusterMember(settings: $0, queue: queues.cluster, sources: sources, logger: logger) }
        // Fleet jobs start through the cluster's gate and claims; the fence reaches the engine
        // as the member's `FleetJobsListener` (ClusterMember.start).
        let fleetStarts = cluster.map { FleetStarts(member: $0.member, queue: queues.jobs, clock: { .now }) }
        let jobContext = JobContext(queue: queues.jobs, sink: sink, logger: logger, sources: sources,
                                    daemonEnvironment: options.environment, containment: containment)
        engine = JobEngine(context: jobContext, maxJobs: settings.maxJobs, fleetStarts: fleetStarts,
                           metrics: JobMetrics(factory: CatalogMetricsFactory(registry: metricsRegistry)))
        scheduler = TaskScheduler(engine: engine, store: store, cluster: cluster?.member)
        watcher = DirectoryWatcher(queue: queues.watching, engine: engine, store: store, cluster: cluster?.member)
    }
}
