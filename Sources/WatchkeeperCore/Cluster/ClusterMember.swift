import Dispatch
import Logging

/// This host in the fleet, as the daemon runs it (only with `[cluster]`): a `FleetMember`
/// driven on the cluster queue, with the etcd client (its connections, call deadlines and
/// lanes) as its store and the system clocks and registered timers as its clock; the
/// dump's `cluster` section and the fleet's metrics.
// @unchecked Sendable: confined to the cluster queue (`queue`).
public final class ClusterMember: DumpContributor, @unchecked Sendable {
    public let queue: SubsystemQueue
    public let settings: ClusterSettings
    let client: EtcdClient
    public let member: FleetMember

    public init(settings: ClusterSettings, queue: SubsystemQueue, sources: SourceRegistry, logger: Logger) {
        self.settings = settings
        self.queue = queue
        var options = EtcdClient.Options(endpoints: settings.endpoints, username: settings.username, password: settings.password)
        if settings.endpoints.contains(where: \.secure) {
            let factory = SecureStreamFactory(caFile: settings.caFile, certFile: settings.certFile, keyFile: settings.keyFile)
            options.secureStream = { endpoint, descriptor throws(GatewayFailure) in try factory.stream(for: endpoint, descriptor: descriptor) }
        }
        client = EtcdClient(options: options, queue: queue, sources: sources, logger: logger)
        member = FleetMember(settings: settings, store: client, clock: DispatchFleetClock(queue: queue, sources: sources, owner: "cluster"),
                             queue: queue, identity: .current(), logger: logger)
    }

    public var dumpSectionName: String { "cluster" }
    public var dumpQueue: SubsystemQueue { queue }

    /// The engine hears the fence through its `FleetStarts`, which Daemon.init gave it.
    public func start(listener: any FleetListener, files: (any FleetFileListener)? = nil, jobs: (any FleetJobsListener)? = nil) {
        member.start(listener: listener, files: files, jobs: jobs)
    }

    /// The clean stop, once fleet jobs have ended (FleetMember.stop).
    public func stop(completion: @escaping @Sendable () -> Void) {
        member.stop(completion: completion)
    }

    /// Recent fires of every task (or one), newest first, for `watchkeeper fleet`.
    public func recentFires(task: String?, limit: Int, reply: @escaping @Sendable (Result<[FleetFire], EtcdError>) -> Void) {
        member.recentFires(task: task, limit: limit, reply: reply)
    }

    public func describeForDump() -> DumpValue {
        var fields = member.describedFields()
        fields.append(DumpField("calls_answered", .int(Int64(client.latencies.count))))
        fields.append(DumpField("calls_failed", .int(Int64(client.callsFailed))))
        fields.append(DumpField("call_latency_p50_ms", client.latencies.percentile(0.5).map { .double(Double($0.nanosecondsClamped) / 1e6) } ?? .null))
        return .object(fields)
    }
}

extension ClusterMember: MetricsContributor {
    public func sampleMetrics() -> [MetricSample] {
        var samples = [
            MetricSample(MetricCatalog.fleetHeld, value: member.isHeld ? 1 : 0),
            MetricSample(MetricCatalog.leaseRenewalsFailed, count: member.lease.renewalsFailed),
            MetricSample(MetricCatalog.fleetFences, count: member.lease.fences),
            MetricSample(MetricCatalog.etcdCalls, ["ok"], count: client.latencies.count),
            MetricSample(MetricCatalog.etcdCalls, ["failed"], count: client.callsFailed),
        ]
        for quantile in [0.5, 0.99] {
            if let value = client.latencies.percentile(quantile) {
                samples.append(MetricSample(MetricCatalog.etcdCallLatency, [String(quantile)], value: Double(value.nanosecondsClamped) / 1e9))
            }
        }
        return samples
    }
}

/// The daemon's `FleetClock`: CLOCK_MONOTONIC and CLOCK_REALTIME, and registered timers
/// on the owner's queue (listed in the dump's sources).
// @unchecked Sendable: immutable; its timers fire on its owner's queue.
final class DispatchFleetClock: FleetClock, @unchecked Sendable {
    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    private let owner: String

    init(queue: SubsystemQueue, sources: SourceRegistry, owner: String) {
        self.queue = queue
        self.sources = sources
        self.owner = owner
    }

    var now: MonotonicInstant { .now }
    var wallNow: WallTime { .now() }

    func makeTimer(target: String, _ handler: @escaping () -> Void) -> any FleetTimer {
        RegisteredFleetTimer(sources.makeTimer(owner: owner, target: target, on: queue, handler: handler))
    }
}

private final class RegisteredFleetTimer: FleetTimer {
    let timer: RegisteredTimer

    init(_ timer: RegisteredTimer) {
        self.timer = timer
    }

    func schedule(at deadline: MonotonicInstant) { timer.schedule(at: deadline.dispatchTime) }
    func cancel() { timer.cancel() }
}

#if canImport(Glibc)
import Glibc
#endif

extension FleetMemberIdentity {
    /// This daemon: the host name, /etc/machine-id, this boot's ID, the pid.
    static func current() -> FleetMemberIdentity {
        func firstLine(_ path: String) -> String {
            ((try? readSmallFile(path)) ?? "").split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        }
        return FleetMemberIdentity(hostName: ClusterSettings.hostName(), machineID: firstLine("/etc/machine-id"),
                                   bootID: firstLine("/proc/sys/kernel/random/boot_id"), pid: Int64(getpid()))
    }
}
