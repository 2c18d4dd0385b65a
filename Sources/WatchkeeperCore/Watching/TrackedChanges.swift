// What one watch rule saw happen to files that changes how they look but not what they
// hold: the bookkeeping only, a value with no clock and no stat (the caller passes instants
// and does the looking). docs/architecture.md, "File identity".

/// The changes a rule follows between a file's handling and the next catch-up, so that the
/// identity the daemon holds for a handled file (this life's memory, the ledger) stays the
/// file's own: a chmod, a `utime` after the close (unzip, rsync), a rename within the tree.
///
/// - `writing`: names with an IN_MODIFY and no IN_CLOSE_WRITE since. An attribute change of
///   such a name may come with new content (`cp -p` writes, sets the mtime back, then
///   closes), so it is not followed; its close is evidence and runs the file anyway.
/// - `renames`: IN_MOVED_FROM by cookie, until the IN_MOVED_TO says where the file went
///   (and whether it was being written).
/// - `pending`: followed changes waiting to be confirmed. A stat may come later than the
///   event it answers, after a write the daemon has not heard of yet; so a change is taken
///   only once the file stayed as it was seen, with no write or admission in between, for
///   `confirmAfter` (`HandledChanges.confirmChanges`).
/// - `tmpfiles`: files that appeared with one link and no close, by inode: an O_TMPFILE
///   linked into place (linkat from /proc/self/fd/N), whose close the kernel reports under
///   the name `#<inode>`.
struct TrackedChanges {
    /// A change seen and waiting to be confirmed.
    struct Change: Equatable {
        /// Where the file is now (relative to the root).
        let path: [UInt8]
        /// Where the form `known` was held: the same path, or the name it was renamed from.
        let from: [UInt8]
        /// The form the daemon holds (memory or ledger) before the change.
        let known: FileIdentity
        /// The form seen after it, which must still be the file's when it is confirmed.
        var seen: FileIdentity
        var due: MonotonicInstant
    }

    static let confirmAfter: Duration = .seconds(1)
    /// Names being written beyond which no attribute change is followed (until every one
    /// was closed): a bounded memory, and never a change taken for one that might write.
    static let writingLimit = 65_536
    static let renamesLimit = 4_096
    static let pendingLimit = 65_536
    static let tmpfilesLimit = 4_096

    private(set) var writing: Set<[UInt8]> = []
    /// Set when `writing` filled up: until it is empty again, every name counts as written.
    private(set) var writingOverflowed = false
    private var renames: [UInt32: (path: [UInt8], writing: Bool)] = [:]
    private(set) var pending: [[UInt8]: Change] = [:]
    private var tmpfiles: [UInt64: [UInt8]] = [:]
    private var tmpfileInodes: [[UInt8]: UInt64] = [:]
    /// `#<inode>` closes that came before the IN_CREATE of the name they were linked to
    /// (fanotify merges the close into the tmpfile's earlier MODIFY event).
    private var closedTmpfiles: Set<UInt64> = []
    /// Changes dropped because `pendingLimit` was reached (their files may run again after
    /// a restart): for the dump.
    private(set) var dropped: UInt64 = 0

    func isWriting(_ path: [UInt8]) -> Bool {
        writingOverflowed || writing.contains(path)
    }

    /// IN_MODIFY: the content changes; a change seen before it is void.
    mutating func written(_ path: [UInt8]) {
        pending[path] = nil
        guard !writingOverflowed else { return }
        if writing.count >= Self.writingLimit {
            writingOverflowed = true
            writing = []
            return
        }
        writing.insert(path)
    }

    /// IN_CLOSE_WRITE: the writer is done; the close is evidence of its own.
    mutating func closed(_ path: [UInt8]) {
        writing.remove(path)
        if writingOverflowed && writing.isEmpty { writingOverflowed = false }
        forgetTmpfile(at: path)
    }

    /// IN_DELETE: nothing there any more.
    mutating func removed(_ path: [UInt8]) {
        writing.remove(path)
        pending[path] = nil
        forgetTmpfile(at: path)
    }

    /// IN_MOVED_FROM of a file: its name is free, and the cookie says where it went.
    mutating func movedFrom(_ path: [UInt8], cookie: UInt32) {
        let wasWriting = isWriting(path)
        writing.remove(path)
        if renames.count >= Self.renamesLimit { renames.removeAll() }
        renames[cookie] = (path, wasWriting)
    }

    /// IN_MOVED_TO of a file: the name it had in this rule's tree, if the rename is known,
    /// and whether it was being written (then it still is, under the new name).
    mutating func movedTo(_ path: [UInt8], cookie: UInt32) -> (path: [UInt8], writing: Bool)? {
        pending[path] = nil
        guard let origin = renames.removeValue(forKey: cookie) else { return nil }
        if origin.writing && !writingOverflowed { writing.insert(path) }
        return origin
    }

    /// A change the daemon saw, to be confirmed at `due`: a later change of the same file
    /// keeps the form held before the first (`known`, `from`) and the latest form seen.
    mutating func track(_ change: Change) {
        if pending[change.path] == nil && pending.count >= Self.pendingLimit {
            dropped += 1
            return
        }
        pending[change.path] = change
    }

    /// The change of the file `key` waiting at `path`, taken off the list (a later change
    /// goes on from there). Another file's change there stays: an exchange's other half.
    mutating func takePending(at path: [UInt8], of key: InodeKey) -> Change? {
        guard let change = pending[path], change.seen.inodeKey == key else { return nil }
        pending[path] = nil
        return change
    }

    /// The file at `path` was admitted: its job records the form it has then.
    mutating func admitted(_ path: [UInt8]) {
        if !pending.isEmpty { pending[path] = nil }
    }

    var nextDue: MonotonicInstant? { pending.values.lazy.map(\.due).min() }

    /// The changes due by `now`, taken off the list.
    mutating func takeDue(now: MonotonicInstant) -> [Change] {
        let due = pending.values.filter { $0.due <= now }
        for change in due { pending[change.path] = nil }
        if pending.isEmpty { pending = [:] }
        return due
    }

    /// Every change waiting, taken off the list (a clean stop).
    mutating func takeAll() -> [Change] {
        defer { pending = [:] }
        return Array(pending.values)
    }

    // MARK: O_TMPFILE

    /// A file that appeared (IN_CREATE) with one link and looks still open: if it is an
    /// O_TMPFILE linked into place, its close comes as `#<inode>`.
    /// Forgotten at the name's own close or removal (a file written in place), so only
    /// names nobody closed are kept.
    mutating func mayBeLinkedTmpfile(inode: UInt64, at path: [UInt8]) {
        if tmpfiles.count >= Self.tmpfilesLimit {
            tmpfiles.removeAll()
            tmpfileInodes.removeAll()
        }
        forgetTmpfile(at: path)
        tmpfiles[inode] = path
        tmpfileInodes[path] = inode
    }

    /// The close of `name`: the path an O_TMPFILE of that name was linked to, if one was;
    /// otherwise it is kept for the IN_CREATE that may follow (`wasClosedAsTmpfile`).
    mutating func linkedTmpfile(closedAs name: [UInt8]) -> [UInt8]? {
        guard let inode = Self.tmpfileInode(name) else { return nil }
        guard let path = tmpfiles.removeValue(forKey: inode) else {
            if closedTmpfiles.count >= Self.tmpfilesLimit { closedTmpfiles.removeAll() }
            closedTmpfiles.insert(inode)
            return nil
        }
        tmpfileInodes[path] = nil
        return path
    }

    /// The IN_CREATE of a one-link file whose O_TMPFILE close came first: it is whole.
    mutating func wasClosedAsTmpfile(inode: UInt64) -> Bool {
        !closedTmpfiles.isEmpty && closedTmpfiles.remove(inode) != nil
    }

    private mutating func forgetTmpfile(at path: [UInt8]) {
        guard !tmpfileInodes.isEmpty, let inode = tmpfileInodes.removeValue(forKey: path) else { return }
        tmpfiles[inode] = nil
    }

    /// "#<decimal>": how the kernel names an O_TMPFILE's dentry (d_tmpfile).
    static func tmpfileInode(_ name: [UInt8]) -> UInt64? {
        guard name.count > 1, name.count <= 21, name[0] == UInt8(ascii: "#") else { return nil }
        var value: UInt64 = 0
        for byte in name.dropFirst() {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (times, overflow) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflowAgain) = times.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
            guard !overflow, !overflowAgain else { return nil }
            value = sum
        }
        return value
    }

    /// What the dump shows.
    func describe() -> DumpValue {
        .object([
            .init("files_being_written", writingOverflowed ? .string("more than \(Self.writingLimit)") : .int(Int64(writing.count))),
            .init("changes_to_confirm", .int(Int64(pending.count))),
            .init("changes_dropped", .int(Int64(dropped))),
        ])
    }
}
