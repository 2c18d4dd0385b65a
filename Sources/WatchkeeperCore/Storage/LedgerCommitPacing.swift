// When the StateStore commits the writes waiting (the file ledger's records, and the task
// state's that come with them). A value with no clock and no timer: the caller passes
// the instants (MonotonicInstant) and does what the transition returns.
//
// One transaction per finished job cost the daemon about a seventh of its CPU in a burst
// (docs/measurements/performance.md, "The file ledger's group commit"): SQLite's WAL
// frames and lock calls for every file. So writes are paced: a record
// that comes after a quiet spell is written on the queue's next turn, as before; one that
// comes within `interval` of the last write waits until `interval` has passed since it,
// with everything else that ended meanwhile. A crash then runs again at most the jobs in
// flight plus those that ended in the last `interval`, never loses one.

public struct LedgerCommitPacing: Sendable, Equatable {
    public enum Action: Sendable, Equatable {
        /// Nothing to do: a write is already on its way.
        case none
        /// Write on the queue's next turn, after every completion already waiting there.
        case writeOnNextTurn
        /// Arm the timer for this instant and write then.
        case writeAt(MonotonicInstant)
    }

    public let interval: Duration
    /// The last write's start; nil before the first.
    public private(set) var lastWriteAt: MonotonicInstant?
    public private(set) var writePending = false

    public init(interval: Duration) {
        self.interval = max(.zero, interval)
    }

    /// A record joined the pending ones at `now`.
    public mutating func recordAdded(now: MonotonicInstant) -> Action {
        guard !writePending else { return .none }
        writePending = true
        // `now` may be a moment before `last`: a submitter read the clock, then another
        // thread's commit marked its write before the submitter took the lock. Such a record
        // is written on the next turn, as when the difference was unsigned and wrapped.
        guard let last = lastWriteAt, (.zero..<interval).contains(now - last) else { return .writeOnNextTurn }
        return .writeAt(last + interval)
    }

    /// Everything pending was written at `now` (by the paced write or by anyone who needed
    /// the file current: a history query, the end of a burst, the stop).
    public mutating func wrote(now: MonotonicInstant) {
        lastWriteAt = now
        writePending = false
    }
}
