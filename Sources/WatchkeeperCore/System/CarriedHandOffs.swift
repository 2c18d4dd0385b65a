import Dispatch
import Glibc

/// Hand-offs a feeding thread carries itself instead of waking a worker for each.
///
/// A thread that feeds an owner's queue from outside libdispatch (the kernel event reader)
/// runs the owner's work with `sync`, which libdispatch runs on the calling thread when the
/// serial queue is idle. What that work hands on to another subsystem with
/// `SubsystemQueue.async` (the watcher's submission to the job engine) would wake a worker
/// thread for the other queue: on a 2-vCPU guest a wake of an idle CPU is tens of
/// microseconds on the way from a file's close to its job's exec (latency-path.md, step f).
/// Carried, those blocks run after the owner's block, on the same thread, each with `sync` on
/// its own queue: still one queue at a time, still in the order they were handed, and never
/// with the owner's queue waiting on another's (the feeding thread is no owner).
///
/// A burst must not wait for a whole batch to be decoded before its first job starts, so at
/// most `limit` blocks are held: the next one hands the held ones to their queues as they
/// would have gone (in order, before it) and the rest of the owner's block goes as before.
final class CarriedHandOffs {
    struct Item {
        let queue: SubsystemQueue
        let work: @Sendable () -> Void
    }

    let limit: Int
    /// The queue the carried block runs on: what it hands to itself goes as usual, behind
    /// whatever that queue has waiting.
    let owner: DispatchQueue
    private(set) var held: [Item] = []
    private(set) var handedOver = false

    init(owner: DispatchQueue, limit: Int) {
        self.owner = owner
        self.limit = limit
    }

    /// Holds `work` for `queue`, or says it must go as usual (true: held).
    func hold(_ work: @escaping @Sendable () -> Void, for queue: SubsystemQueue) -> Bool {
        guard !handedOver, queue.queue !== owner else { return false }
        if held.count < limit {
            held.append(Item(queue: queue, work: work))
            return true
        }
        handOver()
        return false
    }

    /// Sends what is held to its queues, in order, and holds nothing more: for a carried
    /// block about to deliver a burst, whose jobs should start while it goes on.
    func handOver() {
        handedOver = true
        for item in held { item.queue.enqueue(item.work) }
        held.removeAll()
    }

    /// The carrier of the calling thread, if it is inside `carry`.
    static var current: CarriedHandOffs? {
        guard let pointer = pthread_getspecific(key) else { return nil }
        return Unmanaged<CarriedHandOffs>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// Runs `body` on `queue` with `sync` from the calling thread, then the hand-offs it made
    /// (at most `limit`), each with `sync` on its own queue. Not from a queue's own block:
    /// the calling thread waits for each queue in turn.
    static func carry(sync queue: DispatchQueue, limit: Int = 4, _ body: () -> Void) {
        let carried = CarriedHandOffs(owner: queue, limit: limit)
        let retained = Unmanaged.passRetained(carried)
        pthread_setspecific(key, retained.toOpaque())
        queue.sync(execute: body)
        pthread_setspecific(key, nil)
        retained.release()
        for item in carried.held {
            item.queue.queue.sync { item.queue.runCounted(item.work) }
        }
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key, nil)
        precondition(status == 0, "pthread_key_create failed: \(status)")
        return key
    }()
}
