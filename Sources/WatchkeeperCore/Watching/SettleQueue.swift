// The settle window of one watch rule: a file is handled only once no event has come for
// it for a while, so a file written in many chunks runs one job, not one per chunk. This is
// the bookkeeping only, a value with no clock and no timer: the caller passes the instants
// (MonotonicInstant) and arms its timer for `nextDeadline`.

/// Paths waiting for their settle window to end, each once, with the event that will be
/// reported for it.
///
/// Windows end in the order they were opened as long as every window has the same length,
/// which is the common case (one `settle` per rule): those go in an array consumed from a
/// head index, O(1) per path. A window that ends before the last one queued (an event's
/// short window after a scan's 1 s minimum) goes into a small min-heap instead, so it is
/// not held up behind the longer ones. A path whose window is pushed back leaves its old
/// slot behind as stale; stale slots are skipped when they reach the front and the array is
/// compacted once more than half of it is consumed, so skipping costs O(1) amortised.
public struct SettleQueue<Event> {
    public struct Item {
        public let path: [UInt8]
        /// The latest event for the path: what the job is told happened.
        public let event: Event
        /// When its window ends.
        public let deadline: MonotonicInstant
        /// Only a scan found it: no event for it came while it waited.
        public let fromScan: Bool
    }

    public enum Addition: Sendable, Equatable {
        /// Not waiting before: it waits now.
        case queued
        /// Waiting already: the new event joins it, and its window ends no earlier than before.
        case coalesced
        /// Waiting already and this is a scan: nothing changed.
        case alreadyWaiting
    }

    fileprivate struct Waiting {
        var event: Event
        var deadline: MonotonicInstant
        var fromScan: Bool
        var sequence: UInt64
    }

    /// A path's place in line. Stale once the path's `Waiting` has another sequence (its
    /// window moved) or is gone (taken or removed).
    private struct Slot: Sendable {
        let path: [UInt8]
        let deadline: MonotonicInstant
        let sequence: UInt64

        func comesBefore(_ other: Slot) -> Bool {
            (deadline, sequence) < (other.deadline, other.sequence)
        }
    }

    private var waiting: [[UInt8]: Waiting] = [:]
    /// Slots in the order their windows end; entries before `head` are consumed.
    private var order: [Slot] = []
    private var head = 0
    /// Slots whose window ends before the last one in `order`: a binary min-heap.
    private var early: [Slot] = []
    private var nextSequence: UInt64 = 0
    /// Events that joined a path already waiting, since the queue was made.
    public private(set) var coalesced: UInt64 = 0

    /// Consumed slots kept before the array is compacted: compacting on every take would
    /// make a burst quadratic.
    static var compactionThreshold: Int { 1_024 }
    /// Capacity an emptied queue keeps for the next files; a catch-up's (100,000 paths: 20 MB
    /// of dictionary and slots) is given back, not kept for the daemon's life.
    static var keptCapacity: Int { 4_096 }

    public init() {}

    /// Paths waiting.
    public var count: Int { waiting.count }
    public var isEmpty: Bool { waiting.isEmpty }

    /// When the earliest window ends, for the caller's timer; nil when nothing waits.
    public var nextDeadline: MonotonicInstant? {
        switch (order.indices.contains(head) ? order[head] : nil, early.first) {
        case (let slot?, let heap?): return min(slot.deadline, heap.deadline)
        case (let slot?, nil): return slot.deadline
        case (nil, let heap?): return heap.deadline
        case (nil, nil): return nil
        }
    }

    /// The path's waiting item, if it waits.
    public func item(for path: [UInt8]) -> Item? {
        waiting[path].map { Item(path: path, event: $0.event, deadline: $0.deadline, fromScan: $0.fromScan) }
    }

    /// A new event for a waiting path replaces its event and pushes its window back to
    /// `deadline` (never forward: a scan's longer minimum window stays, since a scan cannot
    /// tell whether the file is still being written). A scan finding a waiting path changes
    /// nothing, or a rescan every second would keep a file waiting for ever.
    @discardableResult
    public mutating func add(path: [UInt8], event: Event, deadline: MonotonicInstant, fromScan: Bool) -> Addition {
        guard var current = waiting[path] else {
            let sequence = takeSequence()
            waiting[path] = Waiting(event: event, deadline: deadline, fromScan: fromScan, sequence: sequence)
            push(Slot(path: path, deadline: deadline, sequence: sequence))
            return .queued
        }
        if fromScan { return .alreadyWaiting }
        coalesced += 1
        current.event = event
        current.fromScan = false
        if deadline > current.deadline {
            // The old slot goes stale; if it was at the front, the front moves on now, so
            // `nextDeadline` never reports a window that is no longer anyone's.
            current.deadline = deadline
            current.sequence = takeSequence()
            waiting[path] = current
            push(Slot(path: path, deadline: deadline, sequence: current.sequence))
            skipStale()
        } else {
            waiting[path] = current
        }
        return .coalesced
    }

    /// Removes and returns, earliest window first, every path whose window ends at or before
    /// `now + lookahead`. The lookahead lets a batch take files whose windows end a moment
    /// later (files written together settle microseconds apart) instead of one job each.
    public mutating func takeDue(now: MonotonicInstant, lookahead: Duration = .zero) -> [Item] {
        // Saturating (MonotonicInstant's +): a huge lookahead takes everything, never wraps.
        let horizon = now + max(.zero, lookahead)
        var due: [Item] = []
        while true {
            let fromHeap: Bool
            let slot: Slot
            switch (order.indices.contains(head) ? order[head] : nil, early.first) {
            case (let front?, let heap?):
                fromHeap = heap.comesBefore(front)
                slot = fromHeap ? heap : front
            case (let front?, nil):
                (fromHeap, slot) = (false, front)
            case (nil, let heap?):
                (fromHeap, slot) = (true, heap)
            case (nil, nil):
                return due
            }
            guard slot.deadline <= horizon else { return due }
            if fromHeap { popHeap() } else { head += 1 }
            if let entry = waiting.removeValue(forKey: slot.path) {
                due.append(Item(path: slot.path, event: entry.event, deadline: entry.deadline, fromScan: entry.fromScan))
            }
            skipStale()
            if waiting.isEmpty { releaseCapacity() }
        }
    }

    /// Emptied: a burst's storage goes back to malloc (and, this large, to the system).
    private mutating func releaseCapacity() {
        if waiting.capacity > Self.keptCapacity { waiting = [:] }
        if order.capacity > Self.keptCapacity, head == order.count {
            order = []
            head = 0
        }
        if early.isEmpty && early.capacity > Self.keptCapacity { early = [] }
    }

    /// Everything waiting, earliest window first, leaving the queue empty: for the drain
    /// and a reload, so the caller can record or hand over what was never started.
    public mutating func removeAll() -> [Item] {
        let items = sortedItems(waiting)
        waiting = [:]
        order = []
        head = 0
        early = []
        return items
    }

    /// Removes one path, if it waits (its slot goes stale): O(1), for an event that ends a
    /// wait early or moves it to another name.
    @discardableResult
    public mutating func remove(path: [UInt8]) -> Item? {
        guard let entry = waiting.removeValue(forKey: path) else { return nil }
        skipStale()
        if waiting.isEmpty { releaseCapacity() }
        return Item(path: path, event: entry.event, deadline: entry.deadline, fromScan: entry.fromScan)
    }

    /// Removes the paths `matches` selects (a directory moved out of the tree, a rule
    /// narrowed by a reload) and returns them, earliest window first.
    @discardableResult
    public mutating func remove(where matches: (Item) -> Bool) -> [Item] {
        let removed = waiting.filter { path, entry in
            matches(Item(path: path, event: entry.event, deadline: entry.deadline, fromScan: entry.fromScan))
        }
        for path in removed.keys { waiting[path] = nil }
        skipStale()
        return sortedItems(removed)
    }

    /// Slots held in memory, consumed or stale ones included: what compaction bounds.
    var storedSlots: Int { order.count + early.count }

    /// Paths and slots the storage has room for: what an emptied queue gives back.
    var storageCapacity: Int { waiting.capacity + order.capacity + early.capacity }

    // MARK: - Slots

    private mutating func takeSequence() -> UInt64 {
        defer { nextSequence += 1 }
        return nextSequence
    }

    private mutating func push(_ slot: Slot) {
        if head == order.count {
            order.removeAll(keepingCapacity: true)
            head = 0
        }
        if let last = order.last, slot.deadline < last.deadline {
            pushHeap(slot)
        } else {
            order.append(slot)
        }
    }

    private func isStale(_ slot: Slot) -> Bool {
        waiting[slot.path]?.sequence != slot.sequence
    }

    /// Moves both fronts past stale slots, so each front is a live path (or empty), and
    /// compacts the array when most of it is consumed.
    private mutating func skipStale() {
        while head < order.count, isStale(order[head]) { head += 1 }
        while let top = early.first, isStale(top) { popHeap() }
        if head == order.count {
            order.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= Self.compactionThreshold && head * 2 >= order.count {
            order.removeFirst(head)
            head = 0
        }
    }

    private func sortedItems(_ entries: [[UInt8]: Waiting]) -> [Item] {
        entries.sorted { ($0.value.deadline, $0.value.sequence) < ($1.value.deadline, $1.value.sequence) }
            .map { Item(path: $0.key, event: $0.value.event, deadline: $0.value.deadline, fromScan: $0.value.fromScan) }
    }

    private mutating func pushHeap(_ slot: Slot) {
        early.append(slot)
        var child = early.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard early[child].comesBefore(early[parent]) else { break }
            early.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func popHeap() {
        early.swapAt(0, early.count - 1)
        early.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < early.count, early[left].comesBefore(early[smallest]) { smallest = left }
            if right < early.count, early[right].comesBefore(early[smallest]) { smallest = right }
            if smallest == parent { return }
            early.swapAt(parent, smallest)
            parent = smallest
        }
    }
}

extension SettleQueue: Sendable where Event: Sendable {}
extension SettleQueue.Waiting: Sendable where Event: Sendable {}
extension SettleQueue.Item: Sendable where Event: Sendable {}
extension SettleQueue.Item: Equatable where Event: Equatable {}
