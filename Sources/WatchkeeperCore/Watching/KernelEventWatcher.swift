import Dispatch
import SystemPackage

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

/// What InotifyWatcher and FanotifyWatcher are made of: a kernel event fd and
/// its read source on the owner's serial queue, started once and cancelled once (the fd
/// closed in the source's cancel handler), read until EAGAIN into one reused buffer per
/// wake-up, decoded by the owner's `decode`, and the decoded events of the wake-up handed on
/// as one array. What the bytes mean, and what else the fd does (watches, marks), is the
/// subclass's.
///
/// Confined to `queue`: every method is called there, and the handlers run there.
// @unchecked Sendable: confined to its owner's queue (`queue`), where its read source fires.
public class KernelEventWatcher<Event>: @unchecked Sendable {
    public typealias Statistics = KernelEventStatistics

    enum State {
        case created
        case started
        case cancelled
    }

    public let queue: DispatchQueue
    private let readSource: FileDescriptorReadSource
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
    /// queue; the source is level-triggered, so it fires again at once for what is left.
    static var maxReadsPerWakeUp: Int { 64 }

    /// Takes `fd` and makes its read source, inactive until `start()`.
    init(_ fd: consuming OwnedFileDescriptor, queue: DispatchQueue, decode: @escaping (UnsafeRawBufferPointer, inout [Event]) -> Void,
         isOverflow: @escaping (Event) -> Bool) {
        self.queue = queue
        self.decode = decode
        self.isOverflow = isOverflow
        buffer = .allocate(byteCount: Self.bufferSize, alignment: 8)
        readSource = fd.makeReadSource(queue: queue)
        readSource.source.setEventHandler { [weak self] in
            self?.readAvailableEvents()
        }
    }

    deinit {
        cancel()
        buffer.deallocate()
    }

    /// The fd, for the subclass's calls and the dump; valid until `cancel()`.
    public var descriptor: FileDescriptor { readSource.descriptor }

    public var isCancelled: Bool { state == .cancelled }

    /// Starts delivering events. Once; later calls do nothing.
    public func start() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard case .created = state else { return }
        state = .started
        readSource.activate()
    }

    /// Stops delivery for good and closes the fd (in the source's cancel handler): the
    /// kernel's watches or marks go with it, and events still queued there are dropped.
    public func cancel() {
        switch state {
        case .cancelled:
            return
        case .created:
            state = .cancelled
            // An inactive source runs its cancel handler (our close) only once activated,
            // and a never-activated source must not be released: activate after cancel.
            readSource.cancel()
            readSource.activate()
        case .started:
            state = .cancelled
            readSource.cancel()
        }
    }

    /// Reads until EAGAIN (or `maxReadsPerWakeUp`) and delivers everything read as one
    /// batch: the owner can then coalesce a burst at once instead of event by event.
    private func readAvailableEvents() {
        guard state == .started else { return }
        statistics.wakeUps += 1
        let events = readQueued()
        guard !events.isEmpty else { return }
        onEvents(events)
    }

    /// What the kernel has queued, read now and returned instead of delivered: for an owner
    /// that must empty the kernel's queue before it fills (a burst of its own making).
    func readQueued() -> [Event] {
        dispatchPrecondition(condition: .onQueue(queue))
        guard state == .started else { return [] }
        let fd = readSource.descriptor.rawValue
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
            .init("fd", state == .cancelled ? .null : .int(Int64(readSource.descriptor.rawValue))),
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
