import CWatchkeeperSystem
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// The fanotify backend, for huge trees (issue 24): one mark per file system
/// (FAN_MARK_FILESYSTEM with directory handles and names) in place of one inotify watch per
/// directory, so a tree of a million directories costs the kernel one mark, not a gigabyte.
///
/// It speaks the inotify backend's language to the coordinator: each fanotify event becomes
/// the `Change`s an inotify watch of that directory would have produced, with the
/// directory's location found by resolving its handle (DirectoryHandleResolver) and
/// filtering to the trees started here. What that takes, and what it cannot give:
/// - A mark hears the whole file system; events outside every tree are counted and dropped.
/// - The kernel merges queued events of one name (CREATE|MODIFY|CLOSE_WRITE), with nothing
///   to say which came first: they are split with removals first, then appearance, then
///   writes, and admission's own stat decides (an event is evidence, not the state).
/// - There are no rename cookies: FAN_RENAME (Linux 5.17+) carries both halves, which
///   become MOVED_FROM and MOVED_TO with a cookie of our own, so a directory moved within
///   the tree keeps its files known and a renamed `.part` is followed as with inotify.
/// - A directory's own MOVE_SELF and DELETE_SELF are told by handle, which only matters
///   for the root: the resolver would answer with where it went.
///
/// Only rule trees use it; a rule's ancestors and missing roots stay on inotify. Everything
/// is called on the watching queue.
final class FanotifyBackend: WatchBackend {
    private struct Tree {
        let root: [UInt8]
        let recursive: Bool
        /// The root directory's own handle, to tell its MOVE_SELF and DELETE_SELF.
        let rootHandle: FanotifyFileHandle
        /// Per file system marked for the tree (by fsid), one for each of its mounts in the
        /// tree: the root's, the local file systems mounted below it, and the bind mounts of a
        /// file system already marked (a directory of the root's file system bound below the
        /// root: its events name the directory by a handle, which only a resolver of that
        /// mount spells as the path inside the tree; issue 36).
        var resolvers: [UInt64: [DirectoryHandleResolver]]
        /// Mount points below the root that could not be marked, with why: the fallback
        /// scan tries them again through `watch`.
        var unmarked: [[UInt8]: Errno] = [:]
        let mask: FanotifyMask
    }

    private struct Mark {
        let path: [UInt8]
        var users: Int
        var mask: FanotifyMask
    }

    private let watcher: FanotifyWatcher
    private var trees: [WatchOwner: Tree] = [:]
    private var marks: [UInt64: Mark] = [:]
    private let problems: ProblemAggregator
    /// Events of directories outside every tree (the file system mark's noise).
    private(set) var outsideEvents: UInt64 = 0
    /// Events without a directory record, which a DFID_NAME group never sends.
    private(set) var unattributed: UInt64 = 0
    /// Handles no tree could resolve (EMFILE, ENAMETOOLONG, ...): their events are lost.
    private(set) var unresolved: UInt64 = 0
    /// The trees whose events were lost in the batch being interpreted: they rescan.
    private var unresolvedOwners: Set<WatchOwner> = []
    /// Renames paired by FAN_RENAME. Cookies of our own, from the top half so that they are
    /// unlike the inotify instance's (`pendingMoves` holds both kinds).
    private var nextCookie: UInt32 = 1 << 31

    /// Opens the group and starts reading. EPERM: no CAP_SYS_ADMIN; EINVAL: a kernel
    /// older than 5.9 (FAN_REPORT_DFID_NAME); EMFILE or EAGAIN: its reader thread's eventfd
    /// or thread could not be made.
    init(queue: SubsystemQueue, sources: SourceRegistry, problems: ProblemAggregator,
         onChanges: @escaping ([Change]) -> Void) throws(Errno) {
        watcher = try FanotifyWatcher(queue: queue.queue, onEvents: { _ in }, onReadFailure: { _ in })
        self.problems = problems
        let stats = sources.register(.read, owner: "watching", target: "fanotify fd (watch rules on huge trees)", on: queue)
        watcher.setHandlers(onEvents: { [unowned self] events in
            stats.fired()
            onChanges(self.interpret(events))
        }, onReadFailure: { failure in
            problems.report("unable to read fanotify events", example: "\(failure)")
        }, onMalformed: { problem in
            problems.report("fanotify events this daemon cannot decode were dropped (a newer kernel's layout?)", example: "\(problem)")
        })
        try watcher.start()
    }

    /// What the rule's inotify mask asks for, as a mark's mask: renames as FAN_RENAME.
    static func mask(for events: InotifyMask) -> FanotifyMask {
        var mask: FanotifyMask = [.create, .delete, .rename, .deleteSelf, .moveSelf]
        if events.contains(.closeWrite) { mask.insert(.closeWrite) }
        if events.contains(.modify) { mask.insert(.modify) }
        if events.contains(.attrib) { mask.insert(.attrib) }
        return mask
    }

    /// Which step of starting a tree failed, and the kernel's errno: an EPERM means another
    /// missing privilege at each step.
    struct StartFailure: Error, Equatable {
        enum Step: String {
            /// open and fstatfs of the root.
            case openRoot = "open"
            /// name_to_handle_at of the root.
            case rootHandle = "name_to_handle_at"
            /// open_by_handle_at of the root's handle (CAP_DAC_READ_SEARCH).
            case resolveRoot = "open_by_handle_at"
            /// fanotify_mark(FAN_MARK_FILESYSTEM) (CAP_SYS_ADMIN).
            case mark = "fanotify_mark"
        }
        let step: Step
        let error: Errno
    }

    /// Starts a tree: marks the root's file system and each of `mountPoints` (local file
    /// systems mounted below the root), and checks that the root's own handle opens and
    /// reads back as the root (open_by_handle_at needs CAP_DAC_READ_SEARCH). Fails only for
    /// the root; a mount point that cannot be marked is returned with its errno.
    func startTree(_ owner: WatchOwner, root: [UInt8], recursive: Bool, events: InotifyMask,
                   mountPoints: [[UInt8]]) -> Result<[(path: [UInt8], error: Errno)], StartFailure> {
        unwatch(owner, under: [])
        let mask = Self.mask(for: events)
        let resolver: DirectoryHandleResolver
        do throws(Errno) {
            resolver = try DirectoryHandleResolver(queue: watcher.queue, rootPath: root)
        } catch {
            return .failure(StartFailure(step: .openRoot, error: error))
        }
        let rootHandle: FanotifyFileHandle
        switch Self.handle(of: root, fileSystemID: resolver.fileSystemID) {
        case .success(let handle): rootHandle = handle
        case .failure(let error): return .failure(StartFailure(step: .rootHandle, error: error))
        }
        switch resolver.resolve(rootHandle) {
        case .path(let path) where path == resolver.canonicalRootPath:
            break
        case .failed(let error):
            return .failure(StartFailure(step: .resolveRoot, error: error))
        default:
            return .failure(StartFailure(step: .resolveRoot, error: .staleNFSFileHandle))
        }
        if case .failure(let error) = mark(resolver.fileSystemID, path: root, mask: mask) {
            return .failure(StartFailure(step: .mark, error: error))
        }
        var tree = Tree(root: root, recursive: recursive, rootHandle: rootHandle, resolvers: [resolver.fileSystemID: [resolver]], mask: mask)
        var failures: [(path: [UInt8], error: Errno)] = []
        if recursive {
            for point in mountPoints {
                if case .failure(let error) = add(point, to: &tree) {
                    tree.unmarked[point] = error
                    failures.append((point, error))
                }
            }
        }
        trees[owner] = tree
        releaseRoots()
        return .success(failures)
    }

    /// A file system mounted at `path` below a started tree's root (a mount that came
    /// later): marked and resolved like the root's.
    func addMountPoint(_ owner: WatchOwner, path: [UInt8]) -> Result<Void, Errno> {
        guard var tree = trees[owner] else { return .failure(.badFileDescriptor) }
        let result = add(path, to: &tree)
        if case .failure(let error) = result { tree.unmarked[path] = error } else { tree.unmarked[path] = nil }
        trees[owner] = tree
        releaseRoots()
        return result
    }

    /// Every resolver's root fd closed until needed again: none pins a file system between
    /// batches (umount would fail with EBUSY).
    private func releaseRoots() {
        for tree in trees.values {
            for resolver in tree.resolvers.values.joined() { resolver.releaseRoot() }
        }
    }

    private func add(_ point: [UInt8], to tree: inout Tree) -> Result<Void, Errno> {
        do throws(Errno) {
            let resolver = try DirectoryHandleResolver(queue: watcher.queue, rootPath: point)
            // Another mount of a file system already marked (a bind mount of the root's):
            // the mark hears it already; a resolver of its own spells its directories' paths
            // through it.
            if let same = tree.resolvers[resolver.fileSystemID] {
                if !same.contains(where: { $0.canonicalRootPath == resolver.canonicalRootPath }) {
                    tree.resolvers[resolver.fileSystemID]!.append(resolver)
                }
                return .success(())
            }
            try mark(resolver.fileSystemID, path: point, mask: tree.mask).get()
            tree.resolvers[resolver.fileSystemID] = [resolver]
            return .success(())
        } catch {
            return .failure(error)
        }
    }

    private func mark(_ fileSystemID: UInt64, path: [UInt8], mask: FanotifyMask) -> Result<Void, Errno> {
        if var existing = marks[fileSystemID] {
            if !existing.mask.isSuperset(of: mask) {
                if case .failure(let error) = watcher.markFileSystem(containing: existing.path, mask: mask) { return .failure(error) }
                existing.mask.formUnion(mask)
            }
            existing.users += 1
            marks[fileSystemID] = existing
            return .success(())
        }
        return watcher.markFileSystem(containing: path, mask: mask).map {
            marks[fileSystemID] = Mark(path: path, users: 1, mask: mask)
        }
    }

    /// The handle name_to_handle_at gives `path` (a directory; symbolic links not followed).
    private static func handle(of path: [UInt8], fileSystemID: UInt64) -> Result<FanotifyFileHandle, Errno> {
        var handle = wk_file_handle()
        var mountID: Int32 = 0
        let done = (path + [0]).withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { name in
                nothingOrErrno { wk_name_to_handle_at(AT_FDCWD, name.baseAddress!, &handle, &mountID, 0) }
            }
        }
        return done.map {
            let count = Int(min(handle.handle_bytes, UInt32(MemoryLayout.size(ofValue: handle.f_handle))))
            let bytes = withUnsafeBytes(of: handle.f_handle) { Array($0.prefix(count)) }
            return FanotifyFileHandle(fileSystemID: fileSystemID, type: handle.handle_type, bytes: bytes)
        }
    }

    // MARK: WatchBackend

    /// A started tree needs nothing per directory: success, except for a mount point below
    /// the root that could not be marked, which is tried again (the fallback scan's way of
    /// asking whether it is watchable now).
    func watch(_ location: Location, path: [UInt8], events: InotifyMask) -> Result<Void, Errno> {
        guard var tree = trees[location.owner] else { return .failure(.badFileDescriptor) }
        guard tree.unmarked[path] != nil else { return .success(()) }
        let result = add(path, to: &tree)
        if case .success = result { tree.unmarked[path] = nil }
        trees[location.owner] = tree
        return result
    }

    func isWatched(_ location: Location) -> Bool {
        trees[location.owner] != nil
    }

    /// The whole tree when `relative` is empty; a subtree has nothing of its own to drop.
    func unwatch(_ owner: WatchOwner, under relative: [UInt8]) {
        guard relative.isEmpty, let tree = trees.removeValue(forKey: owner) else { return }
        for fileSystemID in tree.resolvers.keys {
            guard var mark = marks[fileSystemID] else { continue }
            mark.users -= 1
            if mark.users > 0 {
                marks[fileSystemID] = mark
                continue
            }
            marks[fileSystemID] = nil
            // Gone already if the file system was unmounted: nothing left to remove.
            _ = watcher.unmarkFileSystem(containing: mark.path, mask: mark.mask)
        }
    }

    /// File systems marked for the owner's tree: what stands for its directories.
    func watchedCount(of owner: WatchOwner) -> Int {
        trees[owner]?.resolvers.count ?? 0
    }

    /// Marks, all trees together (what counts against fs.fanotify.max_user_marks).
    var watchCount: Int { marks.count }

    // MARK: Events

    /// What the kernel's events mean for the trees, in order.
    private func interpret(_ events: [FanotifyEvent]) -> [Change] {
        // A directory renamed (or an overflow, which may have hidden one) makes cached paths
        // stale: forgotten before this batch is resolved, so it resolves to today's paths.
        for tree in trees.values {
            for resolver in tree.resolvers.values.joined() { resolver.forgetStalePaths(after: events) }
        }
        var changes: [Change] = []
        changes.reserveCapacity(events.count)
        // Per directory of this batch: a descriptor of our own (admission tells a file's
        // CREATE and CLOSE_WRITE of one read apart by descriptor and name) and its locations.
        var located: [FanotifyFileHandle: (wd: WatchDescriptor, locations: [Location])] = [:]
        func locate(_ directory: FanotifyFileHandle) -> (wd: WatchDescriptor, locations: [Location]) {
            if let known = located[directory] { return known }
            let found = (WatchDescriptor(rawValue: -2 - Int32(truncatingIfNeeded: located.count)), locations(of: directory))
            located[directory] = found
            return found
        }
        for event in events {
            let mask = event.mask
            if mask.contains(.queueOverflow) {
                changes.append(.overflow)
                continue
            }
            guard let directory = event.directory else {
                unattributed += 1
                continue
            }
            let kind: InotifyMask = event.isDirectory ? .isDirectory : []
            if event.isOnDirectoryItself {
                // Only a root's own rename or removal matters: below it, the parent's entry
                // events say the same.
                for (owner, tree) in trees where tree.rootHandle == directory {
                    let root = [Location(owner: owner, relative: [])]
                    if mask.contains(.deleteSelf) {
                        changes.append(.deleted(.none, locations: root))
                    } else if mask.contains(.moveSelf) {
                        changes.append(.movedAway(.none, locations: root))
                    }
                }
                continue
            }
            if mask.contains(.rename) {
                nextCookie = nextCookie == .max ? 1 << 31 : nextCookie + 1
                let from = locate(directory)
                if !from.locations.isEmpty {
                    changes.append(.entry(InotifyEvent(wd: from.wd, mask: kind.union(.movedFrom), cookie: nextCookie, name: event.name), locations: from.locations))
                }
                if let newDirectory = event.newDirectory {
                    let to = locate(newDirectory)
                    if !to.locations.isEmpty {
                        changes.append(.entry(InotifyEvent(wd: to.wd, mask: kind.union(.movedTo), cookie: nextCookie, name: event.newName), locations: to.locations))
                    }
                    if from.locations.isEmpty && to.locations.isEmpty { outsideEvents += 1 }
                }
                continue
            }
            let found = locate(directory)
            guard !found.locations.isEmpty else {
                outsideEvents += 1
                continue
            }
            for (bit, inotifyBit) in Self.splitOrder where mask.contains(bit) {
                changes.append(.entry(InotifyEvent(wd: found.wd, mask: kind.union(inotifyBit), cookie: 0, name: event.name), locations: found.locations))
            }
        }
        releaseRoots()
        if !unresolvedOwners.isEmpty {
            changes.append(.missed(locations: unresolvedOwners.map { Location(owner: $0, relative: []) }))
            unresolvedOwners = []
        }
        return changes
    }

    /// A merged event's bits, one event each, in the order that leaves admission's stat the
    /// last word: what took the name away, then what put it there, then writes and closes.
    private static let splitOrder: [(FanotifyMask, InotifyMask)] = [
        (.delete, .delete), (.movedFrom, .movedFrom), (.create, .create), (.movedTo, .movedTo),
        (.modify, .modify), (.attrib, .attrib), (.closeWrite, .closeWrite),
    ]

    /// Every tree's location of the directory `handle` names, if inside the tree: through
    /// each mount of its file system there, so a directory bound into the tree from
    /// elsewhere is found at the bind mount (and at its source too, if that is in the tree).
    private func locations(of handle: FanotifyFileHandle) -> [Location] {
        var found: [Location] = []
        for (owner, tree) in trees {
            for resolver in tree.resolvers[handle.fileSystemID] ?? [] {
                switch resolver.resolve(handle) {
                case .path(let path):
                    guard let relative = relativePath(path, under: tree.root), tree.recursive || relative.isEmpty else { continue }
                    let location = Location(owner: owner, relative: relative)
                    if !found.contains(location) { found.append(location) }
                case .outsideRoot, .gone:
                    continue
                case .failed(.fileNameTooLong):
                    // No rescan finds them either: a path the kernel will not spell cannot be listed.
                    unresolved += 1
                    problems.report("unable to find the directory of fanotify events: its path is longer than PATH_MAX (\(PATH_MAX) bytes); files below such directories are not handled (move them up the tree)",
                                    example: "\(owner): \(handle)")
                case .failed(let error):
                    unresolved += 1
                    unresolvedOwners.insert(owner)
                    problems.report("unable to find the directory of fanotify events: \(error) (\(error.symbolicName)); rescanning the tree for their files",
                                    example: "\(owner): \(handle)")
                }
            }
        }
        return found
    }

    func describe() -> [DumpField] {
        let byOwner = trees.sorted { $0.key.description < $1.key.description }
        return [
            .init("fanotify", watcher.describe()),
            .init("marks", .array(marks.sorted { $0.key < $1.key }.map { fileSystemID, mark in
                .object([
                    .init("path", .bytes(mark.path)),
                    .init("fsid", .string(String(fileSystemID, radix: 16))),
                    .init("mask", .string("\(mark.mask)")),
                    .init("trees", .int(Int64(mark.users))),
                ])
            })),
            .init("trees", .object(byOwner.map { owner, tree in
                .init(owner.description, .object([
                    .init("root", .bytes(tree.root)),
                    .init("recursive", .bool(tree.recursive)),
                    .init("resolvers", .array(tree.resolvers.values.joined().map { $0.describe() })),
                    .init("unmarked_mounts", .array(tree.unmarked.keys.sorted { $0.lexicographicallyPrecedes($1) }.map { .bytes($0) })),
                ]))
            })),
            .init("max_user_marks", FanotifyBackend.sysctl("max_user_marks").flatMap { Int64($0) }.map { .int($0) } ?? .null),
            .init("max_queued_events", FanotifyBackend.sysctl("max_queued_events").flatMap { Int64($0) }.map { .int($0) } ?? .null),
            .init("outside_events", .int(Int64(outsideEvents))),
            .init("unattributed_events", .int(Int64(unattributed))),
            .init("unresolved_events", .int(Int64(unresolved))),
        ]
    }

    static func sysctl(_ name: String) -> String? {
        (try? readSmallFile("/proc/sys/fs/fanotify/\(name)"))?.split(separator: "\n").first.map(String.init)
    }
}
