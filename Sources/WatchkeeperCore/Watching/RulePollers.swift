import Dispatch
import Logging
import SystemPackage

/// Polling, on the watching queue: the trees of a rule that inotify cannot fully see (a
/// network or FUSE file system under `method = "auto"`) or that the rule asks to poll
/// (`method = "poll"`) each get a TreePoller on a queue of its own. What a poller finds
/// settled comes here and goes through the same admission as an event (this life's memory,
/// the ledger, files in flight), so a file found both ways runs once. Confined to the
/// watching queue.
// @unchecked Sendable: confined to the watching queue, as every part of the watcher.
final class RulePollers: @unchecked Sendable {
    private let state: WatchingState
    private let ledger: WatchLedger
    private let settling: FileSettling
    /// Notices a polled file system that stopped answering.
    private var monitor: (any WatchTimer)?
    private var clock: any WatchClock { state.clock }
    private var logger: Logger { state.logger }
    private var accepting: Bool { state.accepting }

    init(state: WatchingState, ledger: WatchLedger, settling: FileSettling) {
        self.state = state
        self.ledger = ledger
        self.settling = settling
    }

    /// Starts polling the rule's trees that need it, anew (after the root was found, a
    /// mount changed, the root came back). Says once per tree why it is polled.
    func startPolling(_ rule: WatchRule) {
        stopPolling(rule)
        guard accepting, let root = rule.root else { return }
        let table = state.mountTable()
        let trees = PolledTree.trees(root: root, recursive: rule.settings.recursive, method: rule.settings.method, mounts: table)
        rule.polling.trees = trees
        for tree in trees {
            let note = "\(String(decoding: tree.mountPoint, as: UTF8.self)) \(tree.fileSystemType) \(String(decoding: tree.relative, as: UTF8.self))"
            if rule.polling.notesSaid.insert(note).inserted {
                let path = LineEscaping.escaped(rule.absolute(tree.relative))
                let how = rule.settings.method == .poll
                    ? "polling it every \(rule.settings.pollInterval.compactDescription) (poll_settle \(rule.settings.pollSettle.compactDescription)), without inotify"
                    : "polling it every \(rule.settings.pollInterval.compactDescription) (poll_settle \(rule.settings.pollSettle.compactDescription)) as well as watching it with inotify"
                let what = rule.settings.method == .poll
                    ? "is on \(tree.fileSystemType) and the rule says method = \"poll\""
                    : "is on \(tree.fileSystemType) (\(LineEscaping.escaped(tree.source))), \(tree.reason)"
                logger.notice("watch \(rule.name): \(path) \(what): \(how)")
                if let warning = FilesystemClass.settleWarning(type: tree.fileSystemType, settle: rule.settings.pollSettle) {
                    logger.warning("watch \(rule.name): \(path): \(warning)")
                }
            }
            let filter = rule.settings.filter
            let recursive = rule.settings.recursive
            let poller = TreePoller(
                settings: .init(root: root, tree: tree, interval: rule.settings.pollInterval, settle: rule.settings.pollSettle,
                                recursive: recursive, followSymlinks: rule.settings.followSymlinks, catchUp: rule.settings.catchUp,
                                selectsAll: filter.include.isEmpty && filter.exclude.isEmpty,
                                sweepEvery: tree.isRemote ? TreePoller.remoteSweepEvery : 1),
                name: rule.name, sources: state.sources,
                selects: { filter.selects($0) },
                descend: { recursive && filter.mayContainSelected(directory: $0) },
                deliver: { [weak self] poller, settled in
                    // In slices, so a catch-up of 100,000 files lets events in between.
                    for start in stride(from: 0, to: settled.count, by: Self.pollDeliverySlice) {
                        let slice = Array(settled[start..<min(settled.count, start + Self.pollDeliverySlice)])
                        self?.state.queue.async { [weak self] in self?.polled(slice, from: poller, rule: rule) }
                    }
                },
                report: { [weak self] poller, report in
                    self?.state.queue.async { [weak self] in self?.pollReported(report, from: poller, rule: rule) }
                })
            rule.polling.pollers.append(poller)
            poller.start()
        }
        armPollMonitorIfNeeded()
    }

    static let pollDeliverySlice = 1_024

    func stopPolling(_ rule: WatchRule) {
        for poller in rule.polling.pollers { poller.stop() }
        rule.polling.pollers = []
        rule.polling.trees = []
    }

    /// A mount changed below a root: the trees to poll may be others now.
    func refreshPolling(_ rule: WatchRule) {
        guard let root = rule.root, let mounts = state.mounts else { return }
        let trees = PolledTree.trees(root: root, recursive: rule.settings.recursive, method: rule.settings.method, mounts: mounts.mounts)
        if trees != rule.polling.trees { startPolling(rule) }
    }

    /// Files a poller saw unchanged in two looks: admitted as a scan's find would be, with
    /// the poller's look as the stat (none is made here: the file system may hang).
    private func polled(_ settled: [TreePoller.Settled], from poller: TreePoller, rule: WatchRule) {
        guard accepting, state.isCurrent(rule), rule.polling.pollers.contains(where: { $0 === poller }),
              let event = rule.readyEvent, let root = rule.root else { return }
        var admitted: [FileSubject] = []
        for file in settled {
            guard rule.selects(file.relative) else { continue }
            rule.counters.polledFiles += 1
            // An event for it waits to settle (this host wrote it): that wait decides.
            if rule.settle.item(for: file.relative) != nil {
                rule.counters.duplicates += 1
                continue
            }
            // The poller's identity, but with the path the file had before a rename followed.
            let identity = rule.polling.identity(of: file.status, at: file.relative)
            if let inFlight = rule.memory.inFlight[identity.inodeKey], inFlight.identity.sameFile(as: identity) {
                rule.counters.duplicates += 1
                continue
            }
            if handledAlready(file, as: identity, rule: rule) {
                rule.counters.duplicates += 1
                continue
            }
            rule.counters.matched += 1
            admitted.append(FileSubject(path: rule.absolute(file.relative), rootLength: root.count, event: event, identity: identity,
                                        eventAt: file.firstSeen, followsSymlinks: rule.settings.followSymlinks,
                                        checksBeforeStart: !poller.settings.tree.isRemote))
        }
        settling.submit(admitted, rule: rule)
    }

    /// Handled in this form, in this life or an earlier one; or, since no event says what was
    /// renamed in a polled tree, the handled file renamed: found under another name, or at a
    /// name that held another inode at the poll before (renameat2's exchange), with only its
    /// change time moved. The ledger follows such a file, behind its record (submitted
    /// before this life's memory knew it).
    private func handledAlready(_ file: TreePoller.Settled, as identity: FileIdentity, rule: WatchRule) -> Bool {
        if let known = rule.memory.renamedInAPolledTree(identity, at: file.relative, replacedAnother: file.replacedAnother) {
            rule.counters.movesFollowed += 1
            let name = rule.name
            ledger.follow(rule, from: known.path, to: file.relative, known: known.current, now: identity) { [weak self] in
                self?.state.rules[name]?.memory.ledgerHolds(identity, at: file.relative)
            }
            return true
        }
        return rule.handledInThisLife(identity, at: file.relative)
            || ledger.handledBefore(rule, relative: file.relative, identity: identity, mayHaveMoved: true, replacedAnother: file.replacedAnother)
    }

    private func pollReported(_ report: TreePoller.Report, from poller: TreePoller, rule: WatchRule) {
        guard state.isCurrent(rule), rule.polling.pollers.contains(where: { $0 === poller }) else { return }
        let tree = LineEscaping.escaped(rule.absolute(poller.settings.tree.relative))
        switch report {
        case .unreachable(let path, let error):
            let interval = rule.settings.pollInterval
            logger.warning("watch \(rule.name): unable to poll \(tree): \(error) (\(error.symbolicName)) at \(LineEscaping.escaped(path)); trying again after \(interval.compactDescription), then less often, up to every \(TreePoller.longestPause(interval: interval).compactDescription), and the files written there meanwhile are handled once it answers")
        case .reachableAgain(let after):
            logger.notice("watch \(rule.name): \(tree) answers again after \(after.compactDescription); the files written there meanwhile are handled as they settle")
        case .skipped(let counts):
            rule.counters.skipped += counts
        case .moved(let from, let to):
            if rule.polling.followMoveOnShare(from: from, to: to) {
                logger.debug("watch \(rule.name): \(LineEscaping.escaped(rule.absolute(from))) was renamed to \(LineEscaping.escaped(rule.absolute(to))) on \(poller.settings.tree.fileSystemType); followed as the same file")
            }
        }
    }

    /// A file renamed on this host within a polled FUSE tree (its identity hashes the path):
    /// IN_MOVED_FROM and IN_MOVED_TO, paired by cookie, make the new path keep the identity
    /// of the old, so a job that moves its file into `done/` does not run it again.
    func followRenameOnShare(_ rule: WatchRule, _ event: InotifyEvent, path: [UInt8]) {
        guard !rule.polling.trees.isEmpty else { return }
        if event.mask.contains(.movedFrom), rule.polling.remoteTree(holding: path) != nil {
            if rule.polling.renamesOnShare.count >= EntryEvents.pendingMovesLimit { rule.polling.renamesOnShare.removeAll() }
            rule.polling.renamesOnShare[event.cookie] = path
        } else if event.mask.contains(.movedTo), let from = rule.polling.renamesOnShare.removeValue(forKey: event.cookie) {
            rule.polling.followMoveOnShare(from: from, to: path)
        }
    }

    // MARK: A file system that stopped answering

    /// Every 5 s while anything is polled: a poller that has waited `PollProgress.stallAfter`
    /// for one directory or stat is said once in the log (its queue is stuck in the kernel;
    /// nothing else is), and again when it answers.
    func armPollMonitorIfNeeded() {
        guard monitor == nil, accepting, state.rules.values.contains(where: { !$0.polling.pollers.isEmpty }) else { return }
        let timer = clock.makeTimer(owner: "watching", target: "polled trees: notice one that stopped answering (every 5s)") { [unowned self] in
            self.checkPollers()
        }
        timer.schedule(at: clock.now + .seconds(5), repeating: .seconds(5))
        monitor = timer
    }

    private func checkPollers() {
        let now = clock.now
        var anyPollers = false
        for rule in state.ordered {
            for poller in rule.polling.pollers {
                anyPollers = true
                let progress = poller.progress.withLock { $0 }
                let tree = LineEscaping.escaped(rule.absolute(poller.settings.tree.relative))
                if let since = progress.busySince, now - since >= PollProgress.stallAfter {
                    guard !poller.stallReported else { continue }
                    poller.stallReported = true
                    logger.warning("watch \(rule.name): polling \(tree) has waited \((now - since).compactDescription) for the file system (at \(LineEscaping.escaped(rule.absolute(progress.directory)))): its server may not be answering. Only this poll waits; it goes on when the file system answers")
                } else if poller.stallReported {
                    poller.stallReported = false
                    logger.notice("watch \(rule.name): polling \(tree) goes on: the file system answered")
                }
            }
        }
        if !anyPollers { stop() }
    }

    /// The drain: the monitor goes (each rule's pollers are stopped with its tree).
    func stop() {
        monitor?.cancel()
        monitor = nil
    }
}
