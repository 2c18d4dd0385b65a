/// A component whose counters and levels are exported as they are, read from the component
/// itself on its own queue, as the dump reads them: the numbers in the metrics file are the
/// dump's, with no copy kept elsewhere that could disagree.
public protocol MetricsContributor: DumpContributor {
    /// Runs on `dumpQueue`. A series the component reported before and does not now (a
    /// removed watch rule) is dropped from the export.
    func sampleMetrics() -> [MetricSample]
}

/// One series' current value: a family of `MetricCatalog`, the values of its labels in
/// the family's order, and the value (a count, for a counter).
public struct MetricSample: Sendable, Equatable {
    public let family: MetricCatalog.Family
    public let labelValues: [String]
    public let value: Double

    public init(_ family: MetricCatalog.Family, _ labelValues: [String] = [], value: Double) {
        precondition(labelValues.count == family.labels.count, "\(family.name) takes the labels \(family.labels), not \(labelValues)")
        self.family = family
        self.labelValues = labelValues
        self.value = value
    }

    public init(_ family: MetricCatalog.Family, _ labelValues: [String] = [], count: UInt64) {
        self.init(family, labelValues, value: Double(count))
    }

    var dimensions: [(String, String)] { Array(zip(family.labels, labelValues)) }
}

extension WallTime {
    /// Seconds since the epoch, as Prometheus timestamps are given.
    var epochSeconds: Double { Double(secondsSinceEpoch) + Double(nanoseconds) / 1e9 }
}

extension JobEngine: MetricsContributor {
    public func sampleMetrics() -> [MetricSample] {
        [
            MetricSample(MetricCatalog.running, value: Double(runningCount)),
            MetricSample(MetricCatalog.waiting, value: Double(waitingCount)),
        ]
    }
}

extension Watchdog: MetricsContributor {
    public func sampleMetrics() -> [MetricSample] {
        [
            MetricSample(MetricCatalog.pingsWithheld, count: pingsWithheld),
            MetricSample(MetricCatalog.pingsSent, count: pingsSent),
        ]
    }
}

extension DirectoryWatcher: MetricsContributor {
    /// The same figures as the dump's `watches` section: `overflows`, and per rule
    /// `rescans`, `pending_settle`, `inotify_watches`, `unwatched_total` and `root_missing`.
    public func sampleMetrics() -> [MetricSample] {
        var samples = [MetricSample(MetricCatalog.overflows, count: overflowsTotal)]
        for name in order {
            guard let rule = rules[name] else { continue }
            samples += [
                MetricSample(MetricCatalog.rescans, [name], count: rule.counters.rescans),
                MetricSample(MetricCatalog.filesSettling, [name], value: Double(rule.settle.count)),
                MetricSample(MetricCatalog.directoriesWatched, [name], value: Double(treeBackend(of: rule)?.watchedCount(of: .rule(name)) ?? 0)),
                MetricSample(MetricCatalog.directoriesUnwatched, [name], value: Double(rule.scans.unwatchable.count)),
                MetricSample(MetricCatalog.rootMissing, [name], value: rule.isMissing ? 1 : 0),
            ]
        }
        return samples
    }
}
