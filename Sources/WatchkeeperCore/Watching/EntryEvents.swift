import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// What happens to entries of a watched directory, on the watching queue: a file's event
/// goes to its rule's admission (FileSettling), with the renames, links and moves that need
/// a look first; a directory's changes the watched tree (TreeScans). It keeps the renames
/// of directories between their IN_MOVED_FROM and IN_MOVED_TO. Confined to the watching queue.
// @unchecked Sendable: confined to the watching queue, as every part of the watcher.
final class EntryEvents: @unchecked Sendable {
    private let ledger: WatchLedger
    private let settling: FileSettling
    private let changes: HandledChanges
    private let scans: TreeScans
    private let pollers: RulePollers
    private let fleet: FleetInbox
    /// Directories renamed away from a rule (IN_MOVED_FROM) by cookie, until the matching
    /// IN_MOVED_TO says where in the tree they went.
    private var pendingMoves: [UInt32: (rule: String, from: [UInt8])] = [:]

    init(ledger: WatchLedger, settling: FileSettling, changes: HandledChanges, scans: TreeScans, pollers: RulePollers, fleet: FleetInbox) {
        self.ledger = ledger
        self.settling = settling
        self.changes = changes
        self.scans = scans
        self.pollers = pollers
        self.fleet = fleet
    }

    struct EntryKey: Hashable {
        let wd: WatchDescriptor
        let name: [UInt8]
    }

    /// Files whose writer's close is in the same read as the event: their IN_CREATE needs
    /// no look (the close is the evidence), which keeps a burst of written files off the
    /// created path. A read of a few events (a file's CREATE, MODIFY and CLOSE_WRITE, as one
    /// file arrives) is searched as it is; hashing every close's name into a set was about
    /// 6 % of the instructions from the read to the job's submit. A burst's read gets the set.
    struct ClosedInRead {
        private let changes: [WatchBackend.Change]
        private let keys: Set<EntryKey>?
        static let searchedUpTo = 16

        init(_ changes: [WatchBackend.Change]) {
            self.changes = changes
            guard changes.count > Self.searchedUpTo else {
                keys = nil
                return
            }
            var keys: Set<EntryKey> = []
            for case .entry(let event, _) in changes where Self.isClose(event) {
                keys.insert(EntryKey(wd: event.wd, name: event.name))
            }
            self.keys = keys
        }

        func contains(_ event: InotifyEvent) -> Bool {
            if let keys { return keys.contains(EntryKey(wd: event.wd, name: event.name)) }
            for case .entry(let other, _) in changes where Self.isClose(other) && other.wd == event.wd && other.name == event.name {
                return true
            }
            return false
        }

        private static func isClose(_ event: InotifyEvent) -> Bool {
            event.mask.contains(.closeWrite) && !event.isDirectory
        }
    }

    func handleEntry(_ event: InotifyEvent, in location: WatchTable<WatchOwner>.Location, rule: WatchRule, now: MonotonicInstant,
                     readAt: WallTime, closedNow: ClosedInRead) {
        let path = location.path(of: event.name)
        rule.counters.noteRawEvent(event, path: path, at: now, wallNow: readAt, keep: rule.settings.recentEvents)
        guard !event.name.isEmpty else { return } // about the directory itself
        if event.isDirectory {
            if rule.settings.recursive { handleDirectory(event, rule: rule, relative: path) }
            return
        }
        if event.mask.contains(.movedFrom) || event.mask.contains(.movedTo) { pollers.followRenameOnShare(rule, event, path: path) }
        let mask = event.mask
        if mask.contains(.modify) { rule.changes.written(path) }
        if mask.contains(.closeWrite) {
            rule.changes.closed(path)
            // An O_TMPFILE linked into place is closed under "#<inode>", not its new name.
            if let linked = rule.changes.linkedTmpfile(closedAs: event.name) {
                closedLinkedTmpfile(rule, relative: linked)
                return
            }
        }
        if mask.contains(.delete) { rule.changes.removed(path) }
        if mask.contains(.delete) || mask.contains(.movedFrom) {
            ledger.noteDeletion()
            if rule.settings.fleet == .one { fleet.fileGone(rule, relative: path) }
        }
        if mask.contains(.movedFrom) {
            rule.changes.movedFrom(path, cookie: event.cookie)
            if let waiting = rule.settle.remove(path: path) {
                // Renamed while it waits to settle: the wait moves to the new name, whatever the
                // rule's events (IN_MOVED_FROM and IN_MOVED_TO share a cookie).
                if rule.renamedWhileSettling.count >= Self.pendingMovesLimit { rule.renamedWhileSettling.removeAll() }
                rule.renamedWhileSettling[event.cookie] = waiting.event.event
            }
        }
        var renamedFrom: [UInt8]?
        if mask.contains(.movedTo) {
            switch movedIn(event, rule: rule, relative: path) {
            case .dealtWith: return
            case .toAdmit(let from): renamedFrom = from
            }
        }
        if mask.contains(.attrib) && !rule.settings.events.contains(.attrib) {
            changes.attributesChanged(rule, relative: path)
            return
        }
        if mask.contains(.modify) && !rule.settings.events.contains(.modified) { return }
        if mask.contains(.create) && !rule.settings.events.contains(.created) {
            if !closedNow.contains(event) { handleCreatedFile(rule, relative: path) }
            return
        }
        guard let watchEvent = rule.event(for: mask), rule.selects(path) else { return }
        rule.counters.matched += 1
        settling.enqueue(rule, relative: path, event: watchEvent, renamedFrom: renamedFrom)
    }

    /// A directory of a recursive rule's tree came, went or moved.
    private func handleDirectory(_ event: InotifyEvent, rule: WatchRule, relative path: [UInt8]) {
        if event.mask.contains(.movedFrom) {
            scans.dropSubtree(rule, relative: path)
            // A move out of every watched tree never gets its IN_MOVED_TO.
            if pendingMoves.count >= Self.pendingMovesLimit { pendingMoves.removeAll() }
            pendingMoves[event.cookie] = (rule.name, path)
        } else if event.mask.contains(.movedTo) {
            if let move = pendingMoves.removeValue(forKey: event.cookie), move.rule == rule.name {
                followMove(rule, from: move.from, to: path)
            }
            if rule.mayContainSelected(directory: path) { scans.addTree(rule, from: path, emitFiles: true) }
        } else if event.mask.contains(.create) {
            if rule.mayContainSelected(directory: path) { scans.addTree(rule, from: path, emitFiles: true) }
        } else if event.mask.contains(.delete) {
            scans.dropSubtree(rule, relative: path)
            ledger.noteDeletion()
        }
    }

    private enum MovedIn {
        /// A wait moved to the new name, or a rule without `moved_in` followed the rename.
        case dealtWith
        /// To admission as `moved_in`, with the name it had in this tree if the watcher saw the
        /// rename happen and the file was not being written: a handled file there is this
        /// file under a new name (TrackedChanges).
        case toAdmit(renamedFrom: [UInt8]?)
    }

    private func movedIn(_ event: InotifyEvent, rule: WatchRule, relative path: [UInt8]) -> MovedIn {
        let origin = rule.changes.movedTo(path, cookie: event.cookie)
        let renamedFrom = origin.flatMap { $0.writing ? nil : $0.path }
        if let renamedEvent = rule.renamedWhileSettling.removeValue(forKey: event.cookie) {
            guard rule.selects(path) else { return .dealtWith }
            rule.counters.renamesFollowed += 1
            rule.counters.matched += 1
            settling.enqueue(rule, relative: path, event: rule.event(for: event.mask) ?? renamedEvent)
            return .dealtWith
        }
        guard rule.event(for: event.mask) == nil else { return .toAdmit(renamedFrom: renamedFrom) }
        // Written under a temporary name and renamed into place: it arrives here, for a rule
        // that does not ask for moves too (its close, under the temporary name, was left out).
        if let origin, !origin.writing, rule.settings.filter.isTemporary(origin.path), let ready = rule.readyEvent, rule.selects(path) {
            rule.counters.matched += 1
            settling.enqueue(rule, relative: path, event: ready)
            return .dealtWith
        }
        followRename(rule, relative: path, from: renamedFrom)
        return .dealtWith
    }

    static let pendingMovesLimit = 4_096

    /// A rule without `moved_in`: a file renamed into its name while its job waits or runs
    /// still gets that job's outcome followed (a `.part` renamed before its job read it), and
    /// a handled file renamed within the tree is still the handled file under its new name.
    private func followRename(_ rule: WatchRule, relative: [UInt8], from: [UInt8]?) {
        guard let event = rule.readyEvent, rule.memory.inFlight.isEmpty == false || from != nil, rule.selects(relative),
              let status = FileStatus.of(rule.absolute(relative), followSymlinks: rule.settings.followSymlinks), status.type == .regular else { return }
        let identity = rule.polling.identity(of: status.identity, at: relative)
        if rule.followIfInFlight(identity, at: relative, event: event) { return }
        if let from { _ = changes.followRename(rule, from: from, to: relative, identity: identity) }
    }

    /// The close of an O_TMPFILE (`#<inode>`) linked into place at `relative` (linkat from
    /// /proc/self/fd/N, then close): the file is whole now, under the name it was linked to.
    private func closedLinkedTmpfile(_ rule: WatchRule, relative: [UInt8]) {
        guard rule.settings.events.contains(.closedWrite), rule.selects(relative) else { return }
        rule.counters.tmpfilesLinked += 1
        rule.counters.matched += 1
        settling.enqueue(rule, relative: relative, event: .closedWrite)
    }

    /// IN_CREATE of a file is only a name until its writer closes it, except for a hard link
    /// (`ln`, `cp -l`, maildir's link() into new/), which arrives whole and is never closed
    /// here. A file that has other links, or whose content is older than its last inode change
    /// (a link whose other name was removed at once: unlink moves the change time, not the
    /// modification time; a writer's every write moves both), waits like a file a scan found:
    /// a writer's close ends the wait at once, and with none it starts when unchanged for the
    /// scan's window. A file being written (one link, mtime = ctime) waits for its close.
    private func handleCreatedFile(_ rule: WatchRule, relative: [UInt8]) {
        guard rule.readyEvent != nil, rule.selects(relative),
              let status = FileStatus.of(rule.absolute(relative), followSymlinks: rule.settings.followSymlinks, generation: false),
              status.type == .regular else { return }
        let identity = status.identity
        // One link and no close yet: a file being written, or an O_TMPFILE linked into place,
        // whose close comes as "#<inode>" (TrackedChanges.linkedTmpfile), or came already.
        if status.links == 1 {
            if rule.changes.wasClosedAsTmpfile(inode: identity.inode) {
                closedLinkedTmpfile(rule, relative: relative)
                return
            }
            rule.changes.mayBeLinkedTmpfile(inode: identity.inode, at: relative)
        }
        let writtenBeforeItsLastChange = identity.size > 0 && identity.modifiedNanoseconds < identity.changedNanoseconds ?? .min
        guard status.links > 1 || writtenBeforeItsLastChange else { return }
        rule.counters.linksHandled += 1
        rule.counters.matched += 1
        settling.enqueue(rule, relative: relative, event: .created, fromScan: true)
    }

    /// A directory moved within the tree: the ledger follows it, so its files are found
    /// handled at their new paths instead of running again.
    private func followMove(_ rule: WatchRule, from: [UInt8], to: [UInt8]) {
        rule.counters.movesFollowed += 1
        ledger.moved(rule, from: from, to: to)
    }
}
