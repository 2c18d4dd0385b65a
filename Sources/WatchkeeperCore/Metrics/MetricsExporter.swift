import CoreMetrics
import Dispatch
import Logging
import Prometheus
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Owns the metrics on the metrics queue: the registry the job engine records into, the
/// values read from every contributor, and the text file node_exporter's textfile
/// collector reads, written atomically every `metrics_interval` when `metrics_file` is set.
/// `render(then:)` gives the same text on demand (`watchkeeper metrics`).
// @unchecked Sendable: its file, timer and reported series are confined to the metrics queue (`collectAndRender` asserts it).
public final class MetricsExporter: DumpContributor, @unchecked Sendable {
    public let queue: SubsystemQueue
    /// The engine's instruments; the engine calls them on its own queue.
    public let jobMetrics: JobMetrics
    private let registry: PrometheusCollectorRegistry
    private let factory: CatalogMetricsFactory
    private let contributors: [MetricsContributor]
    private let sources: SourceRegistry
    private let logger: Logger
    // Confined to `queue`.
    private var file: String?
    private var interval: Duration
    private var componentTimeout: Duration
    private var timer: RegisteredTimer?
    private var started = false
    /// The series each contributor reported last time, by section name.
    private var reported: [String: [SeriesKey: ReportedSeries]] = [:]
    /// The last write failure reported, so a lasting one is logged once, not every interval.
    private var reportedFailure: WriteFailure?
    private var writes: UInt64 = 0
    private var lastWrite: WallTime?
    private var lastFailure: String?
    private var failedWrites: UInt64 = 0

    private struct SeriesKey: Hashable {
        let name: String
        let labelValues: [String]
    }

    private enum ReportedSeries {
        case counter(CoreMetrics.Counter)
        case gauge(CoreMetrics.Gauge)
    }

    /// What makes two failures the same for the log: the temporary file's random name
    /// changes on every attempt, the path and the cause do not.
    private struct WriteFailure: Equatable {
        let path: String
        let errorNumber: Errno?
        let refusal: String?
    }

    /// `registry`, `jobMetrics`: the daemon makes the engine's instruments before the engine,
    /// and so before this exporter, in the registry it then gives it.
    public init(queue: SubsystemQueue, contributors: [MetricsContributor], sources: SourceRegistry, logger: Logger, settings: DaemonSettings,
                registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry(), jobMetrics: JobMetrics? = nil) {
        self.queue = queue
        self.registry = registry
        self.contributors = contributors
        self.sources = sources
        self.logger = logger
        self.factory = CatalogMetricsFactory(registry: registry)
        self.jobMetrics = jobMetrics ?? JobMetrics(factory: factory)
        self.file = settings.metricsFile
        self.interval = settings.metricsInterval
        self.componentTimeout = settings.dumpComponentTimeout
        CoreMetrics.Gauge(label: MetricCatalog.buildInfo.name, dimensions: [("version", WatchkeeperVersion.current)], factory: factory).record(1)
    }

    /// Once every subsystem has its configuration: the first file is written at once.
    public func start() {
        queue.async {
            self.started = true
            self.armTimer()
        }
    }

    /// A reload: a new file or interval applies from now; a file no longer configured is
    /// removed, so node_exporter does not go on exporting values that no longer change.
    public func apply(_ settings: DaemonSettings) {
        queue.async {
            self.componentTimeout = settings.dumpComponentTimeout
            guard settings.metricsFile != self.file || settings.metricsInterval != self.interval else { return }
            if let old = self.file, old != settings.metricsFile { self.remove(old) }
            self.file = settings.metricsFile
            self.interval = settings.metricsInterval
            self.reportedFailure = nil
            if self.started { self.armTimer() }
        }
    }

    /// The exposition text with every value as of now; `then` runs on the metrics queue.
    public func render(then: @escaping @Sendable (String) -> Void) {
        queue.async {
            then(self.collectAndRender())
        }
    }

    /// At the end of a drain: the file gets the final counts before the process exits.
    public func writeFinal(then: @escaping @Sendable () -> Void) {
        queue.async {
            self.timer?.cancel()
            self.timer = nil
            self.write()
            then()
        }
    }

    /// One write outside the timer's rhythm; `then` runs on the metrics queue after it.
    func writeNow(then: @escaping @Sendable () -> Void) {
        queue.async {
            self.write()
            then()
        }
    }

    public var dumpSectionName: String { "metrics" }
    public var dumpQueue: SubsystemQueue { queue }

    public func describeForDump() -> DumpValue {
        .object([
            .init("file", file.map { .string($0) } ?? .null),
            .init("interval", .string(interval.compactDescription)),
            .init("writes", .int(Int64(writes))),
            .init("failed_writes", .int(Int64(failedWrites))),
            .init("last_write", lastWrite.map { .string($0.iso8601) } ?? .null),
            .init("last_write_error", lastFailure.map { .string($0) } ?? .null),
        ])
    }

    private func armTimer() {
        timer?.cancel()
        timer = nil
        guard let file else { return }
        let timer = sources.makeTimer(owner: "metrics", target: "write \(file) every \(interval.compactDescription)", on: queue) { [unowned self] in
            self.write()
        }
        timer.schedule(at: .now(), repeating: interval)
        self.timer = timer
    }

    private func write() {
        guard let file else { return }
        let text = collectAndRender()
        do {
            // 0644: node_exporter runs as its own user and must be able to read it.
            try writeFileAtomically(file, contents: text, mode: 0o644)
            writes += 1
            lastWrite = .now()
            lastFailure = nil
            if let failure = reportedFailure {
                logger.notice("writing the metrics to \(failure.path) again")
                reportedFailure = nil
            }
        } catch {
            lastFailure = "\(error)"
            failedWrites += 1
            let failure = WriteFailure(path: file, errorNumber: error.errorNumber, refusal: error.errorNumber == nil ? error.reason : nil)
            if failure != reportedFailure {
                logger.warning("unable to write the metrics: \(error); trying again every \(interval.compactDescription), said once until it works")
                reportedFailure = failure
            }
        }
    }

    private func remove(_ path: String) {
        switch nothingOrErrno({ unlink(path) }) {
        case .success, .failure(.noSuchFileOrDirectory): return
        case .failure(let error): logger.warning("unable to remove the old metrics file \(path): \(error)")
        }
    }

    private func collectAndRender() -> String {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        for (section, samples) in collectSamples() {
            update(section: section, with: samples)
        }
        return Self.sortedByFamily(registry.emitToString())
    }

    /// Every contributor is asked at once on its own queue, with one deadline, as the dump
    /// asks: a stuck one costs this write `componentTimeout` and keeps its previous values.
    private func collectSamples() -> [(String, [MetricSample])] {
        let answers = askOnTheirQueues(within: componentTimeout, contributors.map { contributor in
            (contributor.dumpSectionName, contributor.dumpQueue, { contributor.sampleMetrics() })
        })
        return contributors.compactMap { contributor in answers[contributor.dumpSectionName].map { (contributor.dumpSectionName, $0) } }
    }

    /// Counters take the owner's count as it is (reset, then incremented by it: both happen
    /// here, where the registry is also emitted, so no reader sees the step between).
    private func update(section: String, with samples: [MetricSample]) {
        var previous = reported[section] ?? [:]
        var current: [SeriesKey: ReportedSeries] = [:]
        for sample in samples {
            let key = SeriesKey(name: sample.family.name, labelValues: sample.labelValues)
            let series = previous.removeValue(forKey: key) ?? makeSeries(sample)
            switch series {
            case .counter(let counter):
                counter.reset()
                counter.increment(by: Int64(clamping: UInt64(max(0, sample.value))))
            case .gauge(let gauge):
                gauge.record(sample.value)
            }
            current[key] = series
        }
        for series in previous.values {
            switch series {
            case .counter(let counter): counter.destroy()
            case .gauge(let gauge): gauge.destroy()
            }
        }
        reported[section] = current
    }

    private func makeSeries(_ sample: MetricSample) -> ReportedSeries {
        switch sample.family.kind {
        case .counter:
            return .counter(CoreMetrics.Counter(label: sample.family.name, dimensions: sample.dimensions, factory: factory))
        case .gauge:
            return .gauge(CoreMetrics.Gauge(label: sample.family.name, dimensions: sample.dimensions, factory: factory))
        case .histogram:
            preconditionFailure("\(sample.family.name) is a histogram: it is recorded where things happen, never sampled")
        }
    }

    /// The registry emits families, and the series of each, in its dictionaries' order, which
    /// changes from one run to the next; sorted by name and labels, two outputs can be
    /// compared by eye or by diff. A histogram's lines for one label set stay together and
    /// in order (its buckets go up, then _sum and _count).
    static func sortedByFamily(_ text: String) -> String {
        var families: [(name: String, comments: [Substring], series: [[Substring]])] = []
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# ") {
                // "# HELP name text" or "# TYPE name type"
                let name = line.split(separator: " ", maxSplits: 3).dropFirst(2).first.map(String.init) ?? ""
                if families.last?.name != name { families.append((name, [], [])) }
                families[families.count - 1].comments.append(line)
                continue
            }
            if families.isEmpty { families.append(("", [], [])) }
            let last = families.count - 1
            // A new group starts after a histogram's _count line, and at every line of the others.
            if let previous = families[last].series.last?.last, continuesHistogram(previous) {
                families[last].series[families[last].series.count - 1].append(line)
            } else {
                families[last].series.append([line])
            }
        }
        return families.sorted { $0.name < $1.name }.map { family in
            let series = family.series.sorted { $0.last! < $1.last! }.flatMap { $0 }
            return (family.comments + series).joined(separator: "\n") + "\n"
        }.joined()
    }

    /// A histogram's bucket and _sum lines are followed by more of the same label set.
    private static func continuesHistogram(_ line: Substring) -> Bool {
        let name = line.prefix { $0 != "{" && $0 != " " }
        return name.hasSuffix("_bucket") || name.hasSuffix("_sum")
    }
}
