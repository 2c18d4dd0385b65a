import CWatchkeeperSystem

#if canImport(Glibc)
import Glibc
#endif

/// Which file, in which form: what tells a file that was handled from one that only looks
/// like it. Device, inode, size and modification time alone cannot: ext4 gives a deleted
/// file's inode number to the next file at once, and `cp -p`, `tar -x`, `rsync -t` and
/// `unzip` set the modification time to whatever the archive says. So the identity also
/// carries what a user cannot set back:
///
/// - the inode generation (a hash of the file handle from name_to_handle_at: the inode's
///   number and generation on ext4, xfs, btrfs and tmpfs), which changes when an inode
///   number is reused;
/// - the birth time (statx STX_BTIME, where the file system keeps one: ext4, xfs, btrfs,
///   tmpfs), set when the inode is made;
/// - the change time, which every write, rename, chmod and `utime` moves to now: the one
///   trace `cp -p` over a handled file leaves (same inode, size and mtime).
///
/// `sameFile(as:)` (nothing changed) is what scans and catch-up compare; `renamed(as:)` and
/// `attributesChanged(as:)` are what the daemon accepts for a change it saw happen (a rename,
/// an IN_ATTRIB with no write), after which it holds the new form. docs/architecture.md
/// ("File identity") says which parts are used on which file system.
public struct FileIdentity: Sendable, Hashable {
    public let device: UInt64
    public let inode: UInt64
    public let size: Int64
    public let modifiedNanoseconds: Int64
    /// nil only in ledger rows written before the change time was recorded (schema 4 and older).
    public let changedNanoseconds: Int64?
    /// nil where the file system keeps no birth time (or the row is older than it).
    public let bornNanoseconds: Int64?
    /// nil where no file handle could be had (FUSE, some network file systems, /proc).
    public let generation: UInt64?

    public init(device: UInt64, inode: UInt64, size: Int64, modifiedNanoseconds: Int64,
                changedNanoseconds: Int64? = nil, bornNanoseconds: Int64? = nil, generation: UInt64? = nil) {
        self.device = device
        self.inode = inode
        self.size = size
        self.modifiedNanoseconds = modifiedNanoseconds
        self.changedNanoseconds = changedNanoseconds
        self.bornNanoseconds = bornNanoseconds
        self.generation = generation
    }

    /// The inode, whatever its content: where in-flight work is looked up.
    public var inodeKey: InodeKey { InodeKey(device: device, inode: inode) }

    /// Unchanged: the same inode (not a reused number) with the same size, modification time
    /// and change time. This is what a scan, a catch-up or a poll compares with what was
    /// handled (this life's memory, the ledger): anything that changed the file since, even
    /// its attributes, may have changed its content (`cp -p` over a handled file keeps its
    /// inode, size and mtime; only the change time moves), so it runs. The daemon keeps the
    /// identity it holds current through the attribute changes and renames it sees live
    /// (`renamed(as:)`, `attributesChanged(as:)`, docs/architecture.md "File identity"), so a
    /// file chmod'ed or renamed while watched is still the handled one. A ledger row from
    /// before the change time was kept (schema 4 and older, all three nil) is compared as it
    /// was written: device, inode, size, mtime.
    public func sameFile(as other: FileIdentity) -> Bool {
        guard sameInode(as: other), size == other.size, modifiedNanoseconds == other.modifiedNanoseconds else { return false }
        if let mine = changedNanoseconds, let theirs = other.changedNanoseconds { return mine == theirs }
        return true
    }

    /// What a rename of this file looks like: the same inode (by its incarnation where it
    /// is known: generation or birth time; otherwise by its change time, which a rename
    /// moves, so nothing matches), the same size and modification time; only the change time
    /// moved. Where the daemon sees the rename happen (IN_MOVED_FROM and IN_MOVED_TO of one
    /// cookie, the old name not being written), this is the same file.
    public func renamed(as other: FileIdentity) -> Bool {
        guard sameInode(as: other), size == other.size, modifiedNanoseconds == other.modifiedNanoseconds else { return false }
        return incarnationKnown(with: other) || sameFile(as: other)
    }

    /// What an attribute change of this file looks like (chmod, chown, `utime`, a link
    /// count): the same inode and size; the modification time may have been set. Where the
    /// daemon sees an IN_ATTRIB with no write since the file was handled, this is the same
    /// content.
    public func attributesChanged(as other: FileIdentity) -> Bool {
        sameInode(as: other) && size == other.size && (incarnationKnown(with: other) || changedNanoseconds == nil)
    }

    /// Both sides carry the generation or the birth time: a reused inode number is told by them.
    private func incarnationKnown(with other: FileIdentity) -> Bool {
        (generation != nil && other.generation != nil) || (bornNanoseconds != nil && other.bornNanoseconds != nil)
    }

    /// The same inode, not a reused number: what is checked just before a job starts (the
    /// content may have grown since; a replaced or removed file may not run its old job).
    public func sameInode(as other: FileIdentity) -> Bool {
        guard device == other.device, inode == other.inode else { return false }
        if let mine = generation, let theirs = other.generation, mine != theirs { return false }
        if let mine = bornNanoseconds, let theirs = other.bornNanoseconds, mine != theirs { return false }
        return true
    }

    /// What the file system keeps of it, for the dump and the start-up line.
    public var parts: String {
        var parts = ["device", "inode", "size", "mtime", "ctime"]
        if bornNanoseconds != nil { parts.append("birth time") }
        if generation != nil { parts.append("generation") }
        return parts.joined(separator: ", ")
    }
}

extension FileIdentity {
    /// What the C shim read (wk_file_identity, wk_poll_stat): the parts it had.
    init(_ raw: wk_file_identity) {
        self.init(device: raw.device, inode: raw.inode, size: raw.size, modifiedNanoseconds: raw.modified_ns,
                  changedNanoseconds: raw.changed_ns, bornNanoseconds: raw.has_birth != 0 ? raw.born_ns : nil,
                  generation: raw.has_generation != 0 ? raw.generation : nil)
    }
}

public struct InodeKey: Sendable, Hashable {
    public let device: UInt64
    public let inode: UInt64
}

/// One statx (and, with `generation`, one name_to_handle_at) of a path.
struct FileStatus: Sendable {
    let identity: FileIdentity
    let type: FileType
    let links: UInt64

    /// nil with errno set when the path cannot be examined.
    static func of(_ path: [UInt8], followSymlinks: Bool, generation: Bool = true) -> FileStatus? {
        var raw = wk_file_identity()
        let result = withPathCString(path) { wk_file_identity($0, followSymlinks ? 1 : 0, generation ? 1 : 0, &raw) }
        guard result == 0 else { return nil }
        return FileStatus(identity: FileIdentity(raw), type: FileType(mode: mode_t(raw.mode)), links: raw.links)
    }
}
