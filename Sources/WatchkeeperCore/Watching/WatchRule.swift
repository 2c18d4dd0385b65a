import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// One `[[watch]]` rule's policy and state on the watching queue: which files it selects
/// and reports with which event, its settle window, what it handled in this life (by the
/// file's identity, so a file found again at another path is known), how settled files
/// become job subjects, and its part of the dump. The inotify watches, the scans and the
/// ledger are the coordinator's (DirectoryWatcher); the jobs are the engine's.
final class WatchRule: @unchecked Sendable {
    var settings: WatchSettings
    /// The directory actually watched: the configured root with symbolic links resolved
    /// (nil while it is missing). Jobs get paths under it: a link retargeted later cannot
    /// make a job run on another file than the one whose event it was.
    var root: [UInt8]?
    /// Said once in the log and kept for the dump: "a symbolic link to /data/in".
    var rootNote: String?
    /// The symbolic links on the configured path (absolute, without the leading slash, under
    /// their real directory): a change of one of these names is a possible retarget.
    var rootLinks: Set<[UInt8]> = []
    /// While the root is missing: the name whose appearance in the watched directory above it
    /// (the nearest that exists) brings it, or its next missing parent, closer.
    var awaitedName: [UInt8] = []
    var settle = SettleQueue<PendingFile>()
    var settleTimer: (any WatchTimer)?
    /// Files whose job succeeded in this life, by inode, with the form and path they had,
    /// until the ledger holds them: a rescan, or the same file moved within the tree after
    /// its job, is not run again.
    var handled: [InodeKey: HandledFile] = [:]
    /// Renames, attribute changes and writes seen since files were handled (TrackedChanges),
    /// and the timer that confirms the changes (DirectoryWatcher.confirmChanges).
    var changes = TrackedChanges()
    var changesTimer: (any WatchTimer)?
    /// fleet = "one": files claimed elsewhere, held, and recorded handled here
    /// (DirectoryWatcher+Fleet.swift).
    var fleet = FleetRuleState()
    /// Files handed to the engine and not back yet, by inode: a scan that finds one again
    /// does not run it twice, and a new name it is renamed to meanwhile waits for its outcome.
    var inFlight: [InodeKey: InFlightFile] = [:]
    /// Files waiting to settle that were renamed (IN_MOVED_FROM) by cookie, until the
    /// IN_MOVED_TO says their new name: their wait moves there.
    var renamedWhileSettling: [UInt32: WatchEvent] = [:]
    /// Directories that could not be watched (the watch limit, EACCES, ...): scanned by the
    /// fallback scan, which also tries to watch them again.
    var unwatchable: [[UInt8]] = []
    var fallbackTimer: (any WatchTimer)?
    /// The trees of this rule that are polled (PolledTree), and their pollers.
    var polledTrees: [PolledTree] = []
    var pollers: [TreePoller] = []
    /// Trees already said in the log as polled (mount point and type): said once, not at
    /// every remount.
    var pollNotesSaid: Set<String> = []
    /// Files the pollers handed on.
    var polledFiles: UInt64 = 0
    /// Files renamed within a polled tree whose identities hash the path (FUSE: its inode
    /// numbers do not survive a remount), by their path now: the path whose hash they keep,
    /// so a file its job moved into `done/` is still the file it handled (issue 36).
    /// Bounded; for this life only.
    var movedOnShare: [[UInt8]: [UInt8]] = [:]
    /// IN_MOVED_FROM of files on such a tree, by cookie, until their IN_MOVED_TO.
    var renamesOnShare: [UInt32: [UInt8]] = [:]
    /// Which backend watches the tree (its ancestors stay on inotify), and when it moves.
    var backend = TreeBackendChoice()
    /// A rescan after lost events in a rule without catch-up: only files changed since then
    /// (nanoseconds since the epoch) are new; the others were there before (inotify's rescan,
    /// which is synchronous; a fanotify listing carries its own, `Listing.changedSince`).
    var rescanChangedSince: Int64?
    /// Files such a rescan found unchanged since before the events were lost.
    var rescanOlderSkipped: UInt64 = 0
    /// A fanotify tree's listing for the files already there, while it goes on in slices
    /// (DirectoryWatcher.listInSlices).
    var listing: Listing?
    /// Its next slice.
    var listingTimer: (any WatchTimer)?
    struct Listing {
        /// Directories still to list, the next at the end.
        var pending: [[UInt8]]
        let began: MonotonicInstant
        var directories = 0
        var slices = 0
        /// Set when the listing is a rescan after lost events in a rule without catch-up.
        var changedSince: Int64?
    }
    /// The last `recent_events` raw events, oldest first (off unless configured).
    var recentEvents: [(time: WallTime, event: InotifyEvent, path: [UInt8])] = []

    // Counters for the dump; none is reset by it.
    var eventsSeen: UInt64 = 0
    var matched: UInt64 = 0
    var duplicates: UInt64 = 0
    var movesFollowed: UInt64 = 0
    /// Renames and attribute changes of handled files followed (confirmed), and O_TMPFILE
    /// files handled under the name they were linked to.
    var changesFollowed: UInt64 = 0
    var tmpfilesLinked: UInt64 = 0
    /// New names of files whose job was pending or running when they were renamed.
    var renamesFollowed: UInt64 = 0
    /// Files a scan found still changing, whose wait started again.
    var scanWaitsRestarted: UInt64 = 0
    /// Hard links (and files that appeared whole) handled from their IN_CREATE.
    var linksHandled: UInt64 = 0
    var jobsSubmitted: UInt64 = 0
    var batchesStarted: UInt64 = 0
    var overflows: UInt64 = 0
    var rescans: UInt64 = 0
    var fallbackScans: UInt64 = 0
    var rootsLost: UInt64 = 0
    var lastEventAt: MonotonicInstant?
    /// Entries scans and events skipped because they are not regular files.
    var skipped = TreeScanner.TypeCounts()

    static let handledLimit = 200_000

    init(settings: WatchSettings) {
        self.settings = settings
    }

    var name: String { settings.name }
    var key: JobKey { JobKey(.watch, settings.name) }
    var configuredRoot: [UInt8] { Array(settings.path.utf8) }
    var isMissing: Bool { root == nil }

    var group: JobGroup {
        JobGroup(key: key, settings: settings.job, limit: settings.maxConcurrent, retry: settings.retry, retryExpired: settings.retryExpired,
                 fleet: settings.fleet == .one)
    }

    func absolute(_ relative: some Collection<UInt8>) -> [UInt8] {
        let base = root ?? configuredRoot
        return relative.isEmpty ? base : base + [UInt8(ascii: "/")] + relative
    }

    /// What every directory watch asks for: the rule's events, plus what keeps the tree
    /// known (new and moved directories, the directory itself going away), and for a rule
    /// that handles files as they become ready what keeps their identity current: writes
    /// and attribute changes (TrackedChanges).
    var watchMask: InotifyMask {
        var mask: InotifyMask = [.create, .movedTo, .movedFrom, .delete, .deleteSelf, .moveSelf, .onlyDirectory]
        if readyEvent != nil { mask.formUnion([.modify, .attrib]) }
        for event in settings.events { mask.insert(InotifyMask(rawValue: event.mask)) }
        if !settings.followSymlinks { mask.insert(.dontFollow) }
        return mask
    }

    /// The event a file found by a scan is reported with: the rule's "ready" event.
    var readyEvent: WatchEvent? {
        [WatchEvent.closedWrite, .movedIn, .created].first { settings.events.contains($0) }
    }

    /// The rule's event for an inotify event on a file, if it asks for it.
    func event(for mask: InotifyMask) -> WatchEvent? {
        settings.events.first { mask.contains(InotifyMask(rawValue: $0.mask)) }
    }

    func selects(_ relative: [UInt8]) -> Bool { settings.filter.selects(relative) }

    /// The polled tree on a network or FUSE file system that holds `relative`, if any.
    func remoteTree(holding relative: [UInt8]) -> PolledTree? {
        polledTrees.first { $0.isRemote && $0.contains(relative) }
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
    func followMoveOnShare(from: [UInt8], to: [UInt8]) -> Bool {
        guard from != to, let tree = remoteTree(holding: from), tree.contains(to),
              !FilesystemClass.hasStableInodes(tree.fileSystemType) else { return false }
        let origin = movedOnShare.removeValue(forKey: from) ?? from
        if movedOnShare.count >= Self.movedOnShareLimit { movedOnShare.removeAll() }
        movedOnShare[to] = origin == to ? nil : origin
        return true
    }

    static let movedOnShareLimit = 16_384

    func mayContainSelected(directory relative: [UInt8]) -> Bool {
        settings.recursive && settings.filter.mayContainSelected(directory: relative)
    }

    func noteRawEvent(_ event: InotifyEvent, path: [UInt8], at now: MonotonicInstant, wallNow: @autoclosure () -> WallTime) {
        eventsSeen += 1
        lastEventAt = now
        guard settings.recentEvents > 0 else { return }
        recentEvents.append((wallNow(), event, path))
        if recentEvents.count > settings.recentEvents { recentEvents.removeFirst(recentEvents.count - settings.recentEvents) }
    }

    /// Remembers a file handled successfully in this life; the memory is bounded (the
    /// ledger remembers the rest across restarts).
    func remember(_ file: HandledFile) {
        if handled.count >= Self.handledLimit { handled.removeAll(keepingCapacity: true) }
        handled[file.current.inodeKey] = file
    }

    /// Handled successfully in this life in this exact form (the path follows it), or, in a
    /// polled tree (where no event says what was renamed), found under another name with only
    /// its change time moved: the ledger follows it there the next time a poll hands it on
    /// (WatchLedger.handledBefore).
    func handledInThisLife(_ identity: FileIdentity, at relative: [UInt8]) -> Bool {
        guard let known = handled[identity.inodeKey] else { return false }
        if known.current.sameFile(as: identity) {
            if known.path != relative { handled[identity.inodeKey]?.path = relative }
            return true
        }
        return known.path != relative && isPolled(relative) && known.current.renamed(as: identity)
    }

    /// In a tree that is polled (`method = "poll"`, or a network or FUSE file system).
    func isPolled(_ relative: [UInt8]) -> Bool {
        settings.method == .poll || remoteTree(holding: relative) != nil
    }

    /// The form a file's record is to carry: the one admitted, or what it became through the
    /// attribute changes followed while its job waited or ran.
    func recordedIdentity(of file: FileSubject) -> FileIdentity? {
        guard let identity = file.identity else { return nil }
        guard let entry = inFlight[identity.inodeKey], entry.identity == identity else { return identity }
        return entry.current
    }

    /// A file went to the engine.
    func submitted(_ file: FileSubject) {
        guard let identity = file.identity else { return }
        let key = identity.inodeKey
        if var entry = inFlight[key] {
            entry.submissions += 1
            entry.identity = identity
            entry.current = identity
            inFlight[key] = entry
        } else {
            inFlight[key] = InFlightFile(identity: identity, current: identity, submissions: 1, followers: [])
        }
    }

    /// A file with a job waiting or running, found at `relative` under a new name: it is
    /// parked as a follower of that job (handled there if the job does not succeed). False
    /// when no job of this file is in flight.
    func followIfInFlight(_ identity: FileIdentity, at relative: [UInt8], event: WatchEvent) -> Bool {
        let key = identity.inodeKey
        guard let entry = inFlight[key], entry.current.renamed(as: identity) else { return false }
        inFlight[key]?.followers.append(.init(path: relative, event: event, identity: identity))
        renamesFollowed += 1
        return true
    }

    /// A file came back from the engine: when it was its inode's last submission, the
    /// names it was renamed to meanwhile are returned (to handle unless its job succeeded).
    func returned(_ file: FileSubject) -> [InFlightFile.Follower] {
        guard let identity = file.identity, var entry = inFlight[identity.inodeKey] else { return [] }
        entry.submissions -= 1
        guard entry.submissions <= 0 else {
            inFlight[identity.inodeKey] = entry
            return []
        }
        inFlight[identity.inodeKey] = nil
        if inFlight.isEmpty { inFlight = [:] }
        return entry.followers
    }

    // MARK: Batches

    /// The files whose windows ended together go to as few jobs as fit `budget` bytes
    /// (the argv limit or one pipe), each file in exactly one of them.
    static func batches(_ files: [FileSubject], input: WatchSettings.BatchInput, budget: Int) -> [JobSubject] {
        var result: [JobSubject] = []
        var chunk: [FileSubject] = []
        var bytes = 0
        for file in files {
            // An argument costs its bytes, its NUL and its pointer in the new argv; a path
            // on stdin its bytes and its NUL.
            let cost = file.path.count + 1 + (input == .argv ? MemoryLayout<UnsafePointer<CChar>>.size : 0)
            if !chunk.isEmpty && bytes + cost > budget {
                result.append(.batch(chunk, input: input))
                chunk = []
                bytes = 0
            }
            chunk.append(file)
            bytes += cost
        }
        if !chunk.isEmpty { result.append(.batch(chunk, input: input)) }
        return result
    }

    // MARK: Dump

    /// How the tree is watched: "inotify", "fanotify", "poll" (method = "poll"), or with
    /// "+poll" where a network or FUSE tree of it is polled as well.
    var treeMethod: String {
        if settings.method == .poll { return "poll" }
        let backend = self.backend.backend.rawValue
        return polledTrees.isEmpty ? backend : backend + "+poll"
    }

    func describe(now: MonotonicInstant, watchedDirectories: Int, ledgerSize: DumpValue) -> DumpValue {
        let lastEvent: DumpValue = lastEventAt.map { .double((now - $0).secondsDouble) } ?? .null
        let skippedByType: [DumpField] = TreeScanner.EntryType.allCases.compactMap { type in
            type == .regular || type == .directory || skipped[type] == 0 ? nil : .init(type.name, .int(Int64(skipped[type])))
        }
        return .object([
            .init("name", .string(settings.name)),
            .init("root", .string(settings.path)),
            .init("watched_root", root.map { .bytes($0) } ?? .null),
            .init("root_note", rootNote.map { .string($0) } ?? .null),
            .init("recursive", .bool(settings.recursive)),
            .init("method", .string(settings.method.rawValue)),
            .init("fleet", settings.fleet == .one ? fleet.describe() : .string(settings.fleet.rawValue)),
            .init("polled_trees", .array(pollers.map { .object($0.describe(now: now)) })),
            .init("polled_files", .int(Int64(polledFiles))),
            .init("events", .array(settings.events.map { .string($0.rawValue) })),
            .init("root_missing", .bool(isMissing)),
            .init("roots_lost", .int(Int64(rootsLost))),
            .init("tree_method", .string(treeMethod)),
            .init("listing", listing.map { listing in
                .object([
                    .init("directories_listed", .int(Int64(listing.directories))),
                    .init("directories_queued", .int(Int64(listing.pending.count))),
                    .init("seconds", .double((now - listing.began).secondsDouble)),
                ])
            } ?? .null),
            // With fanotify: the file systems marked for the tree.
            .init(backend.usesFanotify ? "fanotify_marks" : "inotify_watches", .int(Int64(watchedDirectories))),
            .init("events_seen", .int(Int64(eventsSeen))),
            .init("matched", .int(Int64(matched))),
            .init("coalesced", .int(Int64(settle.coalesced))),
            .init("duplicates_dropped", .int(Int64(duplicates))),
            .init("moves_followed", .int(Int64(movesFollowed))),
            .init("changes_followed", .int(Int64(changesFollowed))),
            .init("tracked_changes", changes.describe()),
            .init("tmpfiles_linked", .int(Int64(tmpfilesLinked))),
            .init("renames_followed", .int(Int64(renamesFollowed))),
            .init("scan_waits_restarted", .int(Int64(scanWaitsRestarted))),
            .init("rescan_older_skipped", .int(Int64(rescanOlderSkipped))),
            .init("links_handled", .int(Int64(linksHandled))),
            .init("files_in_flight", .int(Int64(inFlight.count))),
            .init("jobs_submitted", .int(Int64(jobsSubmitted))),
            .init("batches_started", .int(Int64(batchesStarted))),
            .init("overflows", .int(Int64(overflows))),
            .init("rescans", .int(Int64(rescans))),
            .init("last_event_ago_s", lastEvent),
            .init("pending_settle", .int(Int64(settle.count))),
            .init("files_remembered", .int(Int64(handled.count))),
            .init("skipped_not_regular", .object(skippedByType)),
            .init("catch_up", .bool(settings.catchUp)),
            .init("ledger_size", ledgerSize),
            .init("unwatched_directories", .array(unwatchable.prefix(20).map { .bytes(absolute($0)) })),
            .init("unwatched_total", .int(Int64(unwatchable.count))),
            .init("fallback_scans", .int(Int64(fallbackScans))),
            .init("recent_events", .array(recentEvents.map { entry in
                .object([.init("time", .string(entry.time.iso8601)), .init("mask", .string(entry.event.mask.description)),
                         .init("path", .bytes(entry.path))])
            })),
        ])
    }
}

/// What waits in a rule's settle window for a path.
struct PendingFile: Sendable, Equatable {
    /// What the job will be told happened.
    var event: WatchEvent
    /// A file only a scan found (no writer's close): its form when last looked at, so the
    /// wait starts again while it keeps changing. Nil until first looked at.
    var seen: FileIdentity?
    /// Moved in from this name of the rule's tree, by a rename the watcher saw (and not
    /// while it was being written): a handled file there is this file.
    var renamedFrom: [UInt8]?
    /// Found by a rescan after lost events, in a rule without catch-up: handled only if it
    /// changed since (nanoseconds since the epoch), since it was there before otherwise.
    var changedSince: Int64?

    init(event: WatchEvent, seen: FileIdentity? = nil, renamedFrom: [UInt8]? = nil, changedSince: Int64? = nil) {
        self.event = event
        self.seen = seen
        self.renamedFrom = renamedFrom
        self.changedSince = changedSince
    }
}

/// A file whose job succeeded in this life.
struct HandledFile: Sendable, Equatable {
    /// Its form when admitted: a close that finds it so changed nothing.
    var admitted: FileIdentity
    /// Its form now as far as the watcher saw: `admitted`, or what the renames and
    /// attribute changes it followed made of it. What scans compare with.
    var current: FileIdentity
    var path: [UInt8]
}

/// A file with a job pending or running.
struct InFlightFile {
    /// A name the file was moved to while its job was pending or running: handled only if
    /// that job does not succeed (it may have run on the old name, or found it gone).
    struct Follower {
        let path: [UInt8]
        let event: WatchEvent
        let identity: FileIdentity
    }

    /// Its form when last admitted.
    var identity: FileIdentity
    /// `identity`, or what the attribute changes followed since made of it.
    var current: FileIdentity
    var submissions: Int
    var followers: [Follower]
}

extension WatchSettings {
    /// The same files in the same way: what a reload may change without re-watching the
    /// tree (the job, its retry policy, settle, batching, limits).
    func selectsTheSameFiles(as other: WatchSettings) -> Bool {
        path == other.path && recursive == other.recursive && events == other.events && filter == other.filter
            && followSymlinks == other.followSymlinks && catchUp == other.catchUp && method == other.method
            && pollInterval == other.pollInterval && pollSettle == other.pollSettle
    }
}
