import Dispatch

/// Every job's budget, warn_at and kill_grace deadline on one timer of the jobs queue:
/// a heap of deadlines, earliest first, and the timer set for the earliest.
///
/// Why not a timer source each: libdispatch configures and removes every timer on its
/// manager thread, two more round trips per job to that thread (see `DescriptorPoller`).
/// Here a new deadline later than the earliest (every job of a burst with the same budget)
/// touches no timer at all, and a cancelled earliest leaves the timer as it is: it wakes
/// once for nothing and is set for the next.
///
/// Each deadline is still listed with the sources (kind timer, its owner and target), so
/// the dump shows what every job waits for, as before.
// @unchecked Sendable: confined to the jobs queue, where its one timer fires.
final class JobDeadlines: @unchecked Sendable {
    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    private var timer: RegisteredTimer?
    private var heap: [JobDeadline] = []
    /// What the timer is set for, nil when it is not set.
    private var armedFor: MonotonicInstant?

    init(queue: SubsystemQueue, sources: SourceRegistry) {
        self.queue = queue
        self.sources = sources
    }

    deinit {
        timer?.cancel()
    }

    var count: Int { heap.count }

    /// `handler` once, `delay` from now (monotonic), on the jobs queue, unless cancelled first.
    func schedule(after delay: Duration, owner: String, target: String, handler: @escaping () -> Void) -> JobDeadline {
        // Saturating: a budget of "1000 years" is a deadline that never comes, not one in the past.
        let entry = JobDeadline(owner: self, deadline: .now + max(.zero, delay), registry: sources,
                                stats: sources.register(.timer, owner: owner, target: target, on: queue), handler: handler)
        push(entry)
        armForEarliest()
        return entry
    }

    fileprivate func cancel(_ entry: JobDeadline) {
        guard entry.index >= 0 else { return }
        remove(at: entry.index)
    }

    private func fire() {
        armedFor = nil
        let now = MonotonicInstant.now
        // A handler may add or cancel deadlines: the heap is read afresh each time.
        while let first = heap.first, first.deadline <= now {
            remove(at: 0)
            first.fire()
        }
        armForEarliest()
    }

    private func armForEarliest() {
        guard let earliest = heap.first?.deadline else { return }
        if let armedFor, armedFor <= earliest { return }
        if timer == nil {
            timer = sources.makeTimer(owner: "jobs", target: "the earliest of the jobs' budget, warn_at and kill_grace deadlines", on: queue) { [weak self] in
                self?.fire()
            }
        }
        timer?.schedule(at: earliest.dispatchTime)
        armedFor = earliest
    }

    // MARK: The heap

    private func push(_ entry: JobDeadline) {
        entry.index = heap.count
        heap.append(entry)
        siftUp(heap.count - 1)
    }

    private func remove(at index: Int) {
        let entry = heap[index]
        let last = heap.removeLast()
        entry.index = -1
        guard index < heap.count else { return }
        heap[index] = last
        last.index = index
        siftDown(index)
        siftUp(index)
    }

    private func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { return }
            swapAt(child, parent)
            child = parent
        }
    }

    private func siftDown(_ start: Int) {
        var parent = start
        while true {
            var smallest = parent
            let left = 2 * parent + 1, right = left + 1
            if left < heap.count && heap[left].deadline < heap[smallest].deadline { smallest = left }
            if right < heap.count && heap[right].deadline < heap[smallest].deadline { smallest = right }
            guard smallest != parent else { return }
            swapAt(parent, smallest)
            parent = smallest
        }
    }

    private func swapAt(_ a: Int, _ b: Int) {
        heap.swapAt(a, b)
        heap[a].index = a
        heap[b].index = b
    }
}

/// One deadline of `JobDeadlines`: the handle its owner keeps to cancel it.
// @unchecked Sendable: confined to the jobs queue, like the `JobDeadlines` it belongs to.
final class JobDeadline: @unchecked Sendable {
    /// When it fires.
    let deadline: MonotonicInstant
    /// Its place in the heap; -1 once it fired or was cancelled.
    fileprivate var index = -1
    private weak var owner: JobDeadlines?
    private let registry: SourceRegistry
    private let stats: SourceStats
    private var handler: (() -> Void)?

    fileprivate init(owner: JobDeadlines, deadline: MonotonicInstant, registry: SourceRegistry, stats: SourceStats, handler: @escaping () -> Void) {
        self.owner = owner
        self.deadline = deadline
        self.registry = registry
        self.stats = stats
        self.handler = handler
    }

    fileprivate func fire() {
        guard let handler else { return }
        self.handler = nil
        stats.fired()
        registry.unregister(stats)
        handler()
    }

    func cancel() {
        guard handler != nil else { return }
        handler = nil
        owner?.cancel(self)
        registry.unregister(stats)
    }

    var isPending: Bool { handler != nil }
}
