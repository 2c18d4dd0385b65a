/// What admission decides about a regular file from what is already known of it, without
/// asking anyone (docs/architecture.md, "File identity"): a pure value's decision, which
/// FileSettling acts on. What needs a look elsewhere (a rename followed, this life's memory
/// under another name, the ledger) is left to the caller by `admitUnlessHandled`.
struct AdmissionRules {
    enum Verdict: Equatable {
        /// New content: admitted.
        case admit
        /// Found by a scan and changed within its window: it waits again, from this form.
        case stillChanging
        /// Found by a rescan after lost events (a rule without catch-up), unchanged since
        /// before they were lost: it was there before.
        case olderThanTheLostEvents
        /// A scan found a file whose job waits or runs in this form.
        case alreadyInFlight
        /// A close that changed nothing since the file was admitted.
        case unchangedSinceAdmitted
        /// A move, or a scan's find: new content only if the file was not handled in this
        /// form (the caller asks the renames followed, this life's memory and the ledger).
        case admitUnlessHandled
    }

    let event: WatchEvent
    let fromScan: Bool
    let pending: PendingFile
    /// The file's form now, as the rule knows it.
    let identity: FileIdentity

    /// `quiet`: unchanged for a scan's window by its change time (`quietFor`).
    func verdict(quiet: Bool, memory: RuleMemory) -> Verdict {
        if fromScan {
            // Nobody said the writer is done: it must have stopped changing for the window.
            let changing = pending.seen.map { $0 != identity } ?? !quiet
            if changing { return .stillChanging }
            if let since = pending.changedSince, max(identity.modifiedNanoseconds, identity.changedNanoseconds ?? .max) < since {
                return .olderThanTheLostEvents
            }
            if let inFlight = memory.inFlight[identity.inodeKey], inFlight.current.sameFile(as: identity) { return .alreadyInFlight }
            return .admitUnlessHandled
        }
        // A move is evidence of new content only if the file was not handled in this form: a
        // file renamed within the tree after its job is that file.
        if event == .movedIn { return .admitUnlessHandled }
        // A close is evidence of new content unless nothing at all changed since the file was
        // admitted (the change time included, which every write moves): a program that
        // renames its file into place and closes it afterwards, or opens it for writing and
        // writes nothing, does not run its job twice.
        let key = identity.inodeKey
        if memory.inFlight[key]?.identity == identity || memory.handled[key]?.admitted == identity { return .unchangedSinceAdmitted }
        return .admit
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
