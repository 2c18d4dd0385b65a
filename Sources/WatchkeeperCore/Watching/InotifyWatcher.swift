import CWatchkeeperSystem
import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// One inotify instance and its read source, on a serial queue its owner gives it: adds
/// and removes watches, reads every event the kernel has queued when the fd is readable,
/// and hands the owner the decoded events of each wake-up as one array. What the events
/// mean (which rule, which path) is the owner's business, with a `WatchTable`.
///
/// Confined to `queue`: every method is called there, and the handlers run there.
public final class InotifyWatcher: @unchecked Sendable {
    /// What to do when the path's inode is already watched by this instance (another rule
    /// or an earlier call watches the same directory). There is no default: forgetting
    /// IN_MASK_ADD silently narrows another owner's watch to your mask.
    public enum ExistingWatch: Sendable {
        /// The watch's mask becomes `mask` (plain inotify_add_watch).
        case replaceMask
        /// `mask` is added to the watch's mask (IN_MASK_ADD): for several owners per watch.
        case addToMask
        /// The call fails with EEXIST (IN_MASK_CREATE, Linux 4.18+).
        case fail
    }

    public struct Statistics: Sendable, Equatable {
        public var wakeUps: UInt64 = 0
        public var reads: UInt64 = 0
        public var bytesRead: UInt64 = 0
        public var events: UInt64 = 0
        public var overflows: UInt64 = 0
        public var readFailures: UInt64 = 0
        public var largestBatch: Int = 0
    }

    private enum State {
        case created
        case started
        case cancelled
    }

    public let queue: DispatchQueue
    private let readSource: FileDescriptorReadSource
    private var state = State.created
    private var onEvents: ([InotifyEvent]) -> Void
    private var onReadFailure: (Errno) -> Void
    /// One buffer for every read: allocating and zeroing 256 KiB per wake-up cost an
    /// mmap, 64 page faults and an munmap each time (measured in DirectoryWatcher).
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: InotifyWatcher.bufferSize, alignment: 8)
    public private(set) var statistics = Statistics()

    static let bufferSize = 256 * 1024
    /// Reads per wake-up before giving the queue back: 64 × 256 KiB = 16 MiB, far above
    /// a full default queue (16384 events). A writer faster than that cannot starve the
    /// queue; the source is level-triggered (EPOLLONESHOT re-armed after the handler), so
    /// it fires again at once for what is left.
    static let maxReadsPerWakeUp = 64

    /// Creates the instance (inotify_init1, non-blocking, close-on-exec) and its read
    /// source, inactive until `start()`, so watches can be added before any event is
    /// delivered. `onEvents` gets every wake-up's events in kernel order; `onReadFailure`
    /// an unexpected read error (the source stays armed).
    public init(queue: DispatchQueue, onEvents: @escaping ([InotifyEvent]) -> Void,
                onReadFailure: @escaping (Errno) -> Void) throws(Errno) {
        let flags = Int32(IN_NONBLOCK | IN_CLOEXEC)
        let fd = OwnedFileDescriptor(adopting: try systemCall { inotify_init1(flags) })
        self.queue = queue
        self.onEvents = onEvents
        self.onReadFailure = onReadFailure
        self.readSource = fd.makeReadSource(queue: queue)
        readSource.source.setEventHandler { [weak self] in
            self?.readAvailableEvents()
        }
    }

    deinit {
        cancel()
        buffer.deallocate()
    }

    /// The inotify fd, for the dump; valid until `cancel()`.
    public var descriptor: FileDescriptor { readSource.descriptor }

    public var isCancelled: Bool { state == .cancelled }

    /// Starts delivering events. Once; later calls do nothing.
    public func start() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard case .created = state else { return }
        state = .started
        readSource.activate()
    }

    /// Stops delivery for good and closes the fd (in the source's cancel handler): every
    /// watch goes with it. Events still queued in the kernel are dropped.
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

    /// Watches `path` (bytes, no NUL) for `mask`'s events. The corresponding C function
    /// is `inotify_add_watch`; ENOSPC means fs.inotify.max_user_watches is reached.
    public func addWatch(path: [UInt8], mask: InotifyMask, existing: ExistingWatch) -> Result<WatchDescriptor, Errno> {
        dispatchPrecondition(condition: .onQueue(queue))
        guard state != .cancelled else { return .failure(.badFileDescriptor) }
        guard !path.isEmpty, !path.contains(0) else { return .failure(.invalidArgument) }
        var bits = mask.subtracting(InotifyMask.existingWatchBits)
        switch existing {
        case .replaceMask: break
        case .addToMask: bits.insert(.maskAdd)
        case .fail: bits.insert(.maskCreate)
        }
        let fd = readSource.descriptor.rawValue
        let terminated = path + [0]
        return terminated.withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { name in
                valueOrErrno { inotify_add_watch(fd, name.baseAddress!, bits.rawValue) }
            }
        }.map(WatchDescriptor.init(rawValue:))
    }

    /// Removes a watch; the kernel then queues IN_IGNORED for it, which the owner's
    /// `WatchTable` treats as already handled. EINVAL: the watch was already gone (its
    /// directory deleted or unmounted, its IN_IGNORED possibly still queued).
    public func removeWatch(_ wd: WatchDescriptor) -> Result<Void, Errno> {
        dispatchPrecondition(condition: .onQueue(queue))
        guard state != .cancelled else { return .failure(.badFileDescriptor) }
        let fd = readSource.descriptor.rawValue
        return nothingOrErrno { inotify_rm_watch(fd, wd.rawValue) }
    }

    /// Replaces the handlers, for an owner that creates the watcher before it can refer
    /// to itself.
    public func setHandlers(onEvents: @escaping ([InotifyEvent]) -> Void, onReadFailure: @escaping (Errno) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.onEvents = onEvents
        self.onReadFailure = onReadFailure
    }

    /// Reads until EAGAIN (or `maxReadsPerWakeUp`) and delivers everything read as one
    /// batch: the owner can then coalesce a burst at once instead of event by event.
    private func readAvailableEvents() {
        guard state == .started else { return }
        statistics.wakeUps += 1
        let fd = readSource.descriptor.rawValue
        var events: [InotifyEvent] = []
        reading: for _ in 0..<Self.maxReadsPerWakeUp {
            switch valueOrErrno({ read(fd, buffer.baseAddress, buffer.count) }) {
            case .success(let count) where count > 0:
                statistics.reads += 1
                statistics.bytesRead += UInt64(count)
                InotifyEvent.decode(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), into: &events)
            case .success:
                break reading
            case .failure(.resourceTemporarilyUnavailable):
                break reading
            case .failure(let failure):
                statistics.readFailures += 1
                onReadFailure(failure)
                break reading
            }
        }
        guard !events.isEmpty else { return }
        statistics.events += UInt64(events.count)
        statistics.largestBatch = max(statistics.largestBatch, events.count)
        statistics.overflows += UInt64(events.lazy.filter { $0.mask.contains(.queueOverflow) }.count)
        onEvents(events)
    }

    /// For the state dump.
    public func describe() -> DumpValue {
        .object([
            .init("fd", state == .cancelled ? .null : .int(Int64(readSource.descriptor.rawValue))),
            .init("state", .string("\(state)")),
            .init("wake_ups", .int(Int64(statistics.wakeUps))),
            .init("reads", .int(Int64(statistics.reads))),
            .init("bytes_read", .int(Int64(statistics.bytesRead))),
            .init("events", .int(Int64(statistics.events))),
            .init("largest_batch", .int(Int64(statistics.largestBatch))),
            .init("overflows", .int(Int64(statistics.overflows))),
            .init("read_failures", .int(Int64(statistics.readFailures))),
        ])
    }
}
