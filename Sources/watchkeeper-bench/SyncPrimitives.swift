// Synchronisation-primitive micro-benchmark.
//
// Architecture rule: "Measure before you choose a synchronisation primitive and keep
// the measurement in the repo." This measures the candidates for sharing small state
// between dispatch queues (pending-work counters, per-source event counters, a ring of
// recent warnings) and prints ns per operation. Results and conclusions live in
// docs/measurements/sync-primitives.md.
//
// Method: every case runs a fixed number of operations, once as warm-up and then
// `repetitions` times; the table reports the median, minimum and maximum ns/op. The final
// counter / ring state is read and checked after every run, so the optimiser cannot drop
// the work. Contended cases run on two threads (the target machine has 2 cores) that
// start together from a spin barrier; their ns/op is wall time divided by the total number
// of operations of both threads (i.e. the inverse of aggregate throughput).

import Dispatch
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// MARK: - Parameters

private enum SyncBench {
    static let repetitions = 5
    /// Cheap operations (atomics, locks), uncontended.
    static let lockOps = 5_000_000
    /// Cheap operations, contended: per thread (two threads).
    static let lockOpsPerThread = 2_000_000
    /// Ring records, uncontended.
    static let ringOps = 2_000_000
    /// DispatchQueue.sync, uncontended and per thread when contended.
    static let queueSyncOps = 1_000_000
    static let queueSyncOpsPerThread = 250_000
    /// DispatchQueue.async (enqueue N, then wait for the queue to drain).
    static let queueAsyncOps = 500_000
    static let queueAsyncOpsPerThread = 250_000
    /// Ring capacity (power of two).
    static let ringCapacity = 64
}

// MARK: - Timing helpers

@inline(__always)
private func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
}

/// Runs `body(i)` for i in 0..<n on the calling thread; returns elapsed ns.
@inline(__always)
private func timeLoop(_ n: Int, _ body: (Int) -> Void) -> UInt64 {
    let start = monotonicNanoseconds()
    for i in 0..<n { body(i) }
    return monotonicNanoseconds() &- start
}

private final class StartBarrier: Sendable {
    let arrived = Atomic<Int>(0)
    let go = Atomic<Bool>(false)
}

/// Runs `body(thread, i)` for i in 0..<perThread on two fresh threads at the same time.
/// Returns the wall time from the release of the barrier until both threads finished.
private func timeOnTwoThreads(_ perThread: Int, _ body: @escaping @Sendable (Int, Int) -> Void) -> UInt64 {
    let barrier = StartBarrier()
    let done = DispatchSemaphore(value: 0)
    for t in 0..<2 {
        let thread = Thread {
            barrier.arrived.wrappingAdd(1, ordering: .sequentiallyConsistent)
            while !barrier.go.load(ordering: .acquiring) { /* spin */ }
            for i in 0..<perThread { body(t, i) }
            done.signal()
        }
        thread.start()
    }
    while barrier.arrived.load(ordering: .sequentiallyConsistent) < 2 { sched_yield() }
    let start = monotonicNanoseconds()
    barrier.go.store(true, ordering: .releasing)
    done.wait()
    done.wait()
    return monotonicNanoseconds() &- start
}

// MARK: - Shared state under test

/// Counter behind `Synchronization.Mutex`.
private final class MutexCounter: Sendable {
    let state = Mutex<Int>(0)
    @inline(__always) func increment() { state.withLock { $0 &+= 1 } }
    var value: Int { state.withLock { $0 } }
}

/// Counter as `Synchronization.Atomic<Int>`.
private final class AtomicCounter: Sendable {
    let state = Atomic<Int>(0)
    var value: Int { state.load(ordering: .sequentiallyConsistent) }
}

/// Counter behind Foundation's `NSLock`.
private final class NSLockCounter: @unchecked Sendable {  // `value` is only touched under `lock`.
    let lock = NSLock()
    var count = 0
    @inline(__always) func increment() { lock.lock(); count &+= 1; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return count }
}

/// A heap-allocated `pthread_mutex_t` (never moved, so safe to use from Swift).
private final class PThreadMutex: @unchecked Sendable {  // The mutex is the synchronisation.
    let raw: UnsafeMutablePointer<pthread_mutex_t>
    init() {
        raw = .allocate(capacity: 1)
        raw.initialize(to: pthread_mutex_t())
        let rc = pthread_mutex_init(raw, nil)
        precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
    }
    deinit {
        pthread_mutex_destroy(raw)
        raw.deinitialize(count: 1)
        raw.deallocate()
    }
    @inline(__always) func lock() { pthread_mutex_lock(raw) }
    @inline(__always) func unlock() { pthread_mutex_unlock(raw) }
}

private final class PThreadCounter: @unchecked Sendable {  // `count` is only touched under `mutex`.
    let mutex = PThreadMutex()
    var count = 0
    @inline(__always) func increment() { mutex.lock(); count &+= 1; mutex.unlock() }
    var value: Int { mutex.lock(); defer { mutex.unlock() }; return count }
}

/// Counter owned by a serial queue: only touched from blocks running on `queue`.
private final class QueueCounter: @unchecked Sendable {  // `count` is confined to `queue`.
    let queue = DispatchQueue(label: "bench.sync.counter")
    var count = 0
    var value: Int { queue.sync { count } }
}

/// Unsynchronised counter: the reference for state already confined to one queue.
private final class PlainCounter {
    var count = 0
}

@inline(never)
private func plainIncrement(_ c: PlainCounter) { c.count &+= 1 }

/// Bounded ring of recent messages (the "recent warnings" shape).
private struct Ring {
    var entries = [String](repeating: "", count: SyncBench.ringCapacity)
    var next = 0
    var recorded = 0
    @inline(__always) mutating func record(_ message: String) {
        entries[next] = message
        next = (next &+ 1) & (SyncBench.ringCapacity - 1)
        recorded &+= 1
    }
}

/// Unsynchronised ring: the reference for state already confined to one queue.
private final class PlainRing {
    var ring = Ring()
    @inline(__always) func record(_ message: String) { ring.record(message) }
}

private final class MutexRing: Sendable {
    let state = Mutex(Ring())
    @inline(__always) func record(_ message: String) { state.withLock { $0.record(message) } }
}

private final class NSLockRing: @unchecked Sendable {  // `ring` is only touched under `lock`.
    let lock = NSLock()
    var ring = Ring()
    @inline(__always) func record(_ message: String) { lock.lock(); ring.record(message); lock.unlock() }
}

private final class PThreadRing: @unchecked Sendable {  // `ring` is only touched under `mutex`.
    let mutex = PThreadMutex()
    var ring = Ring()
    @inline(__always) func record(_ message: String) { mutex.lock(); ring.record(message); mutex.unlock() }
}

private final class QueueRing: @unchecked Sendable {  // `ring` is confined to `queue`.
    let queue = DispatchQueue(label: "bench.sync.ring")
    var ring = Ring()
    @inline(__always) func recordSync(_ message: String) { queue.sync { ring.record(message) } }
    @inline(__always) func recordAsync(_ message: String) { queue.async { self.ring.record(message) } }
}

/// Realistic warning texts: longer than 15 UTF-8 bytes, so they are heap strings and
/// storing one costs a retain (and the overwritten entry a release), as in the daemon.
private let ringMessages: [String] = (0..<8).map { "unit svc-\($0) restart throttled (5 in 10s)" }

private func checkRing(_ ring: Ring, _ n: Int) {
    precondition(ring.recorded == n, "ring recorded \(ring.recorded), expected \(n)")
    let last = ring.entries[(n - 1) & (SyncBench.ringCapacity - 1)]
    precondition(last == ringMessages[(n - 1) & 7], "ring holds the wrong last entry")
}

private func check(_ value: Int, _ expected: Int, _ what: String) {
    precondition(value == expected, "\(what): counter is \(value), expected \(expected)")
}

// MARK: - Cases

private struct SyncCase {
    let primitive: String
    let scenario: String
    let operations: Int
    /// Performs `operations` operations on fresh state, checks the result, returns elapsed ns.
    let run: () -> UInt64
}

/// State behind a lock: what `lockCases` needs to run the same three cases on each kind.
private protocol LockedCounter: AnyObject, Sendable {
    init()
    func increment()
    var value: Int { get }
}

private protocol LockedRing: AnyObject {
    init()
    func record(_ message: String)
    /// Checks the ring under its lock.
    func check(_ n: Int)
}

extension MutexCounter: LockedCounter {}
extension NSLockCounter: LockedCounter {}
extension PThreadCounter: LockedCounter {}

extension MutexRing: LockedRing {
    func check(_ n: Int) { state.withLock { checkRing($0, n) } }
}
extension NSLockRing: LockedRing {
    func check(_ n: Int) { lock.lock(); checkRing(ring, n); lock.unlock() }
}
extension PThreadRing: LockedRing {
    func check(_ n: Int) { mutex.lock(); checkRing(ring, n); mutex.unlock() }
}

/// Uncontended and contended increments of a counter, and ring records, behind one lock.
private func lockCases<Counter: LockedCounter, Ring: LockedRing>(
    counter counterName: String, _: Counter.Type, ring ringName: String, _: Ring.Type
) -> [SyncCase] {
    typealias B = SyncBench
    return [
        SyncCase(primitive: counterName, scenario: uncontendedScenario, operations: B.lockOps) {
            let c = Counter()
            let ns = timeLoop(B.lockOps) { _ in c.increment() }
            check(c.value, B.lockOps, counterName)
            return ns
        },
        SyncCase(primitive: counterName, scenario: contendedScenario, operations: 2 * B.lockOpsPerThread) {
            let c = Counter()
            let ns = timeOnTwoThreads(B.lockOpsPerThread) { _, _ in c.increment() }
            check(c.value, 2 * B.lockOpsPerThread, counterName + " contended")
            return ns
        },
        SyncCase(primitive: ringName, scenario: ringScenario, operations: B.ringOps) {
            let r = Ring()
            let ns = timeLoop(B.ringOps) { i in r.record(ringMessages[i & 7]) }
            r.check(B.ringOps)
            return ns
        },
    ]
}

/// Uncontended and contended increments of an atomic with one memory ordering (it must be
/// a literal at the call, hence the closure).
@inline(__always)
private func atomicCases(_ orderingName: String, increment: @escaping @Sendable (AtomicCounter) -> Void) -> [SyncCase] {
    typealias B = SyncBench
    let name = "Atomic<Int> \(orderingName)"
    return [
        SyncCase(primitive: name, scenario: uncontendedScenario, operations: B.lockOps) {
            let c = AtomicCounter()
            let ns = timeLoop(B.lockOps) { _ in increment(c) }
            check(c.value, B.lockOps, name)
            return ns
        },
        SyncCase(primitive: name, scenario: contendedScenario, operations: 2 * B.lockOpsPerThread) {
            let c = AtomicCounter()
            let ns = timeOnTwoThreads(B.lockOpsPerThread) { _, _ in increment(c) }
            check(c.value, 2 * B.lockOpsPerThread, name + " contended")
            return ns
        },
    ]
}

private let uncontendedScenario = "increment, 1 thread"
private let contendedScenario = "increment, 2 threads"
private let ringScenario = "ring(64) record, 1 thread"

private func makeCases() -> [SyncCase] {
    typealias B = SyncBench
    var cases: [SyncCase] = []
    let uncontended = uncontendedScenario
    let contended = contendedScenario
    let ring = ringScenario

    // Reference: no synchronisation (state confined to the queue you are already on).
    cases.append(SyncCase(primitive: "plain Int (no sync, non-inlined call)", scenario: uncontended, operations: B.lockOps) {
        let c = PlainCounter()
        let ns = timeLoop(B.lockOps) { _ in plainIncrement(c) }
        check(c.count, B.lockOps, "plain")
        return ns
    })
    cases.append(SyncCase(primitive: "plain Ring (no sync)", scenario: ring, operations: B.ringOps) {
        let r = PlainRing()
        let ns = timeLoop(B.ringOps) { i in r.record(ringMessages[i & 7]) }
        checkRing(r.ring, B.ringOps)
        return ns
    })

    // Synchronization.Atomic<Int>
    cases += atomicCases("relaxed") { $0.state.wrappingAdd(1, ordering: .relaxed) }
    cases += atomicCases("seqCst") { $0.state.wrappingAdd(1, ordering: .sequentiallyConsistent) }

    // The three locks, each on a counter and on a ring.
    cases += lockCases(counter: "Mutex<Int>", MutexCounter.self, ring: "Mutex<Ring>", MutexRing.self)
    cases += lockCases(counter: "NSLock", NSLockCounter.self, ring: "NSLock", NSLockRing.self)
    cases += lockCases(counter: "pthread_mutex_t", PThreadCounter.self, ring: "pthread_mutex_t", PThreadRing.self)

    // DispatchQueue.sync and .async on a serial queue.
    cases += queueCases()

    return cases
}

/// The serial queue used as a lock (sync) and as a mailbox (async, then drained).
private func queueCases() -> [SyncCase] {
    typealias B = SyncBench
    var cases: [SyncCase] = []
    // DispatchQueue.sync on a serial queue
    cases.append(SyncCase(primitive: "DispatchQueue.sync", scenario: uncontendedScenario, operations: B.queueSyncOps) {
        let c = QueueCounter()
        let ns = timeLoop(B.queueSyncOps) { _ in c.queue.sync { c.count &+= 1 } }
        check(c.value, B.queueSyncOps, "queue.sync")
        return ns
    })
    cases.append(SyncCase(primitive: "DispatchQueue.sync", scenario: contendedScenario, operations: 2 * B.queueSyncOpsPerThread) {
        let c = QueueCounter()
        let ns = timeOnTwoThreads(B.queueSyncOpsPerThread) { _, _ in c.queue.sync { c.count &+= 1 } }
        check(c.value, 2 * B.queueSyncOpsPerThread, "queue.sync contended")
        return ns
    })
    cases.append(SyncCase(primitive: "DispatchQueue.sync", scenario: ringScenario, operations: B.queueSyncOps) {
        let r = QueueRing()
        let ns = timeLoop(B.queueSyncOps) { i in r.recordSync(ringMessages[i & 7]) }
        r.queue.sync { checkRing(r.ring, B.queueSyncOps) }
        return ns
    })

    // DispatchQueue.async to a serial queue: enqueue N blocks, then wait until drained.
    cases.append(SyncCase(primitive: "DispatchQueue.async", scenario: uncontendedScenario, operations: B.queueAsyncOps) {
        let c = QueueCounter()
        let start = monotonicNanoseconds()
        for _ in 0..<B.queueAsyncOps { c.queue.async { c.count &+= 1 } }
        c.queue.sync {}
        let ns = monotonicNanoseconds() &- start
        check(c.value, B.queueAsyncOps, "queue.async")
        return ns
    })
    cases.append(SyncCase(primitive: "DispatchQueue.async", scenario: contendedScenario, operations: 2 * B.queueAsyncOpsPerThread) {
        let c = QueueCounter()
        let start = monotonicNanoseconds()
        _ = timeOnTwoThreads(B.queueAsyncOpsPerThread) { _, _ in c.queue.async { c.count &+= 1 } }
        c.queue.sync {}  // Include draining: the work is not done until the blocks ran.
        let ns = monotonicNanoseconds() &- start
        check(c.value, 2 * B.queueAsyncOpsPerThread, "queue.async contended")
        return ns
    })
    cases.append(SyncCase(primitive: "DispatchQueue.async", scenario: ringScenario, operations: B.queueAsyncOps) {
        let r = QueueRing()
        let start = monotonicNanoseconds()
        for i in 0..<B.queueAsyncOps { r.recordAsync(ringMessages[i & 7]) }
        r.queue.sync {}
        let ns = monotonicNanoseconds() &- start
        r.queue.sync { checkRing(r.ring, B.queueAsyncOps) }
        return ns
    })

    return cases
}

// MARK: - Driver

private func formatNs(_ ns: Double) -> String {
    String(format: ns < 10 ? "%.2f" : (ns < 100 ? "%.1f" : "%.0f"), ns)
}

/// Measures ns/op of the synchronisation primitives we may use to share small state
/// across dispatch queues, and prints a plain-text table.
func runSyncPrimitiveBenchmark() {
    let cases = makeCases()
    print("sync primitives: ns per operation, \(SyncBench.repetitions) runs after 1 warm-up (median, min, max)")
    print("contended = 2 threads on one counter; ns/op = wall time / total ops of both threads")
    print("(os_unfair_lock: N/A on Linux)")
    print("")

    var rows: [(String, String, String, String, String, String)] = []
    for c in cases {
        _ = c.run()  // warm-up: page in code, allocate dispatch threads, settle the caches
        var perOp: [Double] = []
        for _ in 0..<SyncBench.repetitions {
            perOp.append(Double(c.run()) / Double(c.operations))
        }
        perOp.sort()
        rows.append((c.primitive, c.scenario, formatNs(perOp[perOp.count / 2]), formatNs(perOp[0]),
                     formatNs(perOp[perOp.count - 1]), String(c.operations)))
    }

    let headers = ("primitive", "case", "ns/op (median)", "ns/op (min)", "ns/op (max)", "ops/run")
    let w0 = max(headers.0.count, rows.map { $0.0.count }.max() ?? 0)
    let w1 = max(headers.1.count, rows.map { $0.1.count }.max() ?? 0)
    let w2 = headers.2.count
    let w3 = headers.3.count
    let w4 = headers.4.count
    let w5 = headers.5.count
    func pad(_ s: String, _ w: Int) -> String { s + String(repeating: " ", count: max(0, w - s.count)) }
    func lpad(_ s: String, _ w: Int) -> String { String(repeating: " ", count: max(0, w - s.count)) + s }
    func rule(_ w: Int) -> String { String(repeating: "-", count: w) }
    print("\(pad(headers.0, w0)) | \(pad(headers.1, w1)) | \(headers.2) | \(headers.3) | \(headers.4) | \(headers.5)")
    print("\(rule(w0))-|-\(rule(w1))-|-\(rule(w2))-|-\(rule(w3))-|-\(rule(w4))-|-\(rule(w5))")
    for r in rows {
        print("\(pad(r.0, w0)) | \(pad(r.1, w1)) | \(lpad(r.2, w2)) | \(lpad(r.3, w3)) | \(lpad(r.4, w4)) | \(lpad(r.5, w5))")
    }
}
