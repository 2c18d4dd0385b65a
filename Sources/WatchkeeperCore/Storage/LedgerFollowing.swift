// Keeping a ledger entry the file's own after a rename or an attribute change the watcher
// saw (HandledChanges): the entry moves with the file and takes its new form, so
// that catch-up, which runs every file that changed since it was handled, does not run it.

import CSQLite

extension FileLedger {
    /// The rule's entry held in form `known` at `from` goes to `to` in form `now`, inside a
    /// transaction the caller holds. With `from` == `to` only the form changes. A rename
    /// swaps the two names' entries: the entry of the file the rename replaced (or, for
    /// renameat2's RENAME_EXCHANGE, of the other half of the exchange, whose own move
    /// follows) takes the old name. So an exchange of two handled files keeps both entries,
    /// whichever half is written first: the second finds its entry at its new name already
    /// and only changes its form. An entry no longer in form `known` (handled again since)
    /// is left as it is. Returns how many entries changed.
    @discardableResult
    func followInTransaction(rule: String, from: [UInt8], to: [UInt8], known: FileIdentity, now: FileIdentity) throws(SQLiteError) -> Int {
        let action = "follow a rename or attribute change of a file of watch \"\(rule)\" in"
        let form: [SQLiteValue] = [
            .integer(Int64(bitPattern: known.device)), .integer(Int64(bitPattern: known.inode)), .integer(known.size),
            .integer(known.modifiedNanoseconds), known.changedNanoseconds.map { .integer($0) } ?? .null,
        ]
        let newForm: [SQLiteValue] = [
            .integer(Int64(bitPattern: now.device)), .integer(Int64(bitPattern: now.inode)), .integer(now.size),
            .integer(now.modifiedNanoseconds), now.changedNanoseconds.map { .integer($0) } ?? .null,
            now.bornNanoseconds.map { .integer($0) } ?? .null, now.generation.map { .integer(Int64(bitPattern: $0)) } ?? .null,
        ]
        let matches = "device = ?3 AND inode = ?4 AND size = ?5 AND modified_ns = ?6 AND changed_ns IS ?7"
        if from != to {
            // No path holds a NUL byte: a parking place no file can have.
            let parked: [UInt8] = [0] + from
            try connection.execute("UPDATE file_ledger SET path = ?8 WHERE rule = ?1 AND path = ?2 AND \(matches)",
                                   [.text(rule), .blob(from)] + form + [.blob(parked)], action: action)
            if connection.changes == 1 {
                try connection.execute("UPDATE file_ledger SET path = ?2 WHERE rule = ?1 AND path = ?3",
                                       [.text(rule), .blob(from), .blob(to)], action: action)
                try connection.execute(
                    """
                    UPDATE file_ledger SET path = ?3, device = ?4, inode = ?5, size = ?6, modified_ns = ?7, changed_ns = ?8,
                        born_ns = ?9, generation = ?10
                    WHERE rule = ?1 AND path = ?2
                    """, [.text(rule), .blob(parked), .blob(to)] + newForm, action: action)
                return 1
            }
        }
        try connection.execute(
            """
            UPDATE file_ledger SET device = ?8, inode = ?9, size = ?10, modified_ns = ?11, changed_ns = ?12, born_ns = ?13,
                generation = ?14
            WHERE rule = ?1 AND path = ?2 AND \(matches)
            """, [.text(rule), .blob(to)] + form + newForm, action: action)
        return connection.changes
    }

    /// `followInTransaction` in a transaction of its own (tools and tests).
    @discardableResult
    public func follow(rule: String, from: [UInt8], to: [UInt8], known: FileIdentity, now: FileIdentity) throws(SQLiteError) -> Int {
        try connection.transaction("follow a file of watch \"\(rule)\" in") { () throws(SQLiteError) -> Int in
            try followInTransaction(rule: rule, from: from, to: to, known: known, now: now)
        }
    }
}
