/// STATUS= at most once per interval, the latest line always sent by the end of it.
/// Every sd_notify is a datagram PID 1 has to read: a 100,000-file burst changes the
/// running count 200,000 times, and when the socket's queue is full the send blocks
/// the lifecycle queue, which also handles SIGTERM.
struct StatusThrottle {
    enum Action: Equatable {
        case send
        /// Send at this CLOCK_MONOTONIC time (DispatchTime nanoseconds), then call `timerFired`.
        case sendAt(UInt64)
        case none
    }

    let intervalNanoseconds: UInt64
    private var lastSent: UInt64?
    private var timerArmed = false
    private var changedSinceSent = false

    init(intervalNanoseconds: UInt64) {
        self.intervalNanoseconds = intervalNanoseconds
    }

    mutating func changed(now: UInt64) -> Action {
        if timerArmed {
            changedSinceSent = true
            return .none
        }
        if let last = lastSent, now &- last < intervalNanoseconds {
            timerArmed = true
            changedSinceSent = true
            return .sendAt(last + intervalNanoseconds)
        }
        lastSent = now
        return .send
    }

    mutating func timerFired(now: UInt64) -> Action {
        timerArmed = false
        guard changedSinceSent else { return .none }
        changedSinceSent = false
        lastSent = now
        return .send
    }
}
