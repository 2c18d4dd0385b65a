/// Which file systems inotify cannot fully see, and the trees of a rule that are polled
/// because of it (docs/configuration.md, "How a tree is watched").
///
/// inotify reports what this host's kernel does to a file. On a network or FUSE file system
/// another host (or the FUSE server itself) can change files without this kernel writing
/// them, and no event comes: those trees are polled as well.
enum FilesystemClass {
    /// Why a file system of this type (mountinfo's type field) must be polled, or nil when
    /// inotify sees every change made to it.
    static func reasonToPoll(_ type: String) -> String? {
        switch type {
        case "nfs", "nfs4":
            return "an NFS mount: files other hosts write there make no inotify event on this one"
        case "cifs", "smb3", "smbfs":
            return "an SMB/CIFS mount: files other hosts write there make no inotify event on this one"
        case "9p", "virtiofs":
            return "a file system shared with another system (\(type)): files it writes make no inotify event here"
        case "ceph", "glusterfs", "lustre", "afs", "gfs2", "ocfs2", "coda", "ncpfs", "beegfs", "gpfs", "orangefs", "pvfs2", "davfs":
            return "a network or cluster file system (\(type)): files other hosts write there make no inotify event on this one"
        case "fuse":
            return "a FUSE file system: its server can change files without this host writing them, and inotify sees only this host's writes"
        default:
            guard type.hasPrefix("fuse.") else { return nil }
            var reason = "a FUSE file system: its server can change files without this host writing them, and inotify sees only this host's writes"
            if type == "fuse.sshfs" {
                // Measured with sshfs 3.7.3: a file written on the server was listed 17.5 to 21 s
                // later with the default cache, at once with dir_cache=no.
                reason += " (sshfs keeps listings and attributes for 20 s unless mounted with -o dir_cache=no: files written on the server are seen that much later)"
            }
            return reason
        }
    }

    /// sshfs keeps attributes and listings for 20 s by default (its cache_timeout), and a stat,
    /// even one that asks the kernel to go to the server, is answered from that cache: with
    /// `poll_settle` below it, both looks at a file still being written on the server can see
    /// the same stale size, and its job runs on partial content (11 of 50 slowly written files
    /// with the default 5 s; issue 36). The mount's options do not show whether the cache is
    /// off, so a settle below it is said, with both ways out.
    static let sshfsCache: Duration = .seconds(20)

    static func settleWarning(type: String, settle: Duration) -> String? {
        guard type == "fuse.sshfs", settle <= sshfsCache else { return nil }
        return "poll_settle (\(settle.compactDescription)) is not above sshfs's \(sshfsCache.compactDescription) cache of attributes and listings: unless the share is mounted with -o cache=no (or dir_cache=no and cache_timeout below poll_settle), a file still being written on the server can look unchanged at both looks and its job run on partial content; set poll_settle = \"\((sshfsCache + .seconds(1)).compactDescription)\" or mount without the cache"
    }

    /// Whether inode numbers survive a remount: a FUSE file system's are handed out by
    /// libfuse in lookup order unless the server passes its own (sshfs does not).
    static func hasStableInodes(_ type: String) -> Bool {
        !(type == "fuse" || type.hasPrefix("fuse."))
    }
}

/// One tree of a rule that is polled: the rule's root or a mount below it.
struct PolledTree: Sendable, Equatable, CustomStringConvertible {
    /// Relative to the rule's root; empty for the root itself.
    let relative: [UInt8]
    /// The mount the tree is on (its mount point, absolute).
    let mountPoint: [UInt8]
    let fileSystemType: String
    /// mountinfo's source field: "server:/export", "user@host:/srv".
    let source: String
    /// Why it is polled, as the journal says it.
    let reason: String
    /// A network or FUSE file system: its files are known by what survives a remount (see
    /// `identity(of:relative:)`), not by the device number the kernel gave this mount.
    let isRemote: Bool

    var description: String { String(decoding: relative.isEmpty ? [UInt8(ascii: ".")] : relative, as: UTF8.self) }

    /// `relative` (to the rule's root) is in this tree.
    func contains(_ path: [UInt8]) -> Bool {
        relative.isEmpty || path == relative || (path.count > relative.count && path.starts(with: relative) && path[relative.count] == UInt8(ascii: "/"))
    }

    /// A remote file's identity as it survives a remount: the device is a hash of the mount's
    /// type and source (the kernel gives each mount a new number), the inode a hash of the
    /// path where the file system's inode numbers are handed out anew on each mount (FUSE),
    /// and neither birth time nor generation (no file handle there). The engine's check just
    /// before a start cannot compare such an identity with a fresh stat, so it is skipped.
    func identity(of status: FileIdentity, relative path: [UInt8]) -> FileIdentity {
        guard isRemote else { return status }
        return FileIdentity(device: deviceKey, inode: FilesystemClass.hasStableInodes(fileSystemType) ? status.inode : Self.fnv1a(path) | 1,
                            size: status.size, modifiedNanoseconds: status.modifiedNanoseconds,
                            changedNanoseconds: status.changedNanoseconds, bornNanoseconds: nil, generation: nil)
    }

    /// The high bit keeps it apart from every device number the kernel hands out.
    var deviceKey: UInt64 { Self.fnv1a(Array(fileSystemType.utf8) + [0] + Array(source.utf8)) | (1 << 63) }

    static func fnv1a(_ bytes: [UInt8]) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return hash
    }

    /// The trees of a rule with `root` (real path) to poll, given the mount table (in
    /// mountinfo's order: a later mount on the same point hides an earlier one).
    static func trees(root: [UInt8], recursive: Bool, method: WatchMethod, mounts: [MountInfoEntry]) -> [PolledTree] {
        let slash = UInt8(ascii: "/")
        let containing = MountInfoEntry.containing(root, in: mounts)
        func tree(_ relative: [UInt8], _ mount: MountInfoEntry?, reason: String) -> PolledTree {
            PolledTree(relative: relative, mountPoint: mount?.mountPoint ?? root, fileSystemType: mount?.fileSystemType ?? "unknown",
                       source: mount?.source ?? "", reason: reason,
                       isRemote: mount.map { FilesystemClass.reasonToPoll($0.fileSystemType) != nil } ?? false)
        }
        switch method {
        case .inotify:
            return []
        case .poll:
            return [tree([], containing, reason: "method = \"poll\"")]
        case .auto, .fanotify:
            if let containing, let reason = FilesystemClass.reasonToPoll(containing.fileSystemType) {
                return [tree([], containing, reason: reason)]
            }
            guard recursive else { return [] }
            var trees: [PolledTree] = []
            for mount in mounts {
                guard let relative = relativePath(mount.mountPoint, under: root), !relative.isEmpty,
                      let reason = FilesystemClass.reasonToPoll(mount.fileSystemType) else { continue }
                // One poll per tree: a network mount inside another is polled with it.
                guard !trees.contains(where: { $0.contains(relative) }) else { continue }
                trees.removeAll { $0.relative.starts(with: relative + [slash]) }
                trees.append(tree(relative, mount, reason: reason))
            }
            return trees
        }
    }
}
