/// The figures of the owners that export some, each read on its owner's queue like its
/// dump section (the protocol is Diagnostics/MetricsContributor.swift).
extension JobEngine: MetricsContributor {
    public func sampleMetrics() -> [MetricSample] {
        [
            MetricSample(MetricCatalog.running, value: Double(runningCount)),
            MetricSample(MetricCatalog.waiting, value: Double(waitingCount)),
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

extension TaskScheduler: MetricsContributor {
    /// Fleet tasks' fires by where they went; nothing for other tasks (their runs are in
    /// watchkeeper_jobs_total).
    public func sampleMetrics() -> [MetricSample] {
        order.compactMap { tasks[$0] }.filter { $0.settings.fleet == .one }.flatMap { task in
            FleetFires.outcomes.map { MetricSample(MetricCatalog.fleetFires, [task.settings.name, $0], count: fleet?.totals(of: task.settings.name)[$0] ?? 0) }
        }
    }
}
