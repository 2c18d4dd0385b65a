import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// One `[[watch]]` rule's policy and state on the watching queue: which files it selects
/// and reports with which event, its settle window, what it handled in this life (by the
/// file's identity, so a file found again at another path is known), how settled files
/// become job subjects, and its part of the dump. Its state is values per concern (where
/// the root is, the tree's backend, settling, this life's memory, scans, polling, the fleet,
/// counters); the watches are WatchBackends', the walks TreeScans', the ledger the
/// coordinator's; the jobs are the engine's.
// @unchecked Sendable: confined to the watching queue, with its DirectoryWatcher.
final class WatchRule: @unchecked Sendable {
    var settings: WatchSettings
    /// Where the configured path leads now, and what is watched to notice when it stops.
    var location = RootLocation()
    /// The directory actually watched (nil while it is missing).
    var root: [UInt8]? { location.root }
    /// Which backend watches the tree (its ancestors stay on inotify), and when it moves.
    var backend = TreeBackendChoice()
    /// Files waiting for their window to end, and the timer of the next one.
    var settle = SettleQueue<PendingFile>()
    var settleTimer: (any WatchTimer)?
    /// Files waiting to settle that were renamed (IN_MOVED_FROM) by cookie, until the
    /// IN_MOVED_TO says their new name: their wait moves there.
    var renamedWhileSettling: [UInt32: WatchEvent] = [:]
    /// What was handled in this life and what is in flight.
    var memory = RuleMemory()
    /// Renames, attribute changes and writes seen since files were handled, and the timer
    /// that confirms the changes (HandledChanges.confirmChanges).
    var changes = TrackedChanges()
    var changesTimer: (any WatchTimer)?
    /// Walks, rescans and listings of the tree under way, and what they could not watch.
    var scans = RuleScanState()
    /// The trees of it that are polled, and what was followed on them.
    var polling = RulePolling()
    /// fleet = "one": files claimed elsewhere, held, and recorded handled here (FleetInbox).
    var fleet = FleetRuleState()
    /// What the dump counts; none is reset by it.
    var counters = RuleCounters()

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

    func mayContainSelected(directory relative: [UInt8]) -> Bool {
        settings.recursive && settings.filter.mayContainSelected(directory: relative)
    }

    /// Handled in this life in this form (RuleMemory.handledInThisLife), where the tree is
    /// polled also under another name with only its change time moved.
    func handledInThisLife(_ identity: FileIdentity, at relative: [UInt8]) -> Bool {
        memory.handledInThisLife(identity, at: relative, polled: isPolled(relative))
    }

    /// A file with a job waiting or running, found under a new name: parked as a follower.
    func followIfInFlight(_ identity: FileIdentity, at relative: [UInt8], event: WatchEvent) -> Bool {
        guard memory.followIfInFlight(identity, at: relative, event: event) else { return false }
        counters.renamesFollowed += 1
        return true
    }

    /// In a tree that is polled (`method = "poll"`, or a network or FUSE file system).
    func isPolled(_ relative: [UInt8]) -> Bool {
        settings.method == .poll || polling.remoteTree(holding: relative) != nil
    }

    /// One of the rule's timers, made the first time it is needed (registered with its
    /// purpose), set to fire at `instant`.
    func arm(_ timer: ReferenceWritableKeyPath<WatchRule, (any WatchTimer)?>, on clock: any WatchClock, at instant: MonotonicInstant,
             target: String, fire: @escaping () -> Void) {
        if self[keyPath: timer] == nil {
            self[keyPath: timer] = clock.makeTimer(owner: "watch \(name)", target: target, handler: fire)
        }
        self[keyPath: timer]?.schedule(at: instant)
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
        return polling.trees.isEmpty ? backend : backend + "+poll"
    }

    func describe(now: MonotonicInstant, watchedDirectories: Int, ledgerSize: DumpValue) -> DumpValue {
        let lastEvent: DumpValue = counters.lastEventAt.map { .double((now - $0).secondsDouble) } ?? .null
        let skippedByType: [DumpField] = TreeScanner.EntryType.allCases.compactMap { type in
            type == .regular || type == .directory || counters.skipped[type] == 0 ? nil : .init(type.name, .int(Int64(counters.skipped[type])))
        }
        return .object([
            .init("name", .string(settings.name)),
            .init("root", .string(settings.path)),
            .init("watched_root", root.map { .bytes($0) } ?? .null),
            .init("root_note", location.note.map { .string($0) } ?? .null),
            .init("recursive", .bool(settings.recursive)),
            .init("method", .string(settings.method.rawValue)),
            .init("fleet", settings.fleet == .one ? fleet.describe() : .string(settings.fleet.rawValue)),
            .init("polled_trees", .array(polling.pollers.map { .object($0.describe(now: now)) })),
            .init("polled_files", .int(Int64(counters.polledFiles))),
            .init("events", .array(settings.events.map { .string($0.rawValue) })),
            .init("root_missing", .bool(isMissing)),
            .init("roots_lost", .int(Int64(counters.rootsLost))),
            .init("tree_method", .string(treeMethod)),
            .init("listing", scans.listing.map { listing in
                .object([
                    .init("directories_listed", .int(Int64(listing.directories))),
                    .init("directories_queued", .int(Int64(listing.pending.count))),
                    .init("seconds", .double((now - listing.began).secondsDouble)),
                ])
            } ?? .null),
            // With fanotify: the file systems marked for the tree.
            .init(backend.usesFanotify ? "fanotify_marks" : "inotify_watches", .int(Int64(watchedDirectories))),
            .init("events_seen", .int(Int64(counters.eventsSeen))),
            .init("matched", .int(Int64(counters.matched))),
            .init("coalesced", .int(Int64(settle.coalesced))),
            .init("duplicates_dropped", .int(Int64(counters.duplicates))),
            .init("moves_followed", .int(Int64(counters.movesFollowed))),
            .init("changes_followed", .int(Int64(counters.changesFollowed))),
            .init("tracked_changes", changes.describe()),
            .init("tmpfiles_linked", .int(Int64(counters.tmpfilesLinked))),
            .init("renames_followed", .int(Int64(counters.renamesFollowed))),
            .init("scan_waits_restarted", .int(Int64(counters.scanWaitsRestarted))),
            .init("rescan_older_skipped", .int(Int64(counters.rescanOlderSkipped))),
            .init("links_handled", .int(Int64(counters.linksHandled))),
            .init("files_in_flight", .int(Int64(memory.inFlight.count))),
            .init("jobs_submitted", .int(Int64(counters.jobsSubmitted))),
            .init("batches_started", .int(Int64(counters.batchesStarted))),
            .init("overflows", .int(Int64(counters.overflows))),
            .init("rescans", .int(Int64(counters.rescans))),
            .init("last_event_ago_s", lastEvent),
            .init("pending_settle", .int(Int64(settle.count))),
            .init("files_remembered", .int(Int64(memory.handled.count))),
            .init("skipped_not_regular", .object(skippedByType)),
            .init("catch_up", .bool(settings.catchUp)),
            .init("ledger_size", ledgerSize),
            .init("unwatched_directories", .array(scans.unwatchable.prefix(20).map { .bytes(absolute($0)) })),
            .init("unwatched_total", .int(Int64(scans.unwatchable.count))),
            .init("fallback_scans", .int(Int64(counters.fallbackScans))),
            .init("recent_events", .array(counters.recentEvents.map { entry in
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
