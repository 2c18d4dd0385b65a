import CWatchkeeperSystem
import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// One fanotify group and its reader thread, on a serial queue its owner gives it: marks
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
// @unchecked Sendable: confined to the watching queue (`queue`), like every KernelEventWatcher.
public final class FanotifyWatcher: KernelEventWatcher<FanotifyEvent>, @unchecked Sendable {
    /// What the decoder refused: events with malformed records (see `FanotifyMalformation`),
    /// and the bytes of reads it had to stop early in. Kept apart from the reader, whose
    /// `decode` reports here before the watcher exists.
    // @unchecked Sendable: confined to the watching queue, with its watcher.
    private final class Decoding: @unchecked Sendable {
        var malformedEvents: UInt64 = 0
        var undecodedBytes: UInt64 = 0
        var onMalformed: (FanotifyMalformation) -> Void = { _ in }
    }

    /// Whether events also carry the object's own handle (FAN_REPORT_FID): needed to hear
    /// of a file's own DELETE_SELF and MOVE_SELF, and it splits a new file's CREATE from its
    /// MODIFY|CLOSE_WRITE (which then carry the file's handle, so they are another event).
    public let reportsObjectHandles: Bool
    private let decoding: Decoding


    /// Creates the group (fanotify_init: notification class, non-blocking, close-on-exec,
    /// directory handle and name reporting); its reader thread starts with `start()`.
    /// `onEvents` gets every wake-up's events in kernel order; `onReadFailure` an unexpected
    /// read error (the reader goes on); `onMalformed` the first problem of a read whose
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
        let decoding = Decoding()
        decoding.onMalformed = onMalformed
        self.decoding = decoding
        self.reportsObjectHandles = reportObjectHandles
        try super.init(fd, queue: queue, threadName: "wk-fanotify", decode: { bytes, events in
            let decoded = FanotifyEvent.decode(bytes, into: &events)
            decoding.malformedEvents += UInt64(decoded.droppedEvents)
            decoding.undecodedBytes += UInt64(bytes.count - decoded.consumedBytes)
            if let problem = decoded.firstMalformation { decoding.onMalformed(problem) }
        }, isOverflow: { $0.mask.contains(.queueOverflow) })
        self.onEvents = onEvents
        self.onReadFailure = onReadFailure
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
        guard !isCancelled else { return .failure(.badFileDescriptor) }
        guard !path.isEmpty, !path.contains(0) else { return .failure(.invalidArgument) }
        let fd = descriptor.rawValue
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
        decoding.onMalformed = onMalformed
    }

    /// For the state dump.
    public func describe() -> DumpValue {
        .object(describeReading() + [
            .init("reports_object_handles", .bool(reportsObjectHandles)),
            .init("malformed_events", .int(Int64(decoding.malformedEvents))),
            .init("undecoded_bytes", .int(Int64(decoding.undecodedBytes))),
        ])
    }
}
