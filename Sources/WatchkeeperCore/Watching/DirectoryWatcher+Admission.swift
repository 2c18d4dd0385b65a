import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// From a file event to an admitted file: the settle window (a scan's find waits until it
/// stops changing), and admission: a regular file, and, where the event is no evidence of
/// new content, not handled before in this form (docs/architecture.md, "File identity").
extension DirectoryWatcher {
    /// Files found by a scan may still be open for writing (a scan cannot tell): they wait
    /// this long, and a close event for the same path meanwhile joins the same job.
    static let scanSettle: Duration = .seconds(1)

    func enqueue(_ rule: WatchRule, relative: [UInt8], event: WatchEvent, fromScan: Bool = false, renamedFrom: [UInt8]? = nil,
                 changedSince: Int64? = nil) {
        let pending = PendingFile(event: event, renamedFrom: renamedFrom, changedSince: changedSince)
        guard accepting else { return }
        let now = clock.now
        // A writer's close (or a move in) is evidence that the file is whole: a wait that only
        // a scan started (it cannot tell) ends, and the file goes on with the rule's window.
        if !fromScan, let waiting = rule.settle.item(for: relative), waiting.fromScan {
            rule.settle.remove(path: relative)
        }
        let window = settleWindow(rule, fromScan: fromScan)
        if window == .zero && rule.settle.item(for: relative) == nil {
            switch admit(rule, relative: relative, pending: pending, fromScan: false, eventAt: now) {
            case .admitted(let subject): submit([.file(subject)], rule: rule)
            case .skipped, .stillChanging: break
            }
            return
        }
        rule.settle.add(path: relative, event: pending, deadline: now + window, fromScan: fromScan)
        armSettleTimer(rule)
    }

    func settleWindow(_ rule: WatchRule, fromScan: Bool) -> Duration {
        fromScan ? max(rule.settings.settle, Self.scanSettle) : rule.settings.settle
    }

    func armSettleTimer(_ rule: WatchRule) {
        guard let next = rule.settle.nextDeadline else { return }
        arm(\.settleTimer, of: rule, at: next, target: "settle \(rule.settings.settle.compactDescription)") { [unowned self] in
            self.settleDue(rule)
        }
    }

    /// One of a rule's timers, made the first time it is needed (registered with its
    /// purpose), set to fire at `instant`.
    func arm(_ timer: ReferenceWritableKeyPath<WatchRule, (any WatchTimer)?>, of rule: WatchRule, at instant: MonotonicInstant,
             target: String, fire: @escaping () -> Void) {
        if rule[keyPath: timer] == nil {
            rule[keyPath: timer] = clock.makeTimer(owner: "watch \(rule.name)", target: target, handler: fire)
        }
        rule[keyPath: timer]?.schedule(at: instant)
    }

    /// Starts every path whose window has ended, and re-arms for the next one.
    private func settleDue(_ rule: WatchRule) {
        // A batch also takes the files whose windows end a moment later (files written
        // together settle microseconds apart), up to a quarter of the window or 250 ms.
        let lookahead = rule.settings.batch ? min(rule.settings.settle / 4, .milliseconds(250)) : .zero
        let now = clock.now
        let due = rule.settle.takeDue(now: now, lookahead: lookahead)
        var admitted: [FileSubject] = []
        admitted.reserveCapacity(due.count)
        for item in due {
            // A window ends its length after the last event (or the scan that found the file).
            let window = settleWindow(rule, fromScan: item.fromScan)
            switch admit(rule, relative: item.path, pending: item.event, fromScan: item.fromScan, eventAt: item.deadline - window) {
            case .admitted(let subject):
                admitted.append(subject)
            case .skipped:
                break
            case .stillChanging(let seen):
                rule.counters.scanWaitsRestarted += 1
                rule.settle.add(path: item.path, event: PendingFile(event: item.event.event, seen: seen), deadline: now + window, fromScan: true)
            }
        }
        submit(admitted, rule: rule)
        armSettleTimer(rule)
    }

    enum Admission {
        case admitted(FileSubject)
        /// Gone, not a regular file, handled already, or waiting for its old name's job.
        case skipped
        /// Found by a scan and changed within its window: it waits again, from this form.
        case stillChanging(FileIdentity)
    }

    /// Whether a file is to be handled now: it still exists (unless the event says it went),
    /// is a regular file (a FIFO would block the job, a planted link would lead a root job
    /// elsewhere), and, where it is no evidence of new content (a scan, a move), was not
    /// handled before in this exact form (docs/architecture.md, "File identity").
    func admit(_ rule: WatchRule, relative: [UInt8], pending: PendingFile, fromScan: Bool, eventAt: MonotonicInstant) -> Admission {
        let absolute = rule.absolute(relative)
        let rootLength = absolute.count - relative.count - (relative.isEmpty ? 0 : 1)
        let event = pending.event
        let follows = rule.settings.followSymlinks
        guard event != .deleted && event != .movedOut else {
            return .admitted(FileSubject(path: absolute, rootLength: rootLength, event: event, identity: nil, eventAt: eventAt,
                                         followsSymlinks: follows))
        }
        guard let status = FileStatus.of(absolute, followSymlinks: follows) else { return .skipped } // gone already
        guard status.type == .regular else {
            rule.counters.skipped[status.type] += 1
            return .skipped
        }
        let identity = rule.polling.identity(of: status.identity, at: relative)
        if fromScan {
            // Nobody said the writer is done: it must have stopped changing for the window.
            let changing = pending.seen.map { $0 != identity } ?? !Self.quietFor(settleWindow(rule, fromScan: true), identity, now: clock.wallNow)
            if changing { return .stillChanging(identity) }
            if let since = pending.changedSince, max(identity.modifiedNanoseconds, identity.changedNanoseconds ?? .max) < since {
                // Without catch-up, a rescan after lost events runs only what they could have been.
                rule.counters.rescanOlderSkipped += 1
                return .skipped
            }
            if let inFlight = rule.memory.inFlight[identity.inodeKey], inFlight.current.sameFile(as: identity) {
                rule.counters.duplicates += 1
                return .skipped
            }
        }
        if fromScan || event == .movedIn {
            // A move (or a scan's find) is evidence of new content only if the file was not
            // handled in this form: a file renamed within the tree after its job (a rename
            // the watcher saw) is that file. Renamed while its job waits or runs: it is
            // handled here if that job does not succeed (a `.part` renamed to `.dat` before
            // its job could read it). Anything else must be unchanged, its change time too.
            if event == .movedIn && rule.followIfInFlight(identity, at: relative, event: event) { return .skipped }
            if event == .movedIn, let from = pending.renamedFrom, followRename(rule, from: from, to: relative, identity: identity) {
                rule.counters.duplicates += 1
                return .skipped
            }
            if rule.handledInThisLife(identity, at: relative)
                || ledger.handledBefore(rule, relative: relative, identity: identity, mayHaveMoved: true) {
                rule.counters.duplicates += 1
                return .skipped
            }
        }
        if !fromScan && event != .movedIn {
            // A close is evidence of new content unless nothing at all changed since the file
            // was admitted (the change time included, which every write moves): a program that
            // renames its file into place and closes it afterwards, or opens it for writing
            // and writes nothing, does not run its job twice.
            let key = identity.inodeKey
            if rule.memory.inFlight[key]?.identity == identity || rule.memory.handled[key]?.admitted == identity {
                rule.counters.duplicates += 1
                return .skipped
            }
        }
        // Its job records the form it has now: a change seen before is void.
        rule.changes.admitted(relative)
        return .admitted(FileSubject(path: absolute, rootLength: rootLength, event: event, identity: identity, eventAt: eventAt,
                                     followsSymlinks: follows, checksBeforeStart: rule.polling.remoteTree(holding: relative) == nil))
    }

    /// Neither written nor renamed, chmod'ed or touched for `window` (by the change time,
    /// which nobody can set back): a scan's find is whole as far as anyone can tell. A change
    /// time in the future (the clock was set back) is not trusted: the file waits one more
    /// window and must then be unchanged.
    static func quietFor(_ window: Duration, _ identity: FileIdentity, now wallNow: WallTime) -> Bool {
        guard let now = wallNow.nanosecondsSinceEpoch, let changed = identity.changedNanoseconds else { return true }
        let latest = max(changed, identity.modifiedNanoseconds)
        return latest <= now && now - latest >= window.nanosecondsClamped
    }
}
