import CWatchkeeperSystem
import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Turns the directory handles of fanotify events into paths: open_by_handle_at(O_PATH)
/// relative to the watched root's mount, then readlink of /proc/self/fd/N, which is the
/// directory's path now, wherever it has been renamed to. Answers are kept in a bounded
/// least-recently-used cache keyed by handle, since a busy directory sends many events.
///
/// A cached path goes stale when the directory, or any directory above it, is renamed,
/// and the cache keeps no tree to find which entries are below a moved directory: the
/// owner passes every batch to `forgetStalePaths(after:)`, which empties the cache after a
/// directory rename or an overflow. Directory renames are rare next to file events, and
/// each cached path costs one open and one readlink to learn again.
///
/// A file system mark reports the whole file system, not only the watched tree, so each
/// answer also says whether the directory is inside the root; directories outside are
/// cached too, since a busy one elsewhere sends as many events as one inside.
///
/// Confined to `queue`, the watcher's.
// @unchecked Sendable: confined to the watching queue (`queue`).
public final class DirectoryHandleResolver: @unchecked Sendable {
    public enum Resolution: Hashable, Sendable {
        /// The directory's absolute path as the kernel spells it from the root's mount: the
        /// root itself or below it.
        case path([UInt8])
        /// A directory of the same file system outside the root, with its path as /proc
        /// spells it. When the root is a bind mount of a subdirectory, a directory the
        /// mount does not show reads back as just "/", so the path is for messages only.
        case outsideRoot([UInt8])
        /// The directory no longer exists (ESTALE, or open but unlinked): its events were
        /// queued before it was removed.
        case gone
        /// Anything else: EMFILE, ENAMETOOLONG for a path the kernel will not spell, EXDEV
        /// for a handle of another file system than the root's.
        case failed(Errno)
    }

    public struct Statistics: Sendable, Equatable {
        public var hits: UInt64 = 0
        public var misses: UInt64 = 0
        public var evictions: UInt64 = 0
        public var gone: UInt64 = 0
        public var failures: UInt64 = 0
        /// Answers, cached or not, of a directory outside the root: the file system mark's
        /// noise.
        public var outsideRoot: UInt64 = 0
        /// Times the whole cache was emptied by `forgetStalePaths(after:)` or `forgetAll()`.
        public var invalidations: UInt64 = 0
    }

    public let queue: DispatchQueue
    public let capacity: Int
    /// The root's path as given, for messages.
    public let rootPath: [UInt8]
    /// The root's path as the kernel spells it (symbolic links resolved), which resolved
    /// paths are compared with.
    public let canonicalRootPath: [UInt8]
    /// A read-only fd of the root: open_by_handle_at opens handles on its mount, so the
    /// paths come out as seen through that mount, in this mount namespace. Not O_PATH: the
    /// kernel looks mount_fd up with fdget, which refuses O_PATH fds with EBADF. Opened
    /// when a handle needs the kernel and closed by `releaseRoot()`: held for good, it
    /// would make `umount` of the file system fail with EBUSY, which inotify never does.
    private var root: OwnedFileDescriptor?
    /// The root's f_fsid, read as FanotifyFileHandle reads an event's.
    public let fileSystemID: UInt64
    /// Only `.path` and `.outsideRoot` answers.
    private var cache: LeastRecentlyUsed<Resolution>
    public private(set) var statistics = Statistics()
    /// PATH_MAX and one: readlink fills it all only when the path was cut short.
    private let linkBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(PATH_MAX) + 1, alignment: 1)

    public static let defaultCapacity = 65_536

    /// Opens `rootPath` (bytes, no NUL) with O_RDONLY | O_DIRECTORY. open_by_handle_at needs
    /// CAP_DAC_READ_SEARCH.
    public init(queue: DispatchQueue, rootPath: [UInt8], capacity: Int = DirectoryHandleResolver.defaultCapacity) throws(Errno) {
        precondition(capacity > 0, "a resolver caches at least one path")
        guard !rootPath.isEmpty, !rootPath.contains(0) else { throw .invalidArgument }
        let root = OwnedFileDescriptor(adopting: try Self.openDirectory(rootPath).get())
        var fileSystemID: UInt64 = 0
        try nothingOrErrno { wk_file_system_id(root.rawValue, &fileSystemID) }.get()
        self.fileSystemID = fileSystemID
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(PATH_MAX) + 1, alignment: 1)
        defer { scratch.deallocate() }
        self.canonicalRootPath = try Self.linkTarget(of: root.rawValue, into: scratch).get()
        self.root = consume root
        self.queue = queue
        self.capacity = capacity
        self.rootPath = rootPath
        self.cache = LeastRecentlyUsed(capacity: capacity)
    }

    deinit {
        linkBuffer.deallocate()
    }

    private static func openDirectory(_ path: [UInt8]) -> Result<Int32, Errno> {
        (path + [0]).withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { name in
                valueOrErrno { open(name.baseAddress!, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
            }
        }
    }

    /// The root's fd, opened again if released. A path that now leads to another file
    /// system (the root renamed away, something mounted over it) cannot resolve handles of
    /// this one: ESTALE, as for a handle that names nothing.
    private func rootDescriptor() -> Result<Int32, Errno> {
        if let raw = root?.rawValue { return .success(raw) }
        let opened = Self.openDirectory(rootPath)
        guard case .success(let raw) = opened else { return opened }
        let fd = OwnedFileDescriptor(adopting: raw)
        var id: UInt64 = 0
        guard case .success = nothingOrErrno({ wk_file_system_id(raw, &id) }), id == fileSystemID else {
            return .failure(.staleNFSFileHandle)
        }
        root = consume fd
        return .success(raw)
    }

    /// Closes the root's fd until the next handle that needs it: the owner calls this after
    /// each batch, so the file system can be unmounted between batches.
    public func releaseRoot() {
        dispatchPrecondition(condition: .onQueue(queue))
        root = nil
    }

    /// How many paths are cached.
    public var count: Int { cache.count }

    /// The path of the directory `handle` names, from the cache or the kernel.
    public func resolve(_ handle: FanotifyFileHandle) -> Resolution {
        dispatchPrecondition(condition: .onQueue(queue))
        if let cached = cache.value(for: handle) {
            statistics.hits += 1
            if case .outsideRoot = cached { statistics.outsideRoot += 1 }
            return cached
        }
        statistics.misses += 1
        let resolution = resolveUncached(handle)
        switch resolution {
        case .path, .outsideRoot:
            if case .outsideRoot = resolution { statistics.outsideRoot += 1 }
            if cache.insert(resolution, for: handle) { statistics.evictions += 1 }
        case .gone:
            // Not cached: a handle whose directory is gone sends no events after the ones
            // already queued, so the entry would only push a live one out.
            statistics.gone += 1
        case .failed:
            statistics.failures += 1
        }
        return resolution
    }

    /// Empties the cache when `events` may have changed cached paths: a directory renamed
    /// (by either half, FAN_RENAME or its own MOVE_SELF) or an overflow, which may have
    /// lost a rename. A deleted directory's own entry goes too; its handle can never name
    /// another directory, so that is only to free the slot. Returns whether it emptied it.
    @discardableResult
    public func forgetStalePaths(after events: [FanotifyEvent]) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        let renames: FanotifyMask = [.movedFrom, .movedTo, .moveSelf, .rename]
        for event in events {
            if event.mask.contains(.queueOverflow) || (event.isDirectory && !event.mask.isDisjoint(with: renames)) {
                forgetAll()
                return true
            }
            if event.isDirectory, event.mask.contains(.deleteSelf), let directory = event.directory {
                cache.remove(directory)
            }
        }
        return false
    }

    public func forget(_ handle: FanotifyFileHandle) {
        dispatchPrecondition(condition: .onQueue(queue))
        cache.remove(handle)
    }

    public func forgetAll() {
        dispatchPrecondition(condition: .onQueue(queue))
        statistics.invalidations += 1
        cache.removeAll()
    }

    /// The corresponding C functions are `open_by_handle_at(O_PATH)` and `readlink` of
    /// /proc/self/fd/N.
    private func resolveUncached(_ handle: FanotifyFileHandle) -> Resolution {
        guard handle.fileSystemID == fileSystemID else { return .failed(.improperLink) }
        let opened = rootDescriptor().flatMap { root in
            handle.bytes.withUnsafeBufferPointer { bytes in
                valueOrErrno {
                    wk_open_by_handle_at(root, handle.type, bytes.baseAddress, UInt32(bytes.count), Int32(WK_O_PATH) | O_DIRECTORY | O_CLOEXEC)
                }
            }
        }
        let raw: Int32
        switch opened {
        case .success(let opened): raw = opened
        case .failure(.staleNFSFileHandle), .failure(.noSuchFileOrDirectory): return .gone
        case .failure(let failure): return .failed(failure)
        }
        let fd = OwnedFileDescriptor(adopting: raw)
        return path(ofOpen: fd.rawValue)
    }

    private func path(ofOpen fd: Int32) -> Resolution {
        switch Self.linkTarget(of: fd, into: linkBuffer) {
        case .success(let path):
            // An unlinked directory still open somewhere (a process's working directory)
            // opens by handle and reads back as "<path> (deleted)"; a real name may end so
            // too, so the link count decides.
            if path.count > Self.deletedSuffix.count, path.suffix(Self.deletedSuffix.count).elementsEqual(Self.deletedSuffix) {
                var info = stat()
                if case .success = nothingOrErrno({ fstat(fd, &info) }), info.st_nlink == 0 { return .gone }
            }
            return relativePath(path, under: canonicalRootPath) != nil ? .path(path) : .outsideRoot(path)
        case .failure(let failure):
            return .failed(failure)
        }
    }

    /// What /proc/self/fd/N reads back: the open directory's path now. ENAMETOOLONG when
    /// it does not fit PATH_MAX. The corresponding C function is `readlink`.
    private static func linkTarget(of fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Result<[UInt8], Errno> {
        let read = "/proc/self/fd/\(fd)".withCString { name in
            valueOrErrno { readlink(name, buffer.baseAddress!.assumingMemoryBound(to: CChar.self), buffer.count) }
        }
        return read.flatMap { length in
            length >= buffer.count ? .failure(.fileNameTooLong) : .success(Array(UnsafeRawBufferPointer(rebasing: buffer[0..<length])))
        }
    }

    private static let deletedSuffix = Array(" (deleted)".utf8)

    /// For the state dump.
    public func describe() -> DumpValue {
        .object([
            .init("root", .bytes(rootPath)),
            .init("capacity", .int(Int64(capacity))),
            .init("cached", .int(Int64(cache.count))),
            .init("hits", .int(Int64(statistics.hits))),
            .init("misses", .int(Int64(statistics.misses))),
            .init("evictions", .int(Int64(statistics.evictions))),
            .init("gone", .int(Int64(statistics.gone))),
            .init("failures", .int(Int64(statistics.failures))),
            .init("outside_root", .int(Int64(statistics.outsideRoot))),
            .init("invalidations", .int(Int64(statistics.invalidations))),
        ])
    }
}

/// A map from handle to answer that holds at most `capacity` entries and drops the least
/// recently used one to make room. The recency list is threaded through arrays by slot
/// number, so that a hit moves no memory and allocates nothing.
struct LeastRecentlyUsed<Value> {
    private struct Slot {
        var key: FanotifyFileHandle
        var value: Value?
        var newer: Int
        var older: Int
    }

    let capacity: Int
    private var slots: [Slot] = []
    private var index: [FanotifyFileHandle: Int] = [:]
    private var newest = -1
    private var oldest = -1
    /// Slots of removed entries, reused before the array grows.
    private var free: [Int] = []

    init(capacity: Int) {
        self.capacity = capacity
    }

    var count: Int { index.count }

    /// The keys from most to least recently used, for tests.
    var keysByRecency: [FanotifyFileHandle] {
        var keys: [FanotifyFileHandle] = []
        var slot = newest
        while slot >= 0 {
            keys.append(slots[slot].key)
            slot = slots[slot].older
        }
        return keys
    }

    mutating func value(for key: FanotifyFileHandle) -> Value? {
        guard let slot = index[key] else { return nil }
        moveToNewest(slot)
        return slots[slot].value
    }

    /// Returns whether an entry was evicted to make room.
    @discardableResult
    mutating func insert(_ value: Value, for key: FanotifyFileHandle) -> Bool {
        if let slot = index[key] {
            slots[slot].value = value
            moveToNewest(slot)
            return false
        }
        var evicted = false
        let slot: Int
        if index.count >= capacity {
            slot = oldest
            unlink(slot)
            index[slots[slot].key] = nil
            slots[slot] = Slot(key: key, value: value, newer: -1, older: -1)
            evicted = true
        } else if let reused = free.popLast() {
            slot = reused
            slots[slot] = Slot(key: key, value: value, newer: -1, older: -1)
        } else {
            slot = slots.count
            slots.append(Slot(key: key, value: value, newer: -1, older: -1))
        }
        index[key] = slot
        linkAsNewest(slot)
        return evicted
    }

    mutating func remove(_ key: FanotifyFileHandle) {
        guard let slot = index.removeValue(forKey: key) else { return }
        unlink(slot)
        slots[slot].value = nil
        free.append(slot)
    }

    mutating func removeAll() {
        slots.removeAll(keepingCapacity: true)
        index.removeAll(keepingCapacity: true)
        free.removeAll()
        newest = -1
        oldest = -1
    }

    private mutating func moveToNewest(_ slot: Int) {
        guard slot != newest else { return }
        unlink(slot)
        linkAsNewest(slot)
    }

    private mutating func unlink(_ slot: Int) {
        let newer = slots[slot].newer
        let older = slots[slot].older
        if newer >= 0 { slots[newer].older = older } else { newest = older }
        if older >= 0 { slots[older].newer = newer } else { oldest = newer }
        slots[slot].newer = -1
        slots[slot].older = -1
    }

    private mutating func linkAsNewest(_ slot: Int) {
        slots[slot].older = newest
        slots[slot].newer = -1
        if newest >= 0 { slots[newest].newer = slot }
        newest = slot
        if oldest < 0 { oldest = slot }
    }
}
