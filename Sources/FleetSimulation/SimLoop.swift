/// The simulation's one thread of time: a discrete-event loop over simulated nanoseconds.
/// Everything that happens (a host's turn on one of its queues, a timer, a packet reaching
/// etcd, a lease expiring there, a job ending, a fault) is an event at an instant; events
/// of one instant run in the order they were scheduled. Nothing reads a real clock, so a
/// seed fixes the whole run.
// @unchecked Sendable: the simulation runs on one thread, its loop.
public final class SimLoop: @unchecked Sendable {
    public private(set) var now: Int64 = 0
    /// The heap holds plain keys; the work waits beside it, so sifting moves no closures.
    private var heap: [Key] = []
    private var bodies: [UInt64: () -> Void] = [:]
    private var sequence: UInt64 = 0
    public private(set) var eventsRun = 0
    public var random: SimRandom

    struct Key {
        let time: Int64
        let sequence: UInt64
    }

    public init(seed: UInt64) {
        random = SimRandom(seed: seed)
    }

    public func schedule(at time: Int64, _ body: @escaping () -> Void) {
        sequence += 1
        bodies[sequence] = body
        heap.append(Key(time: max(time, now), sequence: sequence))
        siftUp(heap.count - 1)
    }

    public func after(_ delay: Int64, _ body: @escaping () -> Void) {
        schedule(at: now + max(0, delay), body)
    }

    /// Runs every event up to `end` (inclusive); the clock stops at `end`.
    public func run(until end: Int64) {
        while let first = heap.first, first.time <= end {
            let key = pop()
            now = key.time
            eventsRun += 1
            bodies.removeValue(forKey: key.sequence)?()
        }
        now = max(now, end)
    }

    /// Runs until `done` holds (checked every `step`) or `limit`.
    public func run(until limit: Int64, step: Int64, done: () -> Bool) {
        while now < limit && !done() { run(until: min(limit, now + step)) }
    }

    /// Drops every event not run: the world can go (its closures hold it).
    public func discardPending() {
        heap.removeAll()
        bodies.removeAll()
    }

    private static func before(_ a: Key, _ b: Key) -> Bool {
        a.time != b.time ? a.time < b.time : a.sequence < b.sequence
    }

    private func pop() -> Key {
        let first = heap[0]
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            siftDown(0)
        }
        return first
    }

    private func siftUp(_ start: Int) {
        var child = start
        let moving = heap[child]
        while child > 0 {
            let parent = (child - 1) / 2
            guard Self.before(moving, heap[parent]) else { break }
            heap[child] = heap[parent]
            child = parent
        }
        heap[child] = moving
    }

    private func siftDown(_ start: Int) {
        var parent = start
        let moving = heap[parent]
        let count = heap.count
        while true {
            let left = 2 * parent + 1
            guard left < count else { break }
            var smallest = left
            if left + 1 < count, Self.before(heap[left + 1], heap[left]) { smallest = left + 1 }
            guard Self.before(heap[smallest], moving) else { break }
            heap[parent] = heap[smallest]
            parent = smallest
        }
        heap[parent] = moving
    }
}

/// xoshiro256** seeded through splitmix64: every choice of a run comes from here.
public struct SimRandom {
    private var state: (UInt64, UInt64, UInt64, UInt64)

    public init(seed: UInt64) {
        var mix = seed
        func next() -> UInt64 {
            mix &+= 0x9E37_79B9_7F4A_7C15
            var z = mix
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        state = (next(), next(), next(), next())
    }

    public mutating func next() -> UInt64 {
        let result = rotate(state.1 &* 5, 7) &* 9
        let t = state.1 << 17
        state.2 ^= state.0
        state.3 ^= state.1
        state.1 ^= state.2
        state.0 ^= state.3
        state.2 ^= t
        state.3 = rotate(state.3, 45)
        return result
    }

    private func rotate(_ x: UInt64, _ k: UInt64) -> UInt64 { (x << k) | (x >> (64 - k)) }

    /// In [0, 1).
    public mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }

    public mutating func chance(_ probability: Double) -> Bool { unit() < probability }

    public mutating func int(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + Int(next() % UInt64(range.upperBound - range.lowerBound + 1))
    }

    /// Nanoseconds, uniform in `range` (given in seconds).
    public mutating func nanos(_ range: ClosedRange<Double>) -> Int64 {
        Int64((range.lowerBound + (range.upperBound - range.lowerBound) * unit()) * 1e9)
    }

    public mutating func pick<T>(_ items: [T]) -> T { items[int(0...(items.count - 1))] }
}

extension Int64 {
    public static func seconds(_ value: Double) -> Int64 { Int64(value * 1e9) }
}
