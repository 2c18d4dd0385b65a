import CoreMetrics
import Prometheus

/// The swift-metrics backend: every handle is a swift-prometheus collector in one registry,
/// with the help text and buckets of its family in `MetricCatalog`.
///
/// Not swift-prometheus' own `PrometheusMetricsFactory`, which registers every family with
/// an empty help text (so no `# HELP` lines), and whose registry stops the process when a
/// family is registered again with another help text. Here a label always gets its
/// catalog's text, so that cannot happen.
struct CatalogMetricsFactory: MetricsFactory {
    let registry: PrometheusCollectorRegistry

    private func descriptor(_ label: String) -> MetricNameDescriptor {
        // An empty unit name is left out of the joined name: the label is the whole name.
        MetricNameDescriptor(metricName: label, unitName: "", helpText: MetricCatalog.family(named: label)?.help ?? "")
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        registry.makeGauge(descriptor: descriptor(label), labels: dimensions)
    }

    /// swift-metrics' `Gauge` is a recorder that does not aggregate.
    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        guard aggregate else { return registry.makeGauge(descriptor: descriptor(label), labels: dimensions) }
        return registry.makeValueHistogram(descriptor: descriptor(label), labels: dimensions,
                                           buckets: MetricCatalog.durationBuckets.map(\.secondsDouble))
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        let buckets = label == MetricCatalog.startLatency.name ? MetricCatalog.latencyBuckets : MetricCatalog.durationBuckets
        return registry.makeDurationHistogram(descriptor: descriptor(label), labels: dimensions, buckets: buckets)
    }

    func destroyCounter(_ handler: any CounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    func destroyMeter(_ handler: any MeterHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
    }

    func destroyRecorder(_ handler: any RecorderHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
        if let histogram = handler as? ValueHistogram { registry.unregisterValueHistogram(histogram) }
    }

    func destroyTimer(_ handler: any TimerHandler) {
        if let histogram = handler as? DurationHistogram { registry.unregisterDurationHistogram(histogram) }
    }
}
