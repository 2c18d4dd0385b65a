/// What a rule handled in this life and what it has in flight, by inode: a rescan, a
/// move within the tree, or a close that changed nothing does not run a file twice, and a
/// file renamed while its job waits follows that job's outcome. A value; the ledger holds
/// the rest across restarts.
struct RuleMemory {
    /// Files whose job succeeded in this life, by inode, with the form and path they had,
    /// until the ledger holds them: a rescan, or the same file moved within the tree after
    /// its job, is not run again.
    var handled: [InodeKey: HandledFile] = [:]
    /// Files handed to the engine and not back yet, by inode: a scan that finds one again
    /// does not run it twice, and a new name it is renamed to meanwhile waits for its outcome.
    var inFlight: [InodeKey: InFlightFile] = [:]
    static let handledLimit = 200_000

    /// Remembers a file handled successfully in this life; the memory is bounded (the
    /// ledger remembers the rest across restarts).
    mutating func remember(_ file: HandledFile) {
        if handled.count >= Self.handledLimit { handled.removeAll(keepingCapacity: true) }
        handled[file.current.inodeKey] = file
    }

    /// Handled successfully in this life in this exact form (the path follows it), or, in a
    /// polled tree (where no event says what was renamed), found under another name with only
    /// its change time moved: the ledger follows it there the next time a poll hands it on
    /// (WatchLedger.handledBefore).
    mutating func handledInThisLife(_ identity: FileIdentity, at relative: [UInt8], polled: Bool) -> Bool {
        guard let known = handled[identity.inodeKey] else { return false }
        if known.current.sameFile(as: identity) {
            if known.path != relative { handled[identity.inodeKey]?.path = relative }
            return true
        }
        return known.path != relative && polled && known.current.renamed(as: identity)
    }

    /// In a polled tree (no event says what was renamed), a file handled in this life found
    /// with only its change time moved, under another name, or at a name a poll saw hold
    /// another inode before (an exchange): that file, renamed. It is remembered there in its
    /// new form, and the form it had is returned, for the ledger to follow. Nil otherwise.
    mutating func renamedInAPolledTree(_ identity: FileIdentity, at relative: [UInt8], replacedAnother: Bool) -> HandledFile? {
        guard let known = handled[identity.inodeKey], !known.current.sameFile(as: identity), known.current.renamed(as: identity),
              known.path != relative || replacedAnother else { return nil }
        handled[identity.inodeKey] = HandledFile(admitted: known.admitted, current: identity, path: relative)
        return known
    }

    /// The ledger holds the file at `path` in form `identity` (its record, or a follow of it,
    /// committed): the reader finds it there now, and this life's memory of it can go, so a
    /// burst's 100,000 files are not kept until the daemon stops.
    mutating func ledgerHolds(_ identity: FileIdentity, at path: [UInt8]) {
        guard let known = handled[identity.inodeKey], known.path == path, known.current == identity else { return }
        handled[identity.inodeKey] = nil
        // Emptied, it also gives back the capacity the burst grew it to.
        if handled.isEmpty { handled = [:] }
    }

    /// The form a file's record is to carry: the one admitted, or what it became through the
    /// attribute changes followed while its job waited or ran.
    func recordedIdentity(of file: FileSubject) -> FileIdentity? {
        guard let identity = file.identity else { return nil }
        guard let entry = inFlight[identity.inodeKey], entry.identity == identity else { return identity }
        return entry.current
    }

    /// A file went to the engine.
    mutating func submitted(_ file: FileSubject) {
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
    mutating func followIfInFlight(_ identity: FileIdentity, at relative: [UInt8], event: WatchEvent) -> Bool {
        let key = identity.inodeKey
        guard let entry = inFlight[key], entry.current.renamed(as: identity) else { return false }
        inFlight[key]?.followers.append(.init(path: relative, event: event, identity: identity))
        return true
    }

    /// A file came back from the engine: when it was its inode's last submission, the
    /// names it was renamed to meanwhile are returned (to handle unless its job succeeded).
    mutating func returned(_ file: FileSubject) -> [InFlightFile.Follower] {
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
}
