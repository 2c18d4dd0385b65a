import CWatchkeeperSystem
import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// One fanotify group and its read source, on a serial queue its owner gives it: marks
/// whole file systems, reads every event the kernel has queued when the fd is readable,
/// and hands the owner the decoded events of each wake-up as one array.
///
/// The group reports directory handles and names (FAN_REPORT_DFID_NAME), so one mark per
/// file system replaces one inotify watch per directory, and a renamed directory keeps its
/// handle: `DirectoryHandleResolver` turns handles into today's paths. A file system mark
/// reports the whole file system, not only the watched tree: the owner filters by path.
///
/// Needs CAP_SYS_ADMIN (fanotify_init with FID reporting and FAN_MARK_FILESYSTEM both do).
///
/// Confined to `queue`: every method is called there, and the handlers run there.
public final class FanotifyWatcher: @unchecked Sendable {
    public struct Statistics: Sendable, Equatable {
        public var wakeUps: UInt64 = 0
        public var reads: UInt64 = 0
        public var bytesRead: UInt64 = 0
        public var events: UInt64 = 0
        public var overflows: UInt64 = 0
        public var readFailures: UInt64 = 0
        /// Events the decoder refused (see `FanotifyMalformation`), and the bytes of reads
        /// it had to stop early in.
        public var malformedEvents: UInt64 = 0
        public var undecodedBytes: UInt64 = 0
        public var largestBatch: Int = 0
    }

    private enum State {
        case created
        case started
        case cancelled
    }

    public let queue: DispatchQueue
    /// Whether events also carry the object's own handle (FAN_REPORT_FID): needed to hear
    /// of a file's own DELETE_SELF and MOVE_SELF, and it splits a new file's CREATE from its
    /// MODIFY|CLOSE_WRITE (which then carry the file's handle, so they are another event).
    public let reportsObjectHandles: Bool
    private let readSource: FileDescriptorReadSource
    private var state = State.created
    private var onEvents: ([FanotifyEvent]) -> Void
    private var onReadFailure: (Errno) -> Void
    private var onMalformed: (FanotifyMalformation) -> Void
    /// One buffer for every read, as InotifyWatcher does.
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: FanotifyWatcher.bufferSize, alignment: 8)
    public private(set) var statistics = Statistics()

    /// 256 KiB holds over 4,000 events of a 12-byte handle and a short name; the largest
    /// single event (three 128-byte handles and two 255-byte names) is under 1 KiB, and a
    /// buffer smaller than the next event would make read fail with EINVAL.
    static let bufferSize = 256 * 1024
    /// Reads per wake-up before giving the queue back, as InotifyWatcher (16 MiB, far above
    /// a full default queue of 16,384 events).
    static let maxReadsPerWakeUp = 64

    /// Creates the group (fanotify_init: notification class, non-blocking, close-on-exec,
    /// directory handle and name reporting) and its read source, inactive until `start()`.
    /// `onEvents` gets every wake-up's events in kernel order; `onReadFailure` an unexpected
    /// read error (the source stays armed); `onMalformed` the first problem of a read whose
    /// bytes the decoder refused, which a kernel never writes.
    ///
    /// EPERM: no CAP_SYS_ADMIN; EINVAL: a kernel older than 5.9 (FAN_REPORT_DFID_NAME).
    public init(queue: DispatchQueue, reportObjectHandles: Bool = false,
                onEvents: @escaping ([FanotifyEvent]) -> Void,
                onReadFailure: @escaping (Errno) -> Void,
                onMalformed: @escaping (FanotifyMalformation) -> Void = { _ in }) throws(Errno) {
        var flags = UInt32(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK) | UInt32(WK_FAN_REPORT_DFID_NAME)
        if reportObjectHandles { flags |= UInt32(FAN_REPORT_FID) }
        let fd = OwnedFileDescriptor(adopting: try systemCall { wk_fanotify_init(flags, UInt32(WK_FAN_EVENT_FILE_FLAGS)) })
        self.queue = queue
        self.reportsObjectHandles = reportObjectHandles
        self.onEvents = onEvents
        self.onReadFailure = onReadFailure
        self.onMalformed = onMalformed
        self.readSource = fd.makeReadSource(queue: queue)
        readSource.source.setEventHandler { [weak self] in
            self?.readAvailableEvents()
        }
    }

    deinit {
        cancel()
        buffer.deallocate()
    }

    /// The fanotify fd, for the dump; valid until `cancel()`.
    public var descriptor: FileDescriptor { readSource.descriptor }

    public var isCancelled: Bool { state == .cancelled }

    /// Starts delivering events. Once; later calls do nothing.
    public func start() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard case .created = state else { return }
        state = .started
        readSource.activate()
    }

    /// Stops delivery for good and closes the fd (in the source's cancel handler), which
    /// removes every mark. Events still queued in the kernel are dropped.
    public func cancel() {
        switch state {
        case .cancelled:
            return
        case .created:
            state = .cancelled
            // As InotifyWatcher: a never-activated source must be activated to be released.
            readSource.cancel()
            readSource.activate()
        case .started:
            state = .cancelled
            readSource.cancel()
        }
    }

    /// Marks the whole file system that holds `path` (bytes, no NUL) for `mask`'s events,
    /// on directories too (FAN_ONDIR). Marking it again adds to the mask. The corresponding
    /// C function is `fanotify_mark(FAN_MARK_ADD | FAN_MARK_FILESYSTEM)`; EXDEV: the file
    /// system has no fsid or `path` is inside a btrfs subvolume, ENODEV or EOPNOTSUPP: it
    /// cannot encode file handles (some FUSE and network file systems), ENOSPC: the group
    /// has fs.fanotify.max_user_marks marks.
    public func markFileSystem(containing path: [UInt8], mask: FanotifyMask) -> Result<Void, Errno> {
        mark(path: path, flags: UInt32(FAN_MARK_ADD | FAN_MARK_FILESYSTEM), mask: mask.union(.onDirectory))
    }

    /// Removes `mask`'s bits from the file system's mark; the mark goes once none is left.
    public func unmarkFileSystem(containing path: [UInt8], mask: FanotifyMask) -> Result<Void, Errno> {
        mark(path: path, flags: UInt32(FAN_MARK_REMOVE | FAN_MARK_FILESYSTEM), mask: mask.union(.onDirectory))
    }

    private func mark(path: [UInt8], flags: UInt32, mask: FanotifyMask) -> Result<Void, Errno> {
        dispatchPrecondition(condition: .onQueue(queue))
        guard state != .cancelled else { return .failure(.badFileDescriptor) }
        guard !path.isEmpty, !path.contains(0) else { return .failure(.invalidArgument) }
        let fd = readSource.descriptor.rawValue
        let terminated = path + [0]
        return terminated.withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { name in
                nothingOrErrno { wk_fanotify_mark(fd, flags, mask.rawValue, AT_FDCWD, name.baseAddress!) }
            }
        }
    }

    /// Replaces the handlers, for an owner that creates the watcher before it can refer
    /// to itself.
    public func setHandlers(onEvents: @escaping ([FanotifyEvent]) -> Void, onReadFailure: @escaping (Errno) -> Void,
                            onMalformed: @escaping (FanotifyMalformation) -> Void = { _ in }) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.onEvents = onEvents
        self.onReadFailure = onReadFailure
        self.onMalformed = onMalformed
    }

    /// Reads until EAGAIN (or `maxReadsPerWakeUp`) and delivers everything read as one
    /// batch, as InotifyWatcher does.
    private func readAvailableEvents() {
        guard state == .started else { return }
        statistics.wakeUps += 1
        let fd = readSource.descriptor.rawValue
        var events: [FanotifyEvent] = []
        reading: for _ in 0..<Self.maxReadsPerWakeUp {
            switch NonBlockingRead.read(fd, into: buffer) {
            case .bytes(let count):
                statistics.reads += 1
                statistics.bytesRead += UInt64(count)
                let decoding = FanotifyEvent.decode(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), into: &events)
                statistics.malformedEvents += UInt64(decoding.droppedEvents)
                statistics.undecodedBytes += UInt64(count - decoding.consumedBytes)
                if let problem = decoding.firstMalformation { onMalformed(problem) }
            case .wouldBlock, .endOfFile:
                break reading
            case .failed(let failure):
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
            .init("reports_object_handles", .bool(reportsObjectHandles)),
            .init("wake_ups", .int(Int64(statistics.wakeUps))),
            .init("reads", .int(Int64(statistics.reads))),
            .init("bytes_read", .int(Int64(statistics.bytesRead))),
            .init("events", .int(Int64(statistics.events))),
            .init("largest_batch", .int(Int64(statistics.largestBatch))),
            .init("overflows", .int(Int64(statistics.overflows))),
            .init("read_failures", .int(Int64(statistics.readFailures))),
            .init("malformed_events", .int(Int64(statistics.malformedEvents))),
            .init("undecoded_bytes", .int(Int64(statistics.undecodedBytes))),
        ])
    }
}
