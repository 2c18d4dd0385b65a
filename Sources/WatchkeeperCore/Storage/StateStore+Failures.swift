import CSQLite
import Dispatch

/// What a failed write does: a failure that can pass keeps the writes, in order, and arms a
/// retry with a backoff; one that cannot drops the one write that caused it. Both are said
/// through the store's ProblemAggregator, one line per cause a minute with a count.
extension StateStore {
    /// Whether a write that failed so may succeed later, as it is: the disk fills and frees,
    /// an I/O error passes, another process lets go of the lock, the file becomes writable.
    /// Anything else (a value out of range, a damaged file) fails the same way every time.
    static func mayPass(_ error: SQLiteError) -> Bool {
        switch error.primaryCode {
        case SQLITE_FULL, SQLITE_IOERR, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_CANTOPEN, SQLITE_READONLY, SQLITE_NOMEM,
             SQLITE_PROTOCOL, SQLITE_INTERRUPT, SQLITE_PERM:
            return true
        default:
            return false
        }
    }

    func failed(_ error: SQLiteError) {
        let now = MonotonicInstant.now
        writeFailures += 1
        lastError = (error.description, .now())
        if failingSince == nil { failingSince = now }
        let delay = retryDelay.map { min($0 * 2, Self.longestRetryDelay) } ?? Self.firstRetryDelay
        retryDelay = delay
        // One line per cause a minute: the cause names SQLite's reason, the example the
        // whole message and what waits.
        problems.report(
            "unable to write to the state file (\(Self.reason(of: error))); the writes are kept in order and tried again until written",
            example: "\(error) [\(pending.count) write(s) of \(pendingRows) row(s) waiting, the oldest for \(oldestAge(now: now).compactDescription)]")
        let timer = retryTimer ?? sources.makeTimer(
            owner: "state", target: "state file: try the writes that failed again (backoff up to \(Self.longestRetryDelay.compactDescription))",
            on: queue) { [weak self] in self?.retryDue() }
        retryTimer = timer
        // A closing store has a deadline: the last try is at it, not after it.
        if let deadline = closing?.deadline {
            timer.schedule(at: min(deadline, now + delay).dispatchTime)
        } else {
            timer.schedule(after: delay)
        }
    }

    func retryDue() {
        retryTimer?.cancel()
        retryTimer = nil
        if closing != nil {
            closeStep()
        } else {
            commitPending()
        }
    }

    func recovered() {
        let took = failingSince?.elapsed() ?? .zero
        logger.notice("the state file is written again after \(took.compactDescription) of failures; \(pending.count) write(s) still waiting")
        failingSince = nil
        retryDelay = nil
    }

    func dropUnwritable(_ error: SQLiteError) {
        let item = pending.removeFirst()
        pendingRows -= item.write.rows
        dropped[item.write.kind, default: 0] += UInt64(item.write.rows)
        writeFailures += 1
        lastError = (error.description, .now())
        problems.report("unable to write to the state file (\(Self.reason(of: error))); the write cannot succeed and is dropped",
                        example: "\(error) [\(item.write.rows) \(item.write.kind.consequence)]")
    }

    /// SQLite's words for the primary code ("database or disk is full").
    static func reason(of error: SQLiteError) -> String {
        String(cString: sqlite3_errstr(error.primaryCode))
    }

    func oldestAge(now: MonotonicInstant) -> Duration {
        guard let first = pending.first else { return .zero }
        return max(.zero, now - first.submittedAt)
    }

    func describeDropped() -> String {
        let parts = StateWrite.Kind.allCases.compactMap { kind in dropped[kind].map { "\($0) \(kind.consequence)" } }
        return parts.isEmpty ? "none" : parts.joined(separator: ", ")
    }
}
