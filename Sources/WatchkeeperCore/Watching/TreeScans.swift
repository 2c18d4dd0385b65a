import Dispatch
import CWatchkeeperSystem
import Logging
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Watching trees and scanning them, on the watching queue: wherever events may have been
/// missed (start-up, a new or moved-in directory, an overflow, a directory over the watch
/// limit, a mount), the tree is walked, each directory watched before it is listed, and its
/// regular files go through the rule's settle queue (FileSettling). A fanotify tree is never
/// walked to be watched: it is listed in slices. Directories that could not be watched are
/// scanned by a fallback timer of their rule. Confined to the watching queue.
// @unchecked Sendable: confined to the watching queue, as every part of the watcher.
final class TreeScans: @unchecked Sendable {
    private let state: WatchingState
    private let backends: WatchBackends
    private let problems: ProblemAggregator
    private let settling: FileSettling
    private var clock: any WatchClock { state.clock }
    private var logger: Logger { state.logger }
    private var accepting: Bool { state.accepting }

    init(state: WatchingState, backends: WatchBackends, problems: ProblemAggregator, settling: FileSettling) {
        self.state = state
        self.backends = backends
        self.problems = problems
        self.settling = settling
    }

    /// Watches a directory and, for recursive rules, everything below it, level by level:
    /// every directory of a level is watched, then the level is listed (a file created in
    /// between is seen by the scan, the event, or both; the duplicate is dropped by identity).
    func addTree(_ rule: WatchRule, from relative: [UInt8], emitFiles: Bool) {
        guard let root = rule.root else { return }
        // A fanotify mark already covers every directory: a walk only finds files, and
        // need not hold the queue to do it.
        if rule.backend.usesFanotify {
            if emitFiles { listInSlices(rule, from: relative) }
            return
        }
        let summary = TreeScanner(root: root).scan(from: [relative], visit: { directory in
            self.addWatch(rule, relative: directory) && (rule.settings.recursive || emitFiles)
        }, descend: { child in
            rule.mayContainSelected(directory: child)
        }, file: { path in
            // A polled share's files come from its poller, off this queue (TreePoller).
            if emitFiles && rule.polling.remoteTree(holding: path) == nil { self.scanned(rule, relative: path) }
        })
        account(rule, summary)
    }

    /// Every file of the tree through the settle queue; directories without a watch (new
    /// ones whose events were lost) are watched on the way. `changedSince`: a rule without
    /// catch-up runs only the files changed since (the others were there before the events
    /// were lost, and it does not run what was there before).
    func rescan(_ rule: WatchRule, from relative: [UInt8] = [], changedSince: Int64? = nil) {
        // A rule that only polls has no events to lose: its next pass sees everything.
        guard let root = rule.root, rule.settings.method != .poll else { return }
        rule.counters.rescans += 1
        if rule.backend.usesFanotify {
            let fresh = rule.scans.listing == nil
            listInSlices(rule, from: relative)
            // A listing already going on (a new directory's) keeps running everything it finds.
            if fresh { rule.scans.listing?.changedSince = changedSince }
            return
        }
        rule.scans.rescanChangedSince = changedSince
        defer { rule.scans.rescanChangedSince = nil }
        let summary = TreeScanner(root: root).scan(from: [relative], visit: { directory in
            self.backends.tree(of: rule)?.isWatched(.init(owner: .rule(rule.name), relative: directory)) == true || self.addWatch(rule, relative: directory)
        }, descend: { child in
            rule.mayContainSelected(directory: child)
        }, file: { path in
            if rule.polling.remoteTree(holding: path) == nil { self.scanned(rule, relative: path) }
        })
        account(rule, summary)
    }

    /// What a scan skipped is counted; what it could not list is said, one line per cause.
    func account(_ rule: WatchRule, _ summary: TreeScanner.Summary) {
        // A big walk leaves its levels' path lists freed in pieces all over the heap (and
        // in both arenas, since levels are listed in parallel): give them back.
        if summary.directoriesListed >= Self.trimAfterDirectories { _ = malloc_trim(0) }
        var skipped = summary.types
        skipped[.regular] = 0
        skipped[.directory] = 0
        rule.counters.skipped += skipped
        for failure in summary.failures {
            let error = Errno(rawValue: failure.errorNumber)
            // Gone between being seen and being listed: nothing was there to miss.
            guard error != .noSuchFileOrDirectory && error != .notDirectory else { continue }
            if error == .fileNameTooLong {
                reportTooDeep(rule, relative: failure.directory)
                continue
            }
            problems.report("watch \(rule.name): unable to list directories: \(error) (\(error.symbolicName))",
                            example: LineEscaping.escaped(rule.absolute(failure.directory)))
            if !rule.scans.unwatchable.contains(failure.directory) { rule.scans.unwatchable.append(failure.directory) }
            armFallbackScan(rule)
        }
    }

    /// A file found by a scan: the rule's "ready" event, with the scan's minimum settle.
    func scanned(_ rule: WatchRule, relative: [UInt8]) {
        guard let event = rule.readyEvent, rule.selects(relative) else { return }
        rule.counters.matched += 1
        let changedSince = rule.backend.usesFanotify ? rule.scans.listing?.changedSince : rule.scans.rescanChangedSince
        settling.enqueue(rule, relative: relative, event: event, fromScan: true, changedSince: changedSince)
    }

    /// Directories listed by one walk beyond which its garbage is handed back to the kernel.
    static let trimAfterDirectories = 1_000

    /// One directory watched; false (and a report) when it could not be.
    func addWatch(_ rule: WatchRule, relative: [UInt8]) -> Bool {
        guard let backend = backends.tree(of: rule) else { return false }
        switch backend.watch(.init(owner: .rule(rule.name), relative: relative), path: rule.absolute(relative), events: rule.watchMask) {
        case .success:
            take(rule.backend.watchedDirectory(method: rule.settings.method, above: backends.fanotifyAbove), for: rule)
            return true
        case .failure(.noSpace) where !rule.backend.usesFanotify:
            let limit = InotifyBackend.sysctl("max_user_watches") ?? "?"
            if take(rule.backend.watchLimitReached(method: rule.settings.method, limit: limit), for: rule) { return true }
            reportWatchFailure(rule, relative: relative, error: .noSpace)
            return false
        case .failure(let error):
            reportWatchFailure(rule, relative: relative, error: error)
            return false
        }
    }

    func reportWatchFailure(_ rule: WatchRule, relative: [UInt8], error: Errno) {
        let path = LineEscaping.escaped(rule.absolute(relative))
        switch error {
        case .noSuchFileOrDirectory, .notDirectory:
            return // gone again before we got to it (or replaced by a file)
        case .fileNameTooLong:
            reportTooDeep(rule, relative: relative)
            return
        case .noSpace where rule.backend.usesFanotify:
            problems.report("watch \(rule.name): unable to mark a file system for fanotify: the mark limit (fs.fanotify.max_user_marks=\(FanotifyBackend.sysctl("max_user_marks") ?? "?")) is reached; its directories are scanned every \(fallbackInterval.compactDescription) instead",
                            example: path)
        case .noSpace:
            let limit = InotifyBackend.sysctl("max_user_watches") ?? "?"
            problems.report("unable to watch directories: inotify watch limit (fs.inotify.max_user_watches=\(limit)) reached with \(backends.inotify?.watchCount ?? 0) watches in use by watchkeeper; raise it with: sysctl fs.inotify.max_user_watches=\(max(524_288, (Int(limit) ?? 0) * 4)) (and persist it in /etc/sysctl.d/); until then they are scanned every \(fallbackInterval.compactDescription)",
                            example: path)
        default:
            problems.report("watch \(rule.name): unable to watch directories: \(error) (\(error.symbolicName)); they are scanned every \(fallbackInterval.compactDescription) instead",
                            example: path)
        }
        if !rule.scans.unwatchable.contains(relative) { rule.scans.unwatchable.append(relative) }
        armFallbackScan(rule)
    }

    /// A path longer than PATH_MAX can be neither watched nor listed by name, now or by a
    /// later scan: said as such, with no promise of a fallback scan.
    private func reportTooDeep(_ rule: WatchRule, relative: [UInt8]) {
        problems.report("watch \(rule.name): unable to watch or list directories whose path is longer than PATH_MAX (\(PATH_MAX) bytes); files below them are not handled (move them up the tree)",
                        example: LineEscaping.escaped(rule.absolute(relative).prefix(200)) + "...")
    }

    // MARK: Directories that could not be watched

    /// Subtrees that could not be watched are scanned this often instead, each pass limited
    /// to `fallbackBudget` so a huge tree cannot stall the watching queue; the next pass
    /// goes on where this one stopped. Each pass also tries to watch them again (the limit
    /// may have been raised, the permission granted).
    static let fallbackBudget: Duration = .milliseconds(500)

    /// 30 s; WATCHKEEPER_TEST_FALLBACK_INTERVAL shortens it for the tests (docs/testing.md).
    var fallbackInterval: Duration {
        if let text = state.environment["WATCHKEEPER_TEST_FALLBACK_INTERVAL"], case .success(let value) = DurationParser.parse(text) {
            return value
        }
        return .seconds(30)
    }

    private func armFallbackScan(_ rule: WatchRule) {
        guard rule.scans.fallbackTimer == nil, accepting else { return }
        let interval = fallbackInterval
        let timer = clock.makeTimer(owner: "watch \(rule.name)", target: "scan unwatched directories every \(interval.compactDescription)") { [unowned self] in
            self.fallbackScan(rule)
        }
        timer.schedule(at: clock.now + interval, repeating: interval)
        rule.scans.fallbackTimer = timer
    }

    func fallbackScan(_ rule: WatchRule) {
        guard accepting, !rule.scans.unwatchable.isEmpty, let root = rule.root else {
            rule.scans.fallbackTimer?.cancel()
            rule.scans.fallbackTimer = nil
            return
        }
        rule.counters.fallbackScans += 1
        let deadline = clock.now + Self.fallbackBudget
        let due = rule.scans.unwatchable
        rule.scans.unwatchable = []
        var stillUnwatched: [[UInt8]] = []
        var watchedAgain: [[UInt8]] = []
        defer {
            // One line per pass, not one per directory (451 lines after a watch-limit recovery).
            if let first = watchedAgain.first {
                logger.notice("watch \(rule.name): \(watchedAgain.count) director\(watchedAgain.count == 1 ? "y is" : "ies are") watched now (the first: \(LineEscaping.escaped(rule.absolute(first))))")
            }
        }
        var index = 0
        while index < due.count, clock.now < deadline {
            let relative = due[index]
            index += 1
            if addWatch(rule, relative: relative) {
                // Watchable again: its files are caught up through a walk that watches below it.
                rule.scans.unwatchable.removeAll { $0 == relative }
                watchedAgain.append(relative)
                addTree(rule, from: relative, emitFiles: true)
                continue
            }
            rule.scans.unwatchable.removeAll { $0 == relative }
            stillUnwatched.append(relative)
            let summary = TreeScanner(root: root).scan(from: [relative], until: deadline, descend: { rule.mayContainSelected(directory: $0) }) { path in
                if let event = rule.readyEvent, rule.selects(path) { self.settling.enqueue(rule, relative: path, event: event, fromScan: true) }
            }
            var skipped = summary.types
            skipped[.regular] = 0
            skipped[.directory] = 0
            rule.counters.skipped += skipped
        }
        // Not reached within the budget: first in line next time.
        rule.scans.unwatchable = stillUnwatched + Array(due[index...]) + rule.scans.unwatchable.filter { !stillUnwatched.contains($0) }
    }

    /// Does what the rule's TreeBackendChoice asked: true when the tree is on fanotify now.
    @discardableResult
    func take(_ step: TreeBackendChoice.Step, for rule: WatchRule) -> Bool {
        guard case .moveToFanotify(let why) = step else { return rule.backend.usesFanotify }
        guard let root = rule.root, let unmarked = backends.moveToFanotify(rule, why: why, mounts: state.mountTable()) else { return false }
        for (path, error) in unmarked {
            if let relative = relativePath(path, under: root) { reportWatchFailure(rule, relative: relative, error: error) }
        }
        return true
    }

    /// A file system mounted (or unmounted) at `relative` in a fanotify tree: marked, if
    /// local, or reported and scanned by the fallback like a directory inotify refused.
    func markMountPoint(_ rule: WatchRule, relative: [UInt8]) {
        if let error = backends.markMountPoint(rule, relative: relative, mounts: state.mountTable()) {
            reportWatchFailure(rule, relative: relative, error: error)
        }
    }

    // MARK: Listing a fanotify tree

    /// Events of the tree were lost (a directory handle that could not be resolved): its
    /// files are found by listing it again, unless a listing is under way already, which
    /// finds them too. Issue 36: the journal promised that rescan, and none ran.
    func rescanForMissedEvents(_ rule: WatchRule) {
        guard accepting, rule.scans.listing == nil else { return }
        rescan(rule)
    }

    /// Lists `relative` and below for the files already there (catch-up, a directory that
    /// came in, a rescan after an overflow) in slices of `listingSlice` on the watching
    /// queue, each followed by a pause as long: the mark hears every change meanwhile, so a
    /// tree of a million directories need not hold READY, events and the control socket
    /// for the seconds its listing takes. Depth first, a few directories at a time, so what
    /// is left to list stays small. A walk already under way takes the new start along.
    func listInSlices(_ rule: WatchRule, from relative: [UInt8]) {
        if rule.scans.listing != nil {
            rule.scans.listing!.pending.append(relative)
            return
        }
        rule.scans.listing = .init(pending: [relative], began: clock.now)
        armListing(rule, at: clock.now)
    }

    /// The listing's next slice, on a registered timer of the rule (the dump lists it, and
    /// unwatching the tree cancels it).
    private func armListing(_ rule: WatchRule, at instant: MonotonicInstant) {
        rule.arm(\.scans.listingTimer, on: clock, at: instant, target: "list a fanotify tree in slices of \(Self.listingSlice.compactDescription)") { [unowned self] in
            self.listSlice(rule)
        }
    }

    static let listingSlice: Duration = .milliseconds(50)
    /// Directories listed together (in parallel, as TreeScanner does from 64 up).
    static let listingBatch = 64

    private func listSlice(_ rule: WatchRule) {
        guard accepting, state.isCurrent(rule), var listing = rule.scans.listing, let root = rule.root else { return }
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
            rule.scans.listing = listing
            armListing(rule, at: clock.now + Self.listingSlice)
            return
        }
        rule.scans.listing = nil
        let took = clock.now - listing.began
        if listing.slices > 1 {
            logger.info("watch \(rule.name): listed \(listing.directories) directories of \(LineEscaping.escaped(root)) for the files already there in \(took.compactDescription) (\(listing.slices) slices; fanotify heard every change meanwhile)")
        }
    }

    /// A directory moved out of the tree (or within it, to be watched again at its new
    /// path): its watches would report paths that no longer belong to it.
    func dropSubtree(_ rule: WatchRule, relative: [UInt8]) {
        backends.tree(of: rule)?.unwatch(.rule(rule.name), under: relative)
    }

}
