import CWatchkeeperSystem
import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// One inotify instance and its reader thread, on a serial queue its owner gives it: adds
/// and removes watches, reads every event the kernel has queued when the fd is readable,
/// and hands the owner the decoded events of each wake-up as one array. What the events
/// mean (which rule, which path) is the owner's business, with a `WatchTable`.
///
/// Confined to `queue`: every method is called there, and the handlers run there.
// @unchecked Sendable: confined to the watching queue (`queue`), like every KernelEventWatcher.
public final class InotifyWatcher: KernelEventWatcher<InotifyEvent>, @unchecked Sendable {
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

    /// Creates the instance (inotify_init1, non-blocking, close-on-exec); its reader thread
    /// starts with `start()`, so watches can be added before any event is delivered. `onEvents` gets every wake-up's events in kernel order; `onReadFailure`
    /// an unexpected read error (the reader goes on).
    public init(queue: DispatchQueue, onEvents: @escaping ([InotifyEvent]) -> Void,
                onReadFailure: @escaping (Errno) -> Void) throws(Errno) {
        let flags = Int32(IN_NONBLOCK | IN_CLOEXEC)
        let fd = OwnedFileDescriptor(adopting: try systemCall { inotify_init1(flags) })
        try super.init(fd, queue: queue, threadName: "wk-inotify", decode: { bytes, events in InotifyEvent.decode(bytes, into: &events) },
                   isOverflow: { $0.mask.contains(.queueOverflow) })
        self.onEvents = onEvents
        self.onReadFailure = onReadFailure
    }

    /// Watches `path` (bytes, no NUL) for `mask`'s events. The corresponding C function
    /// is `inotify_add_watch`; ENOSPC means fs.inotify.max_user_watches is reached.
    public func addWatch(path: [UInt8], mask: InotifyMask, existing: ExistingWatch) -> Result<WatchDescriptor, Errno> {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isCancelled else { return .failure(.badFileDescriptor) }
        guard !path.isEmpty, !path.contains(0) else { return .failure(.invalidArgument) }
        var bits = mask.subtracting(InotifyMask.existingWatchBits)
        switch existing {
        case .replaceMask: break
        case .addToMask: bits.insert(.maskAdd)
        case .fail: bits.insert(.maskCreate)
        }
        let fd = descriptor.rawValue
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
        guard !isCancelled else { return .failure(.badFileDescriptor) }
        let fd = descriptor.rawValue
        return nothingOrErrno { inotify_rm_watch(fd, wd.rawValue) }
    }

    /// Replaces the handlers, for an owner that creates the watcher before it can refer
    /// to itself.
    public func setHandlers(onEvents: @escaping ([InotifyEvent]) -> Void, onReadFailure: @escaping (Errno) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.onEvents = onEvents
        self.onReadFailure = onReadFailure
    }

    /// For the state dump.
    public func describe() -> DumpValue {
        .object(describeReading())
    }
}
