import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// What a KernelEventReader read, for the dump and the tests.
public struct KernelEventStatistics: Sendable, Equatable {
    public var wakeUps: UInt64 = 0
    public var reads: UInt64 = 0
    public var bytesRead: UInt64 = 0
    public var events: UInt64 = 0
    public var overflows: UInt64 = 0
    public var readFailures: UInt64 = 0
    public var largestBatch: Int = 0
}

/// What InotifyWatcher and FanotifyWatcher are made of: a kernel event fd and its reader
/// thread (`ReadinessThread`), started once and cancelled once (the fd closed by the thread
/// as it ends), read until EAGAIN into one reused buffer per wake-up, decoded by the owner's
/// `decode`, and the decoded events of the wake-up handed on as one array. What the bytes
/// mean, and what else the fd does (watches, marks), is the subclass's.
///
/// The reader thread runs each wake-up's read, decode and delivery with `queue.sync`: on the
/// owner's queue, in the thread that polled (no worker woken, step b of
/// docs/measurements/latency-path.md). The handlers run on the queue as a read source's did.
///
/// Confined to `queue`: every method is called there, and the handlers run there.
// @unchecked Sendable: confined to its owner's queue (`queue`), where its reader thread delivers.
public class KernelEventWatcher<Event>: @unchecked Sendable {
    public typealias Statistics = KernelEventStatistics

    enum State {
        case created
        case started
        case cancelled
    }

    public let queue: DispatchQueue
    private let reader: ReadinessThread
    /// The reader thread's name ("wk-inotify"), for top, perf and the tests.
    private let threadName: String
    private(set) var state = State.created
    /// Appends what a read's bytes hold to the array.
    private let decode: (UnsafeRawBufferPointer, inout [Event]) -> Void
    private let isOverflow: (Event) -> Bool
    var onEvents: ([Event]) -> Void = { _ in }
    var onReadFailure: (Errno) -> Void = { _ in }
    /// One buffer for every read: allocating and zeroing 256 KiB per wake-up cost an
    /// mmap, 64 page faults and an munmap each time (measured in DirectoryWatcher).
    private let buffer: UnsafeMutableRawBufferPointer
    public private(set) var statistics = Statistics()

    /// 256 KiB: over 4,000 inotify events of a 16-byte name, or fanotify events of a
    /// 12-byte handle and a short name; either kernel refuses a read smaller than its next
    /// event with EINVAL, and no event is near this size.
    static var bufferSize: Int { 256 * 1024 }
    /// Reads per wake-up before giving the queue back: 64 × 256 KiB = 16 MiB, far above a
    /// full default queue (16,384 events). A writer faster than that cannot starve the
    /// queue; poll(2) is level-triggered, so the reader comes back at once for what is left.
    static var maxReadsPerWakeUp: Int { 64 }

    /// Takes `fd`; its reader thread starts with `start()`. Fails with eventfd's errno
    /// (EMFILE) for the thread's stop signal.
    init(_ fd: consuming OwnedFileDescriptor, queue: DispatchQueue, threadName: String,
         decode: @escaping (UnsafeRawBufferPointer, inout [Event]) -> Void, isOverflow: @escaping (Event) -> Bool) throws(Errno) {
        self.queue = queue
        self.decode = decode
        self.isOverflow = isOverflow
        self.threadName = threadName
        reader = try ReadinessThread(polling: fd, for: Int16(POLLIN))
        buffer = .allocate(byteCount: Self.bufferSize, alignment: 8)
    }

    deinit {
        cancel()
        buffer.deallocate()
    }

    /// The fd, for the subclass's calls and the dump; valid until `cancel()`.
    public var descriptor: FileDescriptor { reader.descriptor }

    /// The reader thread's kernel id while it runs (0 before and after), for the tests.
    var readerThreadID: Int32 { reader.threadID }

    public var isCancelled: Bool { state == .cancelled }

    /// Starts delivering events: creates the reader thread. Once; later calls do nothing.
    /// Fails with pthread_create's errno (EAGAIN: the process or user is out of threads).
    public func start() throws(Errno) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard case .created = state else { return }
        let queue = self.queue
        // Weak: the thread must not keep its owner alive; the owner's deinit stops it.
        try reader.start(name: threadName, onReady: { [weak self] _ in
            guard let self else { return }
            CarriedHandOffs.carry(sync: queue) { self.readAvailableEvents() }
        }, onPollFailure: { [weak self] failure in
            guard let self else { return }
            queue.async { self.onReadFailure(failure) }
        })
        state = .started
    }

    /// Stops delivery for good and returns at once; the reader thread then closes the fd
    /// (never started, it is closed here): the kernel's watches or marks go with it, and
    /// events still queued there are dropped. Never waits for the thread, which may be
    /// waiting in `queue.sync` for the block this is called from.
    public func cancel() {
        guard state != .cancelled else { return }
        state = .cancelled
        reader.stop()
    }

    /// Reads until EAGAIN (or `maxReadsPerWakeUp`) and delivers everything read as one
    /// batch: the owner can then coalesce a burst at once instead of event by event. On the
    /// reader thread, inside `queue.sync`.
    private func readAvailableEvents() {
        guard state == .started else { return }
        statistics.wakeUps += 1
        let events = readQueued()
        guard !events.isEmpty else { return }
        // A few events (a file written now and then) are carried to their job on this thread;
        // a burst's jobs start on the job engine's own worker while this thread reads on.
        if events.count > Self.carriedEventsAtMost { CarriedHandOffs.current?.handOver() }
        onEvents(events)
    }

    /// The most events of one wake-up whose hand-offs this thread carries (CarriedHandOffs).
    static var carriedEventsAtMost: Int { 16 }

    /// What the kernel has queued, read now and returned instead of delivered: for an owner
    /// that must empty the kernel's queue before it fills (a burst of its own making).
    func readQueued() -> [Event] {
        dispatchPrecondition(condition: .onQueue(queue))
        guard state == .started else { return [] }
        let fd = reader.descriptor.rawValue
        var events: [Event] = []
        reading: for _ in 0..<Self.maxReadsPerWakeUp {
            switch NonBlockingRead.read(fd, into: buffer) {
            case .bytes(let count):
                statistics.reads += 1
                statistics.bytesRead += UInt64(count)
                decode(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), &events)
            case .wouldBlock, .endOfFile:
                break reading
            case .failed(let failure):
                statistics.readFailures += 1
                onReadFailure(failure)
                break reading
            }
        }
        guard !events.isEmpty else { return [] }
        statistics.events += UInt64(events.count)
        statistics.largestBatch = max(statistics.largestBatch, events.count)
        statistics.overflows += UInt64(events.lazy.filter(isOverflow).count)
        return events
    }

    /// The fields both watchers show in the dump.
    func describeReading() -> [DumpField] {
        [
            .init("fd", state == .cancelled ? .null : .int(Int64(reader.descriptor.rawValue))),
            .init("state", .string("\(state)")),
            .init("wake_ups", .int(Int64(statistics.wakeUps))),
            .init("reads", .int(Int64(statistics.reads))),
            .init("bytes_read", .int(Int64(statistics.bytesRead))),
            .init("events", .int(Int64(statistics.events))),
            .init("largest_batch", .int(Int64(statistics.largestBatch))),
            .init("overflows", .int(Int64(statistics.overflows))),
            .init("read_failures", .int(Int64(statistics.readFailures))),
        ]
    }
}
