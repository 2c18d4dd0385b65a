/// Work waiting for its next attempt, each on a timer of the jobs queue: a failed (or
/// expired) run's next attempt under its group's RetryPolicy. The engine takes work back
/// from here when its group changes shape, is removed, is fenced or the daemon stops;
/// otherwise `due` hands it back when its time comes. Confined to the jobs queue.
final class JobRetries<Element> {
    private struct Entry {
        let key: JobKey
        let runID: RunID
        let attempt: Int
        let element: Element
        let timer: RegisteredTimer
        let dueAt: MonotonicInstant
    }

    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    private var entries: [RunID: Entry] = [:]

    init(queue: SubsystemQueue, sources: SourceRegistry) {
        self.queue = queue
        self.sources = sources
    }

    var count: Int { entries.count }

    func count(of key: JobKey) -> Int { entries.values.lazy.filter { $0.key == key }.count }

    /// `runID` and `attempt` are the next attempt's; `due` runs on the jobs queue after
    /// `delay`, unless the work was taken back first.
    func schedule(_ element: Element, key: JobKey, runID: RunID, attempt: Int, after delay: Duration,
                  due: @escaping (JobKey, Element) -> Void) {
        let timer = sources.makeTimer(owner: "jobs", target: "\(key): retry run \(runID) (attempt \(attempt))", on: queue) { [weak self] in
            guard let self, let entry = self.entries.removeValue(forKey: runID) else { return }
            entry.timer.cancel()
            due(entry.key, entry.element)
        }
        entries[runID] = Entry(key: key, runID: runID, attempt: attempt, element: element, timer: timer, dueAt: .now + delay)
        timer.schedule(after: delay)
    }

    /// The work of that next attempt, taken back before its time; nil if none waits.
    func take(runID: RunID) -> (key: JobKey, element: Element)? {
        guard let entry = entries.removeValue(forKey: runID) else { return nil }
        entry.timer.cancel()
        return (entry.key, entry.element)
    }

    /// Every waiting attempt `predicate` picks, taken back, soonest due first.
    func take(where predicate: (JobKey, Element) -> Bool = { _, _ in true }) -> [(key: JobKey, element: Element)] {
        let taken = entries.values.filter { predicate($0.key, $0.element) }.sorted { ($0.dueAt, $0.runID.value) < ($1.dueAt, $1.runID.value) }
        for entry in taken {
            entry.timer.cancel()
            entries[entry.runID] = nil
        }
        return taken.map { ($0.key, $0.element) }
    }

    /// For the dump, soonest due first.
    func describe(now: MonotonicInstant, limit: Int = 50) -> DumpValue {
        .array(entries.values.sorted { $0.dueAt < $1.dueAt }.prefix(limit).map { entry in
            .object([
                .init(entry.key.kind.rawValue, .string(entry.key.name)),
                .init("run_id", .string(entry.runID.description)),
                .init("attempt", .int(Int64(entry.attempt))),
                .init("due_in", .string(max(.zero, entry.dueAt - now).compactDescription)),
            ])
        })
    }
}
