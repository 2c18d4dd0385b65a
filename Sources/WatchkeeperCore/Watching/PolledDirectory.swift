import CWatchkeeperSystem

/// What a TreePoller knows of one directory of its tree between passes: its own times (to
/// tell whether it must be listed again), its files with what their last look saw, its
/// subdirectories, and the entries that are never handed on. A plain value of the poller's
/// queue.
struct PolledDirectory {
    /// What a pass compares. The change time too: a deleted file's inode number given to
    /// the next one, with the same size and a preserved mtime (`cp -p`, `tar -x`), differs
    /// from it only there; admission then tells it apart by its birth time, and a chmod
    /// that only moved the change time runs nothing.
    struct KnownFile: Equatable {
        var inode: UInt64
        var size: Int64
        var modified: Int64
        var changed: Int64

        init(inode: UInt64, size: Int64, modified: Int64, changed: Int64) {
            self.inode = inode
            self.size = size
            self.modified = modified
            self.changed = changed
        }

        init(_ file: wk_file_identity) {
            self.init(inode: file.inode, size: file.size, modified: file.modified_ns, changed: file.changed_ns)
        }

        /// Not looked at yet (listed, never stat'ed).
        static let unknown = KnownFile(inode: 0, size: -1, modified: 0, changed: 0)
        var isUnknown: Bool { size < 0 }
    }

    /// An array, not a dictionary: a pass walks every entry of every directory, and an
    /// array of names already NUL-terminated for statx costs no hashing and no copy.
    struct FileEntry {
        /// NUL-terminated.
        var name: [UInt8]
        var known: KnownFile

        var bareName: ArraySlice<UInt8> { name.dropLast() }
    }

    var inode: UInt64
    var modified: Int64
    var changed: Int64
    /// Listed because it changed: listed once more on the next pass.
    var confirm: Bool
    /// Which of `sweepEvery` passes stats its files when it did not change.
    var turn = 0
    var files: [FileEntry] = []
    var subdirectories: [[UInt8]] = []
    /// FIFOs, sockets, devices, links not followed: never handed on.
    var skippedNames: Set<[UInt8]> = []

    /// Its own times are those of `status`.
    func isUnchanged(_ status: wk_file_identity) -> Bool {
        inode == status.inode && modified == status.modified_ns && changed == status.changed_ns
    }

    /// What a new listing says: files keep what was known of them. `before` is what was
    /// known (nil for a directory new to the poller); `skipped` counts the entries that are
    /// not handed on, each once, when first listed.
    static func listed(_ entries: [TreeScanner.Entry], status: wk_file_identity, changed: Bool, turn: Int, followSymlinks: Bool,
                       before: PolledDirectory?, skipped: inout TreeScanner.TypeCounts) -> Relisting {
        var next = PolledDirectory(inode: status.inode, modified: status.modified_ns, changed: status.changed_ns, confirm: changed, turn: turn)
        var known: [[UInt8]: KnownFile] = [:]
        if let before {
            known.reserveCapacity(before.files.count)
            for entry in before.files { known[entry.name] = entry.known }
        }
        for entry in entries {
            switch entry.type {
            case .regular:
                let name = entry.name + [0]
                next.files.append(FileEntry(name: name, known: known.removeValue(forKey: name) ?? .unknown))
            case .directory:
                next.subdirectories.append(entry.name)
            case .symlink where followSymlinks:
                let name = entry.name + [0]
                next.files.append(FileEntry(name: name, known: known.removeValue(forKey: name) ?? .unknown))
            default:
                next.skippedNames.insert(entry.name)
                if before?.skippedNames.contains(entry.name) != true { skipped[entry.type] += 1 }
            }
        }
        let goneSubdirectories = (before?.subdirectories ?? []).filter { !next.subdirectories.contains($0) }
        return Relisting(directory: next, goneFiles: known.map { (Array($0.key.dropLast()), $0.value) }, goneSubdirectories: goneSubdirectories)
    }

    struct Relisting {
        let directory: PolledDirectory
        /// Files listed before and not now (bare names), with what was known of them.
        let goneFiles: [(name: [UInt8], known: KnownFile)]
        let goneSubdirectories: [[UInt8]]
    }
}

/// Files renamed within a polled FUSE tree by this host (a job moving its file into
/// `done/`), told from what passes see: a file gone from one path and one new at another,
/// with the same inode number (FUSE keeps a file's for the mount's life through a rename
/// made through it; across a remount it is handed out anew, which is why such a tree's
/// identities hash the path instead), size and modification time. Either half may come
/// first, in one pass or the next. A plain value of the poller's queue, bounded.
struct PolledMoves {
    private struct Sighting {
        let path: [UInt8]
        let size: Int64
        let modified: Int64
        let pass: UInt64
    }

    private var vanished: [UInt64: Sighting] = [:]
    private var appeared: [UInt64: Sighting] = [:]
    static let limit = 4_096

    /// A file no longer at `path`; the move it completes, if any.
    mutating func vanished(_ path: [UInt8], _ known: PolledDirectory.KnownFile, pass: UInt64) -> (from: [UInt8], to: [UInt8])? {
        guard !known.isUnknown, known.inode != 0 else { return nil }
        if let other = appeared[known.inode], other.size == known.size, other.modified == known.modified, other.path != path {
            appeared[known.inode] = nil
            return (path, other.path)
        }
        if vanished.count >= Self.limit { vanished.removeAll() }
        vanished[known.inode] = Sighting(path: path, size: known.size, modified: known.modified, pass: pass)
        return nil
    }

    /// A file new at `path`; the move it completes, if any.
    mutating func appeared(_ path: [UInt8], _ seen: PolledDirectory.KnownFile, pass: UInt64) -> (from: [UInt8], to: [UInt8])? {
        guard seen.inode != 0 else { return nil }
        if let other = vanished[seen.inode], other.size == seen.size, other.modified == seen.modified, other.path != path {
            vanished[seen.inode] = nil
            return (other.path, path)
        }
        if appeared.count >= Self.limit { appeared.removeAll() }
        appeared[seen.inode] = Sighting(path: path, size: seen.size, modified: seen.modified, pass: pass)
        return nil
    }

    /// What was seen before the previous pass is forgotten: a rename shows both halves
    /// within two passes.
    mutating func passEnded(_ pass: UInt64) {
        vanished = vanished.filter { $0.value.pass + 1 >= pass }
        appeared = appeared.filter { $0.value.pass + 1 >= pass }
    }
}
