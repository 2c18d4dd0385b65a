import Dispatch

/// Listing a fanotify tree for the files already there, in slices, and the backend changes
/// a tree's TreeBackendChoice asks for (WatchBackends does them).
extension DirectoryWatcher {
    /// The backend of the rule's own tree (its ancestors are always inotify's).
    func treeBackend(of rule: WatchRule) -> WatchBackend? {
        backends.tree(of: rule)
    }

    /// Does what the rule's TreeBackendChoice asked: true when the tree is on fanotify now.
    @discardableResult
    func take(_ step: TreeBackendChoice.Step, for rule: WatchRule) -> Bool {
        guard case .moveToFanotify(let why) = step else { return rule.backend.usesFanotify }
        guard let root = rule.root, let unmarked = backends.moveToFanotify(rule, why: why, mounts: mountTable()) else { return false }
        for (path, error) in unmarked {
            if let relative = relativePath(path, under: root) { reportWatchFailure(rule, relative: relative, error: error) }
        }
        return true
    }

    /// A file system mounted (or unmounted) at `relative` in a fanotify tree: marked, if
    /// local, or reported and scanned by the fallback like a directory inotify refused.
    func markMountPoint(_ rule: WatchRule, relative: [UInt8]) {
        if let error = backends.markMountPoint(rule, relative: relative, mounts: mountTable()) {
            reportWatchFailure(rule, relative: relative, error: error)
        }
    }

    // MARK: Listing a fanotify tree

    /// Events of the tree were lost (a directory handle that could not be resolved): its
    /// files are found by listing it again, unless a listing is under way already, which
    /// finds them too. Issue 36: the journal promised that rescan, and none ran.
    func rescanForMissedEvents(_ rule: WatchRule) {
        guard accepting, rule.listing == nil else { return }
        rescan(rule)
    }

    /// Lists `relative` and below for the files already there (catch-up, a directory that
    /// came in, a rescan after an overflow) in slices of `listingSlice` on the watching
    /// queue, each followed by a pause as long: the mark hears every change meanwhile, so a
    /// tree of a million directories need not hold READY, events and the control socket
    /// for the seconds its listing takes. Depth first, a few directories at a time, so what
    /// is left to list stays small. A walk already under way takes the new start along.
    func listInSlices(_ rule: WatchRule, from relative: [UInt8]) {
        if rule.listing != nil {
            rule.listing!.pending.append(relative)
            return
        }
        rule.listing = .init(pending: [relative], began: clock.now)
        armListing(rule, at: clock.now)
    }

    /// The listing's next slice, on a registered timer of the rule (the dump lists it, and
    /// unwatching the tree cancels it).
    private func armListing(_ rule: WatchRule, at instant: MonotonicInstant) {
        arm(\.listingTimer, of: rule, at: instant, target: "list a fanotify tree in slices of \(Self.listingSlice.compactDescription)") { [unowned self] in
            self.listSlice(rule)
        }
    }

    static let listingSlice: Duration = .milliseconds(50)
    /// Directories listed together (in parallel, as TreeScanner does from 64 up).
    static let listingBatch = 64

    private func listSlice(_ rule: WatchRule) {
        guard accepting, rules[rule.name] === rule, var listing = rule.listing, let root = rule.root else { return }
        let deadline = clock.now + Self.listingSlice
        let scanner = TreeScanner(root: root)
        repeat {
            let batch = Array(listing.pending.suffix(Self.listingBatch))
            listing.pending.removeLast(batch.count)
            var found: [[UInt8]] = []
            let summary = scanner.scan(from: batch, descend: { child in
                if rule.mayContainSelected(directory: child) { found.append(child) }
                return false
            }, file: { path in
                if rule.polling.remoteTree(holding: path) == nil { self.scanned(rule, relative: path) }
            })
            account(rule, summary)
            listing.pending += found.reversed()
            listing.directories += summary.directoriesListed
        } while !listing.pending.isEmpty && clock.now < deadline
        listing.slices += 1
        guard listing.pending.isEmpty else {
            rule.listing = listing
            armListing(rule, at: clock.now + Self.listingSlice)
            return
        }
        rule.listing = nil
        let took = clock.now - listing.began
        if listing.slices > 1 {
            logger.info("watch \(rule.name): listed \(listing.directories) directories of \(LineEscaping.escaped(root)) for the files already there in \(took.compactDescription) (\(listing.slices) slices; fanotify heard every change meanwhile)")
        }
    }

    /// The mount table as the mount watcher last read it, or read now without one.
    func mountTable() -> [MountInfoEntry] {
        if let mounts { return mounts.mounts }
        return (try? readSmallFile("/proc/self/mountinfo")).map { MountInfoEntry.parse(Array($0.utf8)) } ?? []
    }
}
