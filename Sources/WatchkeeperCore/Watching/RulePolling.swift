/// A rule's polled trees (a network or FUSE file system under `auto`, or the whole tree
/// under `method = "poll"`), their pollers, and the renames followed on them: the part of a
/// rule's state that says how a file found there is known.
struct RulePolling {
    /// The trees of this rule that are polled (PolledTree), and their pollers.
    var trees: [PolledTree] = []
    var pollers: [TreePoller] = []
    /// Trees already said in the log as polled (mount point and type): said once, not at
    /// every remount.
    var notesSaid: Set<String> = []
    /// Files renamed within a polled tree whose identities hash the path (FUSE: its inode
    /// numbers do not survive a remount), by their path now: the path whose hash they keep,
    /// so a file its job moved into `done/` is still the file it handled (issue 36).
    /// Bounded; for this life only.
    var movedOnShare: [[UInt8]: [UInt8]] = [:]
    /// IN_MOVED_FROM of files on such a tree, by cookie, until their IN_MOVED_TO.
    var renamesOnShare: [UInt32: [UInt8]] = [:]
    /// The polled tree on a network or FUSE file system that holds `relative`, if any.
    func remoteTree(holding relative: [UInt8]) -> PolledTree? {
        trees.first { $0.isRemote && $0.contains(relative) }
    }

    /// A file's identity as this rule knows it: on a network or FUSE file system, the form
    /// that survives a remount (PolledTree.identity), whichever way the file was found, with
    /// the path it had before the renames followed (`movedOnShare`).
    func identity(of identity: FileIdentity, at relative: [UInt8]) -> FileIdentity {
        guard let tree = remoteTree(holding: relative) else { return identity }
        return tree.identity(of: identity, relative: movedOnShare[relative] ?? relative)
    }

    /// A file renamed from `from` to `to` within one polled tree whose identities hash the
    /// path: it keeps the identity it had at `from`. False where nothing needs following.
    @discardableResult
    mutating func followMoveOnShare(from: [UInt8], to: [UInt8]) -> Bool {
        guard from != to, let tree = remoteTree(holding: from), tree.contains(to),
              !FilesystemClass.hasStableInodes(tree.fileSystemType) else { return false }
        let origin = movedOnShare.removeValue(forKey: from) ?? from
        if movedOnShare.count >= Self.movedOnShareLimit { movedOnShare.removeAll() }
        movedOnShare[to] = origin == to ? nil : origin
        return true
    }

    static let movedOnShareLimit = 16_384
}
