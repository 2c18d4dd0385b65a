import Dispatch

/// Keeping a handled file's identity its own, on the watching queue: the renames and
/// attribute changes the watcher sees happen to a file it handled, with no write in between
/// (TrackedChanges), are followed in this life's memory and in the ledger, so that the next
/// catch-up, which runs every file that changed in any way since it was handled
/// (FileIdentity.sameFile, the change time included), does not run a file that was only
/// chmod'ed, touched by `unzip` or `rsync` after its close, or renamed within the tree
/// (docs/architecture.md, "File identity"). Confined to the watching queue.
// @unchecked Sendable: confined to the watching queue, as every part of the watcher.
final class HandledChanges: @unchecked Sendable {
    private let state: WatchingState
    private let ledger: WatchLedger
    private var clock: any WatchClock { state.clock }

    init(state: WatchingState, ledger: WatchLedger) {
        self.state = state
        self.ledger = ledger
    }

    /// IN_ATTRIB of a file: chmod, chown, `utime` (unzip and rsync set the mtime after the
    /// close), a link count. Followed if the file is one the rule holds a form of and was not
    /// written since: its content is what was handled, in a new form.
    func attributesChanged(_ rule: WatchRule, relative: [UInt8]) {
        guard rule.readyEvent != nil, rule.selects(relative), rule.settle.item(for: relative) == nil,
              !rule.changes.isWriting(relative), rule.polling.remoteTree(holding: relative) == nil,
              let status = FileStatus.of(rule.absolute(relative), followSymlinks: rule.settings.followSymlinks),
              status.type == .regular else { return }
        let seen = status.identity
        guard let known = knownForm(rule, at: relative, of: seen), known.identity != seen,
              known.identity.attributesChanged(as: seen) else { return }
        track(rule, .init(path: relative, from: known.from, known: known.identity, seen: seen, due: clock.now + TrackedChanges.confirmAfter))
    }

    /// A file moved within the tree from `from` to `to` (IN_MOVED_FROM and IN_MOVED_TO of one
    /// cookie, and not while it was being written): if it is a file the rule holds a form of
    /// at its old name, it is that file, renamed. True when it is (no job runs for it).
    func followRename(_ rule: WatchRule, from: [UInt8], to: [UInt8], identity: FileIdentity) -> Bool {
        guard rule.polling.remoteTree(holding: to) == nil, let known = knownForm(rule, at: from, of: identity),
              known.identity.renamed(as: identity) else { return false }
        rule.counters.renamesFollowed += 1
        track(rule, .init(path: to, from: known.from, known: known.identity, seen: identity, due: clock.now + TrackedChanges.confirmAfter))
        return true
    }

    /// The form the rule holds of the file `seen` at `relative`, and where it holds it: a
    /// change waiting to be confirmed there, the file in flight, this life's memory, or the
    /// ledger. The ledger only once the file's catch-up looked at it (nothing of the tree waits
    /// to be listed, and the name does not wait to settle), so a row is trusted only after
    /// catch-up found the file unchanged: a file rewritten while the daemon was down is
    /// never taken for the handled one by a chmod seen after the start.
    private func knownForm(_ rule: WatchRule, at relative: [UInt8], of seen: FileIdentity) -> (identity: FileIdentity, from: [UInt8])? {
        let key = seen.inodeKey
        if let waiting = rule.changes.takePending(at: relative, of: key) {
            return (waiting.known, waiting.from)
        }
        if let entry = rule.memory.inFlight[key] { return (entry.current, relative) }
        if let handled = rule.memory.handled[key], handled.path == relative { return (handled.current, relative) }
        guard rule.settings.catchUp, rule.scans.listing == nil, let entry = ledger.entry(rule, path: relative),
              entry.outcome == RunOutcome.ok.rawValue, entry.identity.inodeKey == key else { return nil }
        return (entry.identity, relative)
    }

    func track(_ rule: WatchRule, _ change: TrackedChanges.Change) {
        rule.changes.track(change)
        armChangesTimer(rule)
    }

    private func armChangesTimer(_ rule: WatchRule) {
        guard let next = rule.changes.nextDue else { return }
        rule.arm(\.changesTimer, on: clock, at: next, target: "confirm renames and attribute changes of handled files") { [unowned self] in
            self.confirmChanges(rule)
        }
    }

    /// Changes seen `TrackedChanges.confirmAfter` ago: taken where the file is still as it was
    /// seen, and nothing since wrote it, admitted it or waits to admit it.
    private func confirmChanges(_ rule: WatchRule) {
        guard state.isCurrent(rule) else {
            rule.changesTimer?.cancel()
            rule.changesTimer = nil
            return
        }
        for change in rule.changes.takeDue(now: clock.now) { confirm(change, rule: rule) }
        armChangesTimer(rule)
    }

    /// A clean stop, once every job has its record: what waits is confirmed now, so a file
    /// touched in the last second before the stop does not run again at the next start.
    func confirmChangesAtStop() {
        for rule in state.ordered {
            rule.changesTimer?.cancel()
            rule.changesTimer = nil
            for change in rule.changes.takeAll() { confirm(change, rule: rule) }
        }
    }

    private func confirm(_ change: TrackedChanges.Change, rule: WatchRule) {
        guard rule.settle.item(for: change.path) == nil, !rule.changes.isWriting(change.path),
              let status = FileStatus.of(rule.absolute(change.path), followSymlinks: rule.settings.followSymlinks),
              status.type == .regular, status.identity == change.seen else { return }
        rule.counters.changesFollowed += 1
        let key = change.seen.inodeKey
        if let entry = rule.memory.inFlight[key], entry.current == change.known {
            // Its record, when the job ends, carries the new form.
            rule.memory.inFlight[key]?.current = change.seen
            return
        }
        if let handled = rule.memory.handled[key], handled.current == change.known {
            rule.memory.handled[key] = HandledFile(admitted: handled.admitted, current: change.seen, path: change.path)
        }
        let name = rule.name
        ledger.follow(rule, from: change.from, to: change.path, known: change.known, now: change.seen) { [weak self] in
            self?.state.rules[name]?.memory.ledgerHolds(change.seen, at: change.path)
        }
    }
}
