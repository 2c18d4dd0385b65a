import CWatchkeeperSystem
import Dispatch
import Synchronization
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// `path` relative to `root` ("" for `root` itself), or nil when it is neither `root` nor
/// below it, by whole components: "/srv/in" is under "/srv", "/srv/inbox" not under "/srv/in".
func relativePath(_ path: [UInt8], under root: [UInt8]) -> [UInt8]? {
    let slash = UInt8(ascii: "/")
    if path == root { return [] }
    if root == [slash] { return path.first == slash ? Array(path.dropFirst()) : nil }
    guard path.count > root.count, path.starts(with: root), path[root.count] == slash else { return nil }
    return Array(path[(root.count + 1)...])
}

/// One line of /proc/self/mountinfo, the fields the watcher needs.
public struct MountInfoEntry: Hashable, Sendable, CustomStringConvertible {
    /// Unique while the mount exists (field 1); a mount point can hold several mounts
    /// stacked, so mounts are told apart by this, not by their mount point.
    public let mountID: Int64
    public let parentID: Int64
    /// Where it is mounted (field 5), unescaped: bytes, as paths are.
    public let mountPoint: [UInt8]
    /// The file system type after the " - " separator ("tmpfs", "ext4").
    public let fileSystemType: String
    /// The mount source after the type ("server:/export", "/dev/sda1"), unescaped.
    public let source: String

    public init(mountID: Int64, parentID: Int64, mountPoint: [UInt8], fileSystemType: String, source: String = "") {
        self.mountID = mountID
        self.parentID = parentID
        self.mountPoint = mountPoint
        self.fileSystemType = fileSystemType
        self.source = source
    }

    public var description: String { "\(String(decoding: mountPoint, as: UTF8.self)) (\(fileSystemType), id \(mountID))" }

    /// Parses mountinfo's text (proc(5)): "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3
    /// /dev/root rw". Lines that do not parse are skipped rather than failing the whole
    /// table: a future kernel may add fields, and the ones used here are fixed.
    /// The mount `path` is on: the deepest mount point at or above it, and of mounts stacked
    /// on that point the last in mountinfo's order (the one that hides the others).
    static func containing(_ path: [UInt8], in mounts: [MountInfoEntry]) -> MountInfoEntry? {
        var containing: MountInfoEntry?
        for mount in mounts where relativePath(path, under: mount.mountPoint) != nil {
            if containing == nil || mount.mountPoint.count >= containing!.mountPoint.count { containing = mount }
        }
        return containing
    }

    public static func parse(_ text: [UInt8]) -> [MountInfoEntry] {
        var entries: [MountInfoEntry] = []
        for line in text.split(separator: UInt8(ascii: "\n")) {
            let fields = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true)
            guard fields.count >= 5,
                  let mountID = Int64(String(decoding: fields[0], as: UTF8.self)),
                  let parentID = Int64(String(decoding: fields[1], as: UTF8.self)) else { continue }
            let separator = fields.firstIndex { $0.elementsEqual([UInt8(ascii: "-")]) }
            let type = separator.flatMap { $0 + 1 < fields.count ? String(decoding: unescape(fields[$0 + 1]), as: UTF8.self) : nil } ?? ""
            let source = separator.flatMap { $0 + 2 < fields.count ? String(decoding: unescape(fields[$0 + 2]), as: UTF8.self) : nil } ?? ""
            entries.append(MountInfoEntry(mountID: mountID, parentID: parentID, mountPoint: unescape(fields[4]), fileSystemType: type,
                                          source: source))
        }
        return entries
    }

    /// The kernel writes space, tab, newline and backslash in paths as three-digit octal
    /// escapes (\040, \011, \012, \134) so that fields stay separable; undo exactly those
    /// forms and leave anything else as it is.
    static func unescape(_ field: ArraySlice<UInt8>) -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(field.count)
        var index = field.startIndex
        func octalDigit(_ byte: UInt8) -> UInt8? {
            byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "7") ? byte - UInt8(ascii: "0") : nil
        }
        while index < field.endIndex {
            let byte = field[index]
            if byte == UInt8(ascii: "\\"), field.endIndex - index >= 4,
               let high = octalDigit(field[index + 1]), let middle = octalDigit(field[index + 2]), let low = octalDigit(field[index + 3]),
               high <= 3 {
                result.append(high << 6 | middle << 3 | low)
                index += 4
            } else {
                result.append(byte)
                index += 1
            }
        }
        return result
    }
}

/// Mounts that appeared and disappeared between two readings of the mount table.
public struct MountChange: Equatable, Sendable {
    public var added: [MountInfoEntry]
    public var removed: [MountInfoEntry]

    public var isEmpty: Bool { added.isEmpty && removed.isEmpty }
    public var addedMountPoints: Set<[UInt8]> { Set(added.map(\.mountPoint)) }
    public var removedMountPoints: Set<[UInt8]> { Set(removed.map(\.mountPoint)) }

    /// By mount ID: a remount (new options, same mount) is no change; a tmpfs stacked on a
    /// mount point that already had a mount is an addition at that mount point.
    public static func between(_ before: [MountInfoEntry], _ after: [MountInfoEntry]) -> MountChange {
        let beforeIDs = Set(before.map(\.mountID))
        let afterIDs = Set(after.map(\.mountID))
        return MountChange(added: after.filter { !beforeIDs.contains($0.mountID) },
                           removed: before.filter { !afterIDs.contains($0.mountID) })
    }
}

/// Notices mounts and unmounts in the daemon's mount namespace, so that watches under a
/// mount point can be renewed: a watch on a directory that a mount covers sees nothing
/// written to the mounted file system, and IN_UNMOUNT only reaches watches inside the
/// unmounted file system, not those on the directory it uncovers.
///
/// /proc/self/mountinfo reports a change as POLLPRI|POLLERR, and its poll is stateful:
/// the poll that reports a change also marks it seen, so only the first poll after a
/// change reports it. That rules out both ways of waiting for it with libdispatch. A
/// read source on mountinfo itself (EPOLLIN, which mountinfo always reports) would fire
/// forever; a read source on an epoll fd of our own holding mountinfo for EPOLLPRI loses
/// changes, because the kernel polls the inner epoll (and so mountinfo) once when
/// libdispatch registers or re-arms its EPOLLONESHOT entry and again in epoll_wait: the
/// first poll consumes the change, the second finds nothing, and no event is delivered.
/// That design missed the mount or the unmount in 9 of 20 runs of the tmpfs test
/// (docs/measurements/system-layer.md has a reproduction in C).
///
/// So one thread of ours (a `ReadinessThread`) is the only poller: it blocks in poll(2) on
/// mountinfo and on a stop eventfd, and on each change asks `queue` to re-read the table (at most one request
/// outstanding: a burst of mounts costs one re-read). No fd here is registered with
/// libdispatch, so none can trip its hang-up race (swift-corelibs-libdispatch #949).
///
/// Confined to `queue`: every method is called there, and `onChange` runs there.
// @unchecked Sendable: confined to the watching queue (`queue`); its poller thread only signals it.
public final class MountWatcher: @unchecked Sendable {
    public let queue: DispatchQueue
    /// Read on `queue` only; the poller thread polls its own fd of the same file, because
    /// each open file keeps its own "last change seen".
    private let table: OwnedFileDescriptor
    /// The poller thread: mountinfo's second fd for POLLPRI, ended by `stop()`.
    private let poller: ReadinessThread
    private let rereadRequested = Atomic<Bool>(false)
    private var onChange: (MountChange) -> Void
    private var onReadFailure: (Errno) -> Void
    private var started = false
    private var cancelled = false
    public private(set) var mounts: [MountInfoEntry]
    public private(set) var wakeUps: UInt64 = 0
    public private(set) var changesReported: UInt64 = 0
    let path: String

    /// Opens `path` (the mount table of our namespace) twice and reads it once; the poller
    /// thread starts with `start()`. `onChange` gets each non-empty difference;
    /// `onReadFailure` a failure to re-read the table or to poll (after which the watcher
    /// goes on with the last table it read).
    public init(queue: DispatchQueue, path: String = "/proc/self/mountinfo",
                onChange: @escaping (MountChange) -> Void, onReadFailure: @escaping (Errno) -> Void) throws(Errno) {
        // Both opened before the first read, so a change during it is not missed.
        let table = OwnedFileDescriptor(adopting: try systemCall { Glibc.open(path, O_RDONLY | O_CLOEXEC) })
        let polled = OwnedFileDescriptor(adopting: try systemCall { Glibc.open(path, O_RDONLY | O_CLOEXEC) })
        let initial = try Self.readTable(table.descriptor)
        self.queue = queue
        self.path = path
        self.table = table
        self.poller = try ReadinessThread(polling: polled, for: Int16(POLLPRI))
        self.mounts = MountInfoEntry.parse(initial)
        self.onChange = onChange
        self.onReadFailure = onReadFailure
    }

    deinit {
        cancel()
    }

    /// Starts the poller thread. Once; a failure to create it is returned (EAGAIN when
    /// the process or user is out of threads).
    public func start() -> Result<Void, Errno> {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !started, !cancelled else { return .success(()) }
        let queue = self.queue
        do {
            // Weak: the thread must not keep the watcher alive; its deinit stops the thread.
            try poller.start(name: "wk-mountinfo", onReady: { [weak self] revents in
                guard let self, revents & Int16(POLLPRI | POLLERR) != 0 else { return }
                self.requestReread()
            }, onPollFailure: { [weak self] failure in
                guard let self else { return }
                queue.async { self.onReadFailure(failure) }
            })
        } catch {
            return .failure(error)
        }
        started = true
        return .success(())
    }

    /// Stops for good: the poller thread ends at its stop signal and closes its fd.
    public func cancel() {
        guard !cancelled else { return }
        cancelled = true
        poller.stop()
    }

    /// On the poller thread: at most one re-read outstanding, so a burst of mounts costs one.
    private func requestReread() {
        guard !rereadRequested.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async { [weak self] in self?.rereadTable() }
    }

    /// On `queue`, once per burst of changes.
    private func rereadTable() {
        rereadRequested.store(false, ordering: .releasing)
        guard !cancelled else { return }
        wakeUps += 1
        let text: [UInt8]
        do {
            text = try Self.readTable(table.descriptor)
        } catch {
            onReadFailure(error)
            return
        }
        let current = MountInfoEntry.parse(text)
        let change = MountChange.between(mounts, current)
        mounts = current
        guard !change.isEmpty else { return }
        changesReported += 1
        onChange(change)
    }

    /// The whole table from offset 0: seq_file regenerates it on each read from the start.
    static func readTable(_ descriptor: FileDescriptor) throws(Errno) -> [UInt8] {
        let fd = descriptor.rawValue
        try nothingOrErrno { lseek(fd, 0, SEEK_SET) }.get()
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = try chunk.withUnsafeMutableBytes { bytes in
                valueOrErrno { read(fd, bytes.baseAddress, bytes.count) }
            }.get()
            if count == 0 { return text }
            text.append(contentsOf: chunk[0..<count])
        }
    }

    public func describe() -> DumpValue {
        .object([
            .init("table", .string(path)),
            .init("mounts", .int(Int64(mounts.count))),
            .init("wake_ups", .int(Int64(wakeUps))),
            .init("changes", .int(Int64(changesReported))),
        ])
    }
}
