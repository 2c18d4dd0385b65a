import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Which backend watches a rule's tree, and moving a tree to fanotify: when the rule says
/// `method = "fanotify"`, or under `auto` when the tree outgrows `fanotifyAbove` directories
/// or reaches the inotify watch limit. A tree fanotify cannot take stays on inotify, and
/// the journal says why once.
extension DirectoryWatcher {
    /// The backend of the rule's own tree (its ancestors are always inotify's).
    func treeBackend(of rule: WatchRule) -> WatchBackend? {
        rule.usesFanotify ? fanotify : backend
    }

    /// Directories of one tree beyond which `auto` moves it from inotify to fanotify: about
    /// 100 MiB of kernel memory in inotify watches (each pins its directory's inode).
    /// WATCHKEEPER_TEST_FANOTIFY_ABOVE lowers it for the tests (docs/testing.md).
    var fanotifyAbove: Int {
        if let text = context.daemonEnvironment["WATCHKEEPER_TEST_FANOTIFY_ABOVE"], let value = Int(text), value >= 0 { return value }
        return Self.defaultFanotifyAbove
    }

    static let defaultFanotifyAbove = 100_000

    /// Watches the rule's tree with fanotify from now on, because of `why`. The mark is
    /// placed before the tree's inotify watches go, so no event falls between. False when
    /// fanotify cannot take the tree; said once per reason, and not tried again until the
    /// tree is watched anew.
    @discardableResult
    func startFanotify(_ rule: WatchRule, why: String) -> Bool {
        guard let root = rule.root else { return false }
        if rule.usesFanotify { return true }
        if rule.fanotifyRefused != nil { return false }
        let refusal: String
        if let tree = rule.remoteTree(holding: []) {
            refusal = "it is on \(tree.fileSystemType), a network or FUSE file system, which is polled instead"
        } else if let fanotify = openFanotifyIfNeeded() {
            let points = localMountPoints(below: root, rule: rule)
            switch fanotify.startTree(.rule(rule.name), root: root, recursive: rule.settings.recursive, events: rule.watchMask, mountPoints: points) {
            case .success(let unmarked):
                rule.usesFanotify = true
                let had = rule.inotifyDirectories
                // Not a plain unwatch: what inotify queued for the tree before the mark (a
                // directory made just before) still counts, and the removals must not overflow
                // the queue every other rule's events share.
                backend?.handOver(.rule(rule.name))
                rule.inotifyDirectories = 0
                let marks = fanotify.watchedCount(of: .rule(rule.name))
                logger.notice("watch \(rule.name): watching \(LineEscaping.escaped(root)) with fanotify, because \(why): \(marks) file system mark\(marks == 1 ? "" : "s") instead of one inotify watch per directory\(had > 0 ? " (its \(had) inotify watches are removed)" : "")")
                for (path, error) in unmarked {
                    if let relative = relativePath(path, under: root) { reportWatchFailure(rule, relative: relative, error: error) }
                }
                return true
            case .failure(let failure):
                refusal = Self.fanotifyRefusal(failure, fileSystem: fileSystemType(of: root), privileges: .current())
            }
        } else {
            refusal = fanotifyProblem ?? "fanotify is not available"
        }
        rule.fanotifyRefused = refusal
        if rule.fanotifyNote != refusal {
            rule.fanotifyNote = refusal
            logger.warning("watch \(rule.name): unable to use fanotify for \(LineEscaping.escaped(root)) (\(why)): \(refusal); watching it with inotify")
        }
        return false
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
        rule.listing = .init(pending: [relative], began: .now)
        let generation = rule.treeGeneration
        queue.async { [weak self] in self?.listSlice(rule, generation: generation) }
    }

    static let listingSlice: Duration = .milliseconds(50)
    /// Directories listed together (in parallel, as TreeScanner does from 64 up).
    static let listingBatch = 64

    private func listSlice(_ rule: WatchRule, generation: UInt64) {
        guard accepting, rule.treeGeneration == generation, var listing = rule.listing, let root = rule.root else { return }
        let deadline = MonotonicInstant.now + Self.listingSlice
        let scanner = TreeScanner(root: root)
        repeat {
            let batch = Array(listing.pending.suffix(Self.listingBatch))
            listing.pending.removeLast(batch.count)
            var found: [[UInt8]] = []
            let summary = scanner.scan(from: batch, descend: { child in
                if rule.mayContainSelected(directory: child) { found.append(child) }
                return false
            }, file: { path in
                if rule.remoteTree(holding: path) == nil { self.scanned(rule, relative: path) }
            })
            account(rule, summary)
            listing.pending += found.reversed()
            listing.directories += summary.directoriesListed
        } while !listing.pending.isEmpty && MonotonicInstant.now < deadline
        listing.slices += 1
        guard listing.pending.isEmpty else {
            rule.listing = listing
            queue.queue.asyncAfter(deadline: .now() + Self.listingSlice.dispatchInterval) { [weak self] in
                self?.listSlice(rule, generation: generation)
            }
            return
        }
        rule.listing = nil
        let took = MonotonicInstant.now - listing.began
        if listing.slices > 1 {
            logger.info("watch \(rule.name): listed \(listing.directories) directories of \(LineEscaping.escaped(root)) for the files already there in \(took.compactDescription) (\(listing.slices) slices; fanotify heard every change meanwhile)")
        }
    }

    /// Where the unit's side of fanotify is explained.
    static let fanotifyDropIn = "the fanotify drop-in: docs/operations.md, \"Huge trees: fanotify\""

    /// Why fanotify cannot take a tree, in words an administrator can act on: an EPERM is
    /// told apart by step, and by whether the capability is missing or a system call filter
    /// refused the call (systemd's SystemCallErrorNumber=EPERM gives the same errno).
    static func fanotifyRefusal(_ failure: FanotifyBackend.StartFailure, fileSystem: String, privileges: ProcessPrivileges) -> String {
        switch (failure.step, failure.error) {
        case (.mark, .notPermitted), (.mark, .permissionDenied):
            if privileges.has(ProcessPrivileges.sysAdmin) == false {
                return "a fanotify mark on a whole file system needs CAP_SYS_ADMIN, which this process does not have (the unit's CapabilityBoundingSet leaves it out unless \(fanotifyDropIn) adds it)"
            }
            if privileges.seccompFiltered {
                return "the system call filter refuses fanotify_mark (the unit's SystemCallFilter= allows it with \(fanotifyDropIn))"
            }
        case (.resolveRoot, .notPermitted), (.resolveRoot, .permissionDenied):
            if privileges.has(ProcessPrivileges.dacReadSearch) == false {
                // The mark comes next: with neither capability, both are named at once.
                if privileges.has(ProcessPrivileges.sysAdmin) == false {
                    return "open_by_handle_at needs CAP_DAC_READ_SEARCH and a fanotify mark on a whole file system CAP_SYS_ADMIN, neither of which this process has (the shipped unit's CapabilityBoundingSet has the first; \(fanotifyDropIn) adds the second)"
                }
                return "open_by_handle_at needs CAP_DAC_READ_SEARCH, which this process does not have (the shipped unit's CapabilityBoundingSet has it)"
            }
            if privileges.seccompFiltered {
                return "the system call filter refuses open_by_handle_at (the unit's SystemCallFilter= allows it with \(fanotifyDropIn))"
            }
        case (_, .improperLink):
            return "its file system (\(fileSystem)) has no fsid, or it is inside a btrfs subvolume: fanotify cannot mark it as a whole"
        case (.rootHandle, .notSupported), (.mark, .notSupported), (.mark, .operationNotSupportedByDevice):
            return "its file system (\(fileSystem)) cannot encode file handles"
        case (.mark, .invalidArgument):
            return "fanotify_mark refused the events (FAN_RENAME needs Linux 5.17 or later)"
        case (.mark, .noSpace):
            return "the fanotify mark limit (fs.fanotify.max_user_marks=\(FanotifyBackend.sysctl("max_user_marks") ?? "?")) is reached"
        case (.resolveRoot, .staleNFSFileHandle):
            return "the root's file handle does not lead back to it on \(fileSystem)"
        default:
            break
        }
        return "\(failure.step.rawValue): \(failure.error) (\(failure.error.symbolicName))"
    }

    /// Why the fanotify group cannot be made. fanotify_init with directory handles needs no
    /// capability since Linux 5.13, so an EPERM there is a system call filter's, or an older
    /// kernel's demand for CAP_SYS_ADMIN.
    static func fanotifyInitRefusal(_ error: Errno, privileges: ProcessPrivileges) -> String {
        switch error {
        case .notPermitted where privileges.seccompFiltered:
            let alsoCapability = privileges.has(ProcessPrivileges.sysAdmin) == false ? " and adds CAP_SYS_ADMIN, which the file system mark needs" : ""
            return "the system call filter refuses fanotify_init (the unit's SystemCallFilter= allows it with \(fanotifyDropIn), which also allows fanotify_mark and open_by_handle_at\(alsoCapability))"
        case .notPermitted:
            return "fanotify_init needs CAP_SYS_ADMIN on this kernel (before Linux 5.13), which this process does not have (the unit's CapabilityBoundingSet leaves it out unless \(fanotifyDropIn) adds it)"
        case .invalidArgument:
            return "this kernel cannot report directory handles and names to fanotify (Linux 5.17 or later is needed)"
        case .tooManyOpenFiles:
            return "fanotify_init: \(error) (fs.fanotify.max_user_groups=\(FanotifyBackend.sysctl("max_user_groups") ?? "?") reached?)"
        default:
            return "fanotify_init: \(error) (\(error.symbolicName))"
        }
    }

    /// A file system mounted (or unmounted) at `relative` in a fanotify tree: marked, if
    /// local, or reported and scanned by the fallback like a directory inotify refused.
    func markMountPoint(_ rule: WatchRule, relative: [UInt8]) {
        guard let fanotify, let root = rule.root else { return }
        let path = rule.absolute(relative)
        guard localMountPoints(below: root, rule: rule).contains(path) else { return }
        if case .failure(let error) = fanotify.addMountPoint(.rule(rule.name), path: path) {
            reportWatchFailure(rule, relative: relative, error: error)
        }
    }

    /// Local file systems mounted below `root` for a recursive rule: each needs a mark of
    /// its own. Network and FUSE ones are polled, not marked.
    private func localMountPoints(below root: [UInt8], rule: WatchRule) -> [[UInt8]] {
        guard rule.settings.recursive else { return [] }
        var points: [[UInt8]] = []
        for mount in mountTable() where FilesystemClass.reasonToPoll(mount.fileSystemType) == nil {
            guard let relative = relativePath(mount.mountPoint, under: root), !relative.isEmpty,
                  rule.remoteTree(holding: relative) == nil, !points.contains(mount.mountPoint) else { continue }
            points.append(mount.mountPoint)
        }
        return points
    }

    private func fileSystemType(of path: [UInt8]) -> String {
        MountInfoEntry.containing(path, in: mountTable())?.fileSystemType ?? "unknown"
    }

    /// The mount table as the mount watcher last read it, or read now without one.
    func mountTable() -> [MountInfoEntry] {
        if let mounts { return mounts.mounts }
        return (try? readSmallFile("/proc/self/mountinfo")).map { MountInfoEntry.parse(Array($0.utf8)) } ?? []
    }
}
