import CSQLite
import Dispatch

/// What the store answers besides writing: the history the control socket shows, read
/// after what waits is committed (a job that just ended is in it), and its dump section.
extension StateStore {
    // MARK: History

    /// `watchkeeper history WATCH`: the rule's files handled last, newest first: what is
    /// committed, with the records still waiting in the line merged in, so a job that just
    /// ended is in the answer without a commit first. Committing first made a call wait for
    /// whatever was ahead of the records, such as a prune's thousands of deletions (16
    /// callers during a prune of 1,000,000 entries waited 0.28 s each). `reply` runs on
    /// this queue.
    func ledgerHistory(rule: String, limit: Int,
                       reply: @escaping @Sendable (Result<[(entry: LedgerEntry, run: LedgerRun?)], SQLiteError>) -> Void) {
        queue.async { [self] in
            guard let ledger else { return reply(.failure(notOpen())) }
            takeSubmitted(markingWritten: false)
            let committed: [(entry: LedgerEntry, run: LedgerRun?)]
            do throws(SQLiteError) {
                committed = try ledger.recent(rule: rule, limit: limit)
            } catch {
                return reply(.failure(error))
            }
            var waiting: [[UInt8]: (entry: LedgerEntry, run: LedgerRun?)] = [:]
            for item in pending {
                guard case .ledgerRecords(let records) = item.write else { continue }
                for record in records where record.rule == rule {
                    waiting[record.path] = (LedgerEntry(path: record.path, identity: record.identity, outcome: record.outcome,
                                                        handledAt: record.handledAt), record.run)
                }
            }
            guard !waiting.isEmpty else { return reply(.success(committed)) }
            let merged = (committed.filter { waiting[$0.entry.path] == nil } + waiting.values).sorted { a, b in
                a.entry.handledAt != b.entry.handledAt ? a.entry.handledAt > b.entry.handledAt
                    : a.entry.path.lexicographicallyPrecedes(b.entry.path)
            }
            reply(.success(Array(merged.prefix(limit))))
        }
    }

    /// `watchkeeper history TASK`: the task's last runs, newest first, the waiting ones
    /// included as for `ledgerHistory`. `reply` runs on this queue.
    func taskHistory(task: String, limit: Int, reply: @escaping @Sendable (Result<[StoredRun], SQLiteError>) -> Void) {
        queue.async { [self] in
            guard let tasks else { return reply(.failure(notOpen())) }
            commitAllNow()
            let committed: [StoredRun]
            do throws(SQLiteError) {
                committed = try tasks.history(task: task, limit: limit)
            } catch {
                return reply(.failure(SQLiteError(path: error.path, code: error.code, description: error.description)))
            }
            let waiting = pending.reversed().compactMap { item -> StoredRun? in
                guard case .taskRun(let run) = item.write, run.task == task else { return nil }
                return run
            }
            reply(.success(Array((waiting + committed).prefix(limit))))
        }
    }

    private func notOpen() -> SQLiteError {
        let why: String
        switch availability {
        case .unavailable(let problem): why = problem
        case .closed: why = "it is closed: the daemon is stopping"
        case .notOpened, .open: why = "it was not opened"
        }
        return SQLiteError(path: "", code: SQLITE_MISUSE, description: "the state file is not open: \(why)")
    }

    // MARK: Dump

    /// Its own section: what waits (writes, rows, by kind, the oldest's age), what failed
    /// (attempts, the last error, since when, the backoff), what was dropped, and the prune.
    public func describeForDump() -> DumpValue {
        takeSubmitted(markingWritten: false)
        let now = MonotonicInstant.now
        var path: DumpValue = .null
        var problem: DumpValue = .null
        var rebuilt: DumpValue = .null
        switch availability {
        case .open(let file, let note):
            path = .string(file)
            rebuilt = note.map { .string($0) } ?? .null
        case .unavailable(let why):
            problem = .string(why)
        case .notOpened:
            problem = .string("not opened")
        case .closed:
            problem = .string("closed")
        }
        var waiting: [StateWrite.Kind: Int] = [:]
        for item in pending { waiting[item.write.kind, default: 0] += max(1, item.write.rows) }
        func byKind<Count: BinaryInteger>(_ counts: [StateWrite.Kind: Count]) -> DumpValue {
            .object(StateWrite.Kind.allCases.compactMap { kind in counts[kind].map { .init(kind.rawValue, .int(Int64($0))) } })
        }
        let prune: DumpValue = walks.first.map { walk in
            .object([
                .init("rule", .string(walk.rule)),
                .init("examined", .int(Int64(walk.examined))),
                .init("kept", .int(Int64(walk.kept))),
                .init("rules_waiting", .int(Int64(walks.count - 1))),
            ])
        } ?? .null
        return .object([
            .init("file", path),
            .init("problem", problem),
            .init("rebuilt", rebuilt),
            .init("commits", .int(Int64(ledger?.commits ?? 0))),
            .init("writes_waiting", .int(Int64(pending.count))),
            .init("rows_waiting", .int(Int64(pendingRows))),
            .init("waiting_by_kind", byKind(waiting)),
            .init("oldest_waiting_s", pending.isEmpty ? .null : .double(oldestAge(now: now).secondsDouble)),
            .init("write_failures", .int(Int64(writeFailures))),
            .init("failing_for_s", failingSince.map { .double((now - $0).secondsDouble) } ?? .null),
            .init("retry_backoff", retryDelay.map { .string($0.compactDescription) } ?? .null),
            .init("last_error", lastError.map { .string($0.message) } ?? .null),
            .init("last_error_at", lastError.map { .string($0.at.iso8601) } ?? .null),
            .init("dropped", byKind(dropped)),
            .init("prune", prune),
            .init("prunes_finished", .int(Int64(prunesFinished))),
            .init("cache_bytes", .int(Int64(ledger?.connection.cacheBytes ?? 0))),
            .init("problems", problems.describe()),
        ])
    }

    /// A read-only connection for an owner's queue, with the note that the file was rebuilt
    /// (for the owner's dump), or why there is none.
    public func openReader() -> Result<(reader: StateReader, rebuilt: String?), StateReaderUnavailable> {
        switch availability {
        case .open(let path, let rebuilt):
            do throws(SQLiteError) {
                return .success((try StateReader(path: path), rebuilt))
            } catch {
                return .failure(StateReaderUnavailable(reason: "\(error)"))
            }
        case .unavailable(let why):
            return .failure(StateReaderUnavailable(reason: why))
        case .notOpened, .closed:
            return .failure(StateReaderUnavailable(reason: "the state file is not open"))
        }
    }
}

public struct StateReaderUnavailable: Error, Sendable {
    public let reason: String
}
