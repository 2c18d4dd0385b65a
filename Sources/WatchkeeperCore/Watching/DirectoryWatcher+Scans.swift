import Dispatch
import CWatchkeeperSystem
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Watching trees and scanning them: wherever events may have been missed (start-up,
/// a new or moved-in directory, an overflow, a directory over the watch limit, a mount),
/// the tree is walked, each directory watched before it is listed, and its regular files
/// go through the rule's settle queue.
extension DirectoryWatcher {
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
            let fresh = rule.listing == nil
            listInSlices(rule, from: relative)
            // A listing already going on (a new directory's) keeps running everything it finds.
            if fresh { rule.listing?.changedSince = changedSince }
            return
        }
        rule.rescanChangedSince = changedSince
        defer { rule.rescanChangedSince = nil }
        let summary = TreeScanner(root: root).scan(from: [relative], visit: { directory in
            self.treeBackend(of: rule)?.isWatched(.init(owner: .rule(rule.name), relative: directory)) == true || self.addWatch(rule, relative: directory)
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
            if !rule.unwatchable.contains(failure.directory) { rule.unwatchable.append(failure.directory) }
            armFallbackScan(rule)
        }
    }

    /// A file found by a scan: the rule's "ready" event, with the scan's minimum settle.
    func scanned(_ rule: WatchRule, relative: [UInt8]) {
        guard let event = rule.readyEvent, rule.selects(relative) else { return }
        rule.counters.matched += 1
        let changedSince = rule.backend.usesFanotify ? rule.listing?.changedSince : rule.rescanChangedSince
        enqueue(rule, relative: relative, event: event, fromScan: true, changedSince: changedSince)
    }

    /// Directories listed by one walk beyond which its garbage is handed back to the kernel.
    static let trimAfterDirectories = 1_000

    /// One directory watched; false (and a report) when it could not be.
    func addWatch(_ rule: WatchRule, relative: [UInt8]) -> Bool {
        guard let backend = treeBackend(of: rule) else { return false }
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
        if !rule.unwatchable.contains(relative) { rule.unwatchable.append(relative) }
        armFallbackScan(rule)
    }

    /// A path longer than PATH_MAX can be neither watched nor listed by name, now or by a
    /// later scan: said as such, with no promise of a fallback scan.
    private func reportTooDeep(_ rule: WatchRule, relative: [UInt8]) {
        problems.report("watch \(rule.name): unable to watch or list directories whose path is longer than PATH_MAX (\(PATH_MAX) bytes); files below them are not handled (move them up the tree)",
                        example: LineEscaping.escaped(rule.absolute(relative).prefix(200)) + "...")
    }

    // MARK: Overflow

    /// IN_Q_OVERFLOW: the kernel dropped events. Every tree is scanned again; files not
    /// handled yet in the form they have now get their job, so nothing is lost. A rule
    /// without catch-up has no ledger to tell what was there before: it runs only the files
    /// changed since `lostSince` (every event before it was read, DirectoryWatcher.handle),
    /// less a second for the read and the file system's coarse clock.
    func overflowed(_ source: WatchBackendKind, lostSince: WallTime) {
        overflowsTotal += 1
        switch source {
        case .inotify:
            // The instance's queue was sized when it was made; the sysctl may have changed since.
            let size = backends.inotifyQueueSize
            logger.warning("inotify event queue overflowed (\(overflowsTotal) time(s) so far; its size: fs.inotify.max_queued_events=\(size)); rescanning every tree watched with inotify")
        case .fanotify:
            logger.warning("fanotify event queue overflowed (\(overflowsTotal) time(s) so far; its size: fs.fanotify.max_queued_events=\(FanotifyBackend.sysctl("max_queued_events") ?? "16384")); rescanning every tree watched with fanotify")
        }
        for name in order {
            // Only the trees whose events were lost: the other backend's are intact.
            guard let rule = rules[name], !rule.isMissing, rule.backend.backend == source else { continue }
            rule.counters.overflows += 1
            rescan(rule, changedSince: rule.settings.catchUp ? nil : (lostSince.nanosecondsSinceEpoch ?? 0) - 1_000_000_000)
        }
    }

    // MARK: Directories that could not be watched

    /// Subtrees that could not be watched are scanned this often instead, each pass limited
    /// to `fallbackBudget` so a huge tree cannot stall the watching queue; the next pass
    /// goes on where this one stopped. Each pass also tries to watch them again (the limit
    /// may have been raised, the permission granted).
    static let fallbackBudget: Duration = .milliseconds(500)

    /// 30 s; WATCHKEEPER_TEST_FALLBACK_INTERVAL shortens it for the tests (docs/testing.md).
    var fallbackInterval: Duration {
        if let text = context.daemonEnvironment["WATCHKEEPER_TEST_FALLBACK_INTERVAL"], case .success(let value) = DurationParser.parse(text) {
            return value
        }
        return .seconds(30)
    }

    private func armFallbackScan(_ rule: WatchRule) {
        guard rule.fallbackTimer == nil, accepting else { return }
        let interval = fallbackInterval
        let timer = clock.makeTimer(owner: "watch \(rule.name)", target: "scan unwatched directories every \(interval.compactDescription)") { [unowned self] in
            self.fallbackScan(rule)
        }
        timer.schedule(at: clock.now + interval, repeating: interval)
        rule.fallbackTimer = timer
    }

    func fallbackScan(_ rule: WatchRule) {
        guard accepting, !rule.unwatchable.isEmpty, let root = rule.root else {
            rule.fallbackTimer?.cancel()
            rule.fallbackTimer = nil
            return
        }
        rule.counters.fallbackScans += 1
        let deadline = clock.now + Self.fallbackBudget
        let due = rule.unwatchable
        rule.unwatchable = []
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
                rule.unwatchable.removeAll { $0 == relative }
                watchedAgain.append(relative)
                addTree(rule, from: relative, emitFiles: true)
                continue
            }
            rule.unwatchable.removeAll { $0 == relative }
            stillUnwatched.append(relative)
            let summary = TreeScanner(root: root).scan(from: [relative], until: deadline, descend: { rule.mayContainSelected(directory: $0) }) { path in
                if let event = rule.readyEvent, rule.selects(path) { self.enqueue(rule, relative: path, event: event, fromScan: true) }
            }
            var skipped = summary.types
            skipped[.regular] = 0
            skipped[.directory] = 0
            rule.counters.skipped += skipped
        }
        // Not reached within the budget: first in line next time.
        rule.unwatchable = stillUnwatched + Array(due[index...]) + rule.unwatchable.filter { !stillUnwatched.contains($0) }
    }

    // MARK: Mounts

    /// A file system mounted on (or unmounted from) a watched directory or one above a
    /// root: the old watches see the covered directory, so the subtree is watched again at
    /// its path and its files caught up.
    func mountsChanged(_ change: MountChange) {
        let points = change.addedMountPoints.union(change.removedMountPoints)
        for name in order {
            guard let rule = rules[name], let root = rule.root else { continue }
            for point in points {
                if point == root || (root.starts(with: point) && (point == [UInt8(ascii: "/")] || root.count > point.count && root[point.count] == UInt8(ascii: "/"))) {
                    // On the root or above it: the root path may now be another directory.
                    let verb = change.addedMountPoints.contains(point) ? "mounted on" : "unmounted from"
                    logger.notice("watch \(rule.name): a file system was \(verb) \(LineEscaping.escaped(point)); watching \(rule.settings.path) again and catching up its files")
                    unwatch(rule)
                    rule.root = nil
                    watchRoot(rule, catchUp: true)
                    break
                } else if point.count > root.count, point.starts(with: root), point[root.count] == UInt8(ascii: "/"), rule.settings.recursive {
                    let relative = Array(point[(root.count + 1)...])
                    let verb = change.addedMountPoints.contains(point) ? "mounted on" : "unmounted from"
                    remount(rule, at: relative, why: "a file system was \(verb) \(LineEscaping.escaped(point))")
                }
            }
        }
    }

    /// Watches `relative` and below again, and catches up their files.
    func remount(_ rule: WatchRule, at relative: [UInt8], why: String) {
        guard !rule.isMissing else { return }
        if relative.isEmpty {
            unwatch(rule)
            rule.root = nil
            logger.notice("watch \(rule.name): \(why); watching \(rule.settings.path) again and catching up its files")
            watchRoot(rule, catchUp: true)
            return
        }
        logger.notice("watch \(rule.name): \(why); watching it again and catching up its files")
        if rule.settings.method == .poll {
            // Polled from the root down: a new poll of the whole tree catches it up.
            startPolling(rule)
            return
        }
        refreshPolling(rule)
        dropSubtree(rule, relative: relative)
        if rule.backend.usesFanotify { markMountPoint(rule, relative: relative) }
        addTree(rule, from: relative, emitFiles: true)
    }
}
