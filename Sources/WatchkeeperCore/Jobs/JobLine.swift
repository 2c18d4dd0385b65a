import DequeModule

/// The engine's waiting line, a pure value: jobs wait for a `max_jobs` slot in order of
/// priority, first come first served within one, and no group (a task or a watch rule)
/// has more running than its own limit. Everything is O(1) per job but choosing among
/// the groups that may start, which is O(groups ready to start): a burst of 100,000
/// files in one rule costs the same per file as ten.
struct JobLine<Element> {
    private struct Group {
        var waiting = Deque<(sequence: UInt64, element: Element)>()
        var running = 0
        var limit: Int
        var lane: Int
    }

    private var groups: [JobKey: Group] = [:]
    /// Per priority lane (0 high, 1 default, 2 low): groups with work waiting and room to run.
    private var ready: [Set<JobKey>] = [[], [], []]
    private var sequence: UInt64 = 0
    /// The place in line of what `startNext` last returned, for `putBack`.
    private var lastStartedPlace: UInt64 = 0
    private(set) var waitingCount = 0
    private(set) var runningCount = 0

    static var defaultLane: Int { JobPriority.default.rank }

    /// A group's limit and lane; work already waiting keeps its place.
    mutating func configure(_ key: JobKey, limit: Int, lane: Int) {
        var group = groups[key] ?? Group(limit: limit, lane: lane)
        ready[group.lane].remove(key)
        group.limit = max(1, limit)
        group.lane = lane
        groups[key] = group
        updateReadiness(key)
    }

    mutating func append(_ element: Element, to key: JobKey) {
        if groups[key] == nil { groups[key] = Group(limit: .max, lane: Self.defaultLane) }
        sequence += 1
        groups[key]!.waiting.append((sequence, element))
        waitingCount += 1
        updateReadiness(key)
    }

    /// The oldest waiting element of the highest lane whose group is under its limit,
    /// counted as running from now on.
    mutating func startNext() -> (key: JobKey, element: Element)? {
        for lane in ready.indices where !ready[lane].isEmpty {
            var best: (key: JobKey, sequence: UInt64)?
            for key in ready[lane] {
                guard let head = groups[key]?.waiting.first else { continue }
                if best == nil || head.sequence < best!.sequence { best = (key, head.sequence) }
            }
            guard let key = best?.key, let entry = groups[key]!.waiting.popFirst() else { continue }
            // A drained group gives its buffer back: a burst's capacity is not kept for the daemon's life.
            if groups[key]!.waiting.isEmpty { groups[key]!.waiting = [] }
            groups[key]!.running += 1
            lastStartedPlace = entry.sequence
            waitingCount -= 1
            runningCount += 1
            updateReadiness(key)
            return (key, entry.element)
        }
        return nil
    }

    /// The job the last `startNext` returned could not start after all: it goes back to
    /// its place in line (ahead of everything that came after it), no longer running.
    /// Call it before the next `startNext`.
    mutating func putBack(_ element: Element, to key: JobKey) {
        guard var group = groups[key], group.running > 0 else {
            preconditionFailure("job line: \(key) put back a job it never started")
        }
        group.running -= 1
        runningCount -= 1
        group.waiting.prepend((lastStartedPlace, element))
        waitingCount += 1
        groups[key] = group
        updateReadiness(key)
    }

    /// A job of `key` that `startNext` returned has ended.
    mutating func finished(_ key: JobKey) {
        guard var group = groups[key], group.running > 0 else {
            preconditionFailure("job line: \(key) finished a job it never started")
        }
        group.running -= 1
        runningCount -= 1
        groups[key] = group
        updateReadiness(key)
    }

    /// Takes waiting elements of one group out of the line, oldest first.
    mutating func removeWaiting(of key: JobKey, where predicate: (Element) -> Bool = { _ in true }) -> [Element] {
        guard var group = groups[key] else { return [] }
        var kept = Deque<(sequence: UInt64, element: Element)>()
        var removed: [Element] = []
        for entry in group.waiting {
            if predicate(entry.element) { removed.append(entry.element) } else { kept.append(entry) }
        }
        group.waiting = kept
        groups[key] = group
        waitingCount -= removed.count
        updateReadiness(key)
        return removed
    }

    /// Takes the first waiting element `predicate` picks out of the line, whichever its group.
    mutating func removeFirstWaiting(where predicate: (Element) -> Bool) -> (key: JobKey, element: Element)? {
        var found: (key: JobKey, index: Int)?
        for (key, group) in groups {
            if let index = group.waiting.firstIndex(where: { predicate($0.element) }) {
                found = (key, index)
                break
            }
        }
        guard let found else { return nil }
        let element = groups[found.key]!.waiting.remove(at: found.index).element
        waitingCount -= 1
        updateReadiness(found.key)
        return (found.key, element)
    }

    /// Every waiting element, in the order they would have started.
    mutating func removeAllWaiting() -> [(key: JobKey, element: Element)] {
        let all = ordered(limit: .max)
        for key in groups.keys {
            groups[key]!.waiting.removeAll()
            updateReadiness(key)
        }
        waitingCount = 0
        return all
    }

    /// A group with nothing waiting or running is forgotten (a removed task or rule).
    mutating func forget(_ key: JobKey) {
        guard let group = groups[key], group.waiting.isEmpty, group.running == 0 else { return }
        ready[group.lane].remove(key)
        groups[key] = nil
    }

    func waiting(of key: JobKey) -> Int { groups[key]?.waiting.count ?? 0 }
    func running(of key: JobKey) -> Int { groups[key]?.running ?? 0 }
    func limit(of key: JobKey) -> Int? { groups[key]?.limit }

    func contains(where predicate: (Element) -> Bool) -> Bool {
        groups.values.contains { $0.waiting.contains { predicate($0.element) } }
    }

    /// The first `limit` waiting elements by lane and age: what the dump shows.
    func ordered(limit: Int) -> [(key: JobKey, element: Element)] {
        var result: [(key: JobKey, element: Element)] = []
        for lane in 0..<3 {
            let entries = groups.filter { $0.value.lane == lane }.flatMap { key, group in
                group.waiting.prefix(limit).map { (key: key, sequence: $0.sequence, element: $0.element) }
            }
            for entry in entries.sorted(by: { $0.sequence < $1.sequence }) {
                guard result.count < limit else { return result }
                result.append((entry.key, entry.element))
            }
        }
        return result
    }

    private mutating func updateReadiness(_ key: JobKey) {
        guard let group = groups[key] else { return }
        if !group.waiting.isEmpty && group.running < group.limit {
            ready[group.lane].insert(key)
        } else {
            ready[group.lane].remove(key)
        }
    }
}
