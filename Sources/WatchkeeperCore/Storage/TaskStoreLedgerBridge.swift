// DirectoryWatcher still reaches the file ledger through TaskStore, as before the ledger
// had a type of its own. This keeps it building, on the same table, until it opens a
// FileLedger (FileLedger.open recovers a damaged file, which this path does not). Delete
// this file when DirectoryWatcher no longer uses it; the deprecation warnings mark the calls.

extension TaskStore {
    @available(*, deprecated, message: "the ledger moved to FileLedger: use FileIdentity and LedgerRecord")
    public struct LedgerEntry: Sendable, Equatable {
        public let device: UInt64
        public let inode: UInt64
        public let size: Int64
        public let modifiedNanoseconds: Int64
        public let outcome: String

        public init(device: UInt64, inode: UInt64, size: Int64, modifiedNanoseconds: Int64, outcome: String) {
            self.device = device
            self.inode = inode
            self.size = size
            self.modifiedNanoseconds = modifiedNanoseconds
            self.outcome = outcome
        }
    }

    private var ledger: FileLedger { FileLedger(connection: connection, ownsConnection: false) }

    @available(*, deprecated, message: "use FileLedger.record(_:)")
    public func recordFile(rule: String, path: [UInt8], entry: LedgerEntry, at handledAt: WallTime) throws(TaskStoreError) {
        let identity = FileIdentity(device: entry.device, inode: entry.inode, size: entry.size,
                                    modifiedNanoseconds: entry.modifiedNanoseconds)
        do throws(SQLiteError) {
            try ledger.record([LedgerRecord(rule: rule, path: path, identity: identity, outcome: entry.outcome, handledAt: handledAt)])
        } catch {
            throw TaskStoreError(error)
        }
    }

    @available(*, deprecated, message: "use FileLedger.entry(rule:path:)")
    public func ledgerEntry(rule: String, path: [UInt8]) throws(TaskStoreError) -> LedgerEntry? {
        do throws(SQLiteError) {
            return try ledger.entry(rule: rule, path: path).map { found in
                LedgerEntry(device: found.identity.device, inode: found.identity.inode, size: found.identity.size,
                            modifiedNanoseconds: found.identity.modifiedNanoseconds, outcome: found.outcome)
            }
        } catch {
            throw TaskStoreError(error)
        }
    }

    @available(*, deprecated, message: "use FileLedger.count(rule:)")
    public func ledgerSize(rule: String) throws(TaskStoreError) -> Int {
        do throws(SQLiteError) {
            return try ledger.count(rule: rule)
        } catch {
            throw TaskStoreError(error)
        }
    }
}
