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
/// - the change time, which every write, rename, chmod and `utime` moves to now.
///
/// `sameFile(as:)` is the comparison that matters; docs/architecture.md ("File identity")
/// says which parts are used on which file system.
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

    /// The same inode (not a reused number) with the same size and modification time: the
    /// same file with the same content, wherever it is now. Where the inode's incarnation
    /// is known (generation or birth time), the change time is not compared, since a rename
    /// moves it and a file renamed within the tree after its job is still that file. Where
    /// it is not known, the change time must match too: it is the only thing a reused inode
    /// with a preserved modification time cannot fake. A ledger row from before the change
    /// time was kept (both nil) is compared as it was written: device, inode, size, mtime.
    public func sameFile(as other: FileIdentity) -> Bool {
        guard device == other.device, inode == other.inode, size == other.size,
              modifiedNanoseconds == other.modifiedNanoseconds else { return false }
        var incarnationKnown = false
        if let mine = generation, let theirs = other.generation {
            guard mine == theirs else { return false }
            incarnationKnown = true
        }
        if let mine = bornNanoseconds, let theirs = other.bornNanoseconds {
            guard mine == theirs else { return false }
            incarnationKnown = true
        }
        if incarnationKnown { return true }
        if let mine = changedNanoseconds, let theirs = other.changedNanoseconds { return mine == theirs }
        return true
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
    let type: TreeScanner.EntryType
    let links: UInt64

    /// nil with errno set when the path cannot be examined.
    static func of(_ path: [UInt8], followSymlinks: Bool, generation: Bool = true) -> FileStatus? {
        var raw = wk_file_identity()
        let result = TreeScanner.withCString(path) { wk_file_identity($0, followSymlinks ? 1 : 0, generation ? 1 : 0, &raw) }
        guard result == 0 else { return nil }
        return FileStatus(identity: FileIdentity(raw), type: TreeScanner.EntryType(mode: mode_t(raw.mode)), links: raw.links)
    }
}
