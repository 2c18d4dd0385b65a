// Forgetting the ledger's files that are gone, so the state file does not grow with every
// file ever handled, and so rows of deleted files are not there for a reused inode to match.
// The walk goes a step at a time (LedgerPruneWalk) so that the StateStore can run it on its
// queue between commits; `prune(rule:missingUnder:)` runs it to the end at once.

import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// One rule's prune, a page of entries at a time, in path order: which entries' files are
/// gone. A value: it reads through the ledger it is handed and deletes nothing itself.
///
/// Why lstat and not the set of files the last scan found: a scan that could not list a
/// directory (EACCES, EMFILE) would make every file below it look gone, and its files would
/// all run again once the directory is readable. An entry goes only when lstat fails with
/// ENOENT or ENOTDIR; any other error keeps it. A root that is missing or not a directory
/// (an unmounted file system) removes nothing, or the next mount would re-handle the tree.
struct LedgerPruneWalk: Sendable {
    /// An entry whose file is gone, as it was read: it is deleted only if it is still that
    /// row (same handling time), so a file handled again at the same path meanwhile stays.
    struct Gone: Sendable, Equatable {
        let path: [UInt8]
        let handledAtNanoseconds: Int64
    }

    let rule: String
    let root: [UInt8]
    /// The last path examined; the next page starts after it.
    private(set) var cursor: [UInt8]?
    private(set) var examined = 0
    private(set) var kept = 0
    private(set) var finished = false

    init(rule: String, root: [UInt8]) {
        self.rule = rule
        self.root = root
    }

    /// errno when the root cannot be examined (ENOTDIR when it is not a directory): then
    /// nothing may be removed.
    func rootUnavailable() -> Errno? {
        var info = stat()
        if case .failure(let error) = nothingOrErrno({ FileLedger.lstat(root, &info) }) { return error }
        return info.st_mode & S_IFMT == S_IFDIR ? nil : .notDirectory
    }

    /// Reads up to `limit` entries after the cursor and returns those whose file is gone;
    /// `finished` is set after the last page.
    mutating func step(_ ledger: FileLedger, limit: Int) throws(SQLiteError) -> [Gone] {
        let page = try ledger.entriesForPruning(rule: rule, after: cursor, limit: limit)
        if page.count < limit { finished = true }
        cursor = page.last?.path ?? cursor
        var gone: [Gone] = []
        let slash = UInt8(ascii: "/")
        for entry in page {
            examined += 1
            var info = stat()
            switch nothingOrErrno({ FileLedger.lstat(root + [slash] + entry.path, &info) }) {
            case .failure(.noSuchFileOrDirectory), .failure(.notDirectory): gone.append(entry)
            default: kept += 1
            }
        }
        return gone
    }
}

extension FileLedger {
    public enum PruneOutcome: Sendable, Equatable {
        case pruned(removed: Int, kept: Int)
        /// The root could not be examined (errno from lstat, or ENOTDIR): nothing removed.
        case rootUnavailable(errorNumber: Int32)
    }

    /// Entries a prune examines per page.
    static let pruneEntriesPerStep = 1_024

    /// Deletes the rule's entries whose file is gone (LedgerPruneWalk), at once: one lstat
    /// per entry on the calling queue, then the deletions in transactions of
    /// `deletionsPerTransaction`. The daemon runs the same walk a page at a time on the
    /// state queue (StateStore); this form is for tools and tests.
    public func prune(rule: String, missingUnder root: [UInt8]) throws(SQLiteError) -> PruneOutcome {
        var walk = LedgerPruneWalk(rule: rule, root: root)
        if let error = walk.rootUnavailable() { return .rootUnavailable(errorNumber: error.rawValue) }
        var gone: [LedgerPruneWalk.Gone] = []
        while !walk.finished {
            gone += try walk.step(self, limit: Self.pruneEntriesPerStep)
        }
        var removed = 0
        var start = 0
        while start < gone.count {
            let end = min(gone.count, start + Self.deletionsPerTransaction)
            removed += try connection.transaction(Self.pruneAction(rule)) { () throws(SQLiteError) -> Int in
                try forgetInTransaction(rule: rule, gone[start..<end])
            }
            start = end
        }
        return .pruned(removed: removed, kept: walk.kept)
    }

    /// Deletes the rule's entries for which `keep` says false; returns how many. `keep` runs
    /// outside any transaction (it may be slow), then the deletions go in transactions of
    /// `deletionsPerTransaction`.
    public func prune(rule: String, keepingOnly keep: ([UInt8]) -> Bool) throws(SQLiteError) -> Int {
        let action = Self.pruneAction(rule)
        var paths: [[UInt8]] = []
        try connection.execute("SELECT path FROM file_ledger WHERE rule = ?1", [.text(rule)], action: action) { row in
            paths.append(row.blob(0) ?? [])
        }
        let doomed = paths.filter { !keep($0) }
        var start = 0
        while start < doomed.count {
            let end = min(doomed.count, start + Self.deletionsPerTransaction)
            try connection.transaction(action) { () throws(SQLiteError) in
                for path in doomed[start..<end] {
                    try connection.execute("DELETE FROM file_ledger WHERE rule = ?1 AND path = ?2", [.text(rule), .blob(path)],
                                           action: action)
                }
            }
            start = end
        }
        return doomed.count
    }

    /// The rule's entries after `path` in path order (a range of the primary key), with
    /// their handling time: a page of a prune.
    func entriesForPruning(rule: String, after path: [UInt8]?, limit: Int) throws(SQLiteError) -> [LedgerPruneWalk.Gone] {
        var page: [LedgerPruneWalk.Gone] = []
        let row = { (row: SQLiteRow) in
            page.append(LedgerPruneWalk.Gone(path: row.blob(0) ?? [], handledAtNanoseconds: row.integer(1) ?? 0))
        }
        if let path {
            try connection.execute(
                "SELECT path, handled_at FROM file_ledger WHERE rule = ?1 AND path > ?2 ORDER BY path LIMIT ?3",
                [.text(rule), .blob(path), .integer(Int64(limit))], action: Self.pruneAction(rule), row: row)
        } else {
            try connection.execute(
                "SELECT path, handled_at FROM file_ledger WHERE rule = ?1 ORDER BY path LIMIT ?2",
                [.text(rule), .integer(Int64(limit))], action: Self.pruneAction(rule), row: row)
        }
        return page
    }

    /// Deletes the entries a prune found gone, each only if it is still the row that was
    /// read (a file handled again at that path since has a later handling time and stays),
    /// inside a transaction the caller holds. Returns how many went.
    func forgetInTransaction(rule: String, _ gone: ArraySlice<LedgerPruneWalk.Gone>) throws(SQLiteError) -> Int {
        var removed = 0
        for entry in gone {
            try connection.execute(
                "DELETE FROM file_ledger WHERE rule = ?1 AND path = ?2 AND handled_at = ?3",
                [.text(rule), .blob(entry.path), .integer(entry.handledAtNanoseconds)], action: Self.pruneAction(rule))
            removed += connection.changes
        }
        return removed
    }

    static func pruneAction(_ rule: String) -> String {
        "prune the entries of watch \"\(rule)\" in"
    }
}
