/// The engine's running work by run ID, from the start of its slot to its record (a run
/// being started has no JobRun yet). A plain value of the engine's; status and the dump
/// show it oldest submission first.
struct ActiveRuns {
    private var entries: [RunID: JobEngine.Active] = [:]

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }

    mutating func insert(_ entry: JobEngine.Active) {
        entries[entry.waiting.runID] = entry
    }

    @discardableResult
    mutating func remove(_ runID: RunID) -> JobEngine.Active? {
        entries.removeValue(forKey: runID)
    }

    func run(_ runID: RunID) -> JobRun? { entries[runID]?.run }

    /// A copy: expiring a run may end it, and its entry, at once.
    func runs(where isPicked: (JobKey) -> Bool) -> [JobRun] {
        entries.values.filter { isPicked($0.key) }.compactMap(\.run)
    }

    var all: [(key: JobKey, run: JobRun?)] { entries.values.map { ($0.key, $0.run) } }

    /// The oldest three, with their progress and status (JobEngine.runningSummary).
    var summary: String {
        inSubmissionOrder.compactMap(\.run).prefix(3).map { run in
            var text = run.request.name
            if let progress = run.progress.progress { text += " \(Int(progress))%" }
            if let status = run.progress.status { text += " (\(status.prefix(40)))" }
            return text
        }.joined(separator: ", ")
    }

    func describe(now: MonotonicInstant) -> DumpValue {
        .array(inSubmissionOrder.compactMap { $0.describe(now: now) })
    }

    private var inSubmissionOrder: [JobEngine.Active] {
        entries.values.sorted { $0.waiting.submittedAt < $1.waiting.submittedAt }
    }
}
