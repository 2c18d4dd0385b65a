import DequeModule

/// Calls whose answer is large or costly to build (a History of 10,000 rows, a Dump, the
/// metrics, a Next of 1,000 fires a task) take one of `limit` slots, the last one root's; a
/// connection without one waits in line for the next. The others (Status, Tasks, Trigger,
/// ...) are answered at once, so a crowd asking for History does not delay `status`.
/// A plain value of the control queue (ControlServer).
struct LargeCallSlots {
    let limit: Int
    /// Handed to the backend and not answered yet.
    private(set) var inFlight = 0
    private(set) var peak = 0
    /// Connections with a call ready and no slot for it, in the order they asked.
    private(set) var waiting: Deque<UInt64> = []

    init(limit: Int) {
        self.limit = limit
    }

    static func isLarge(_ call: VarlinkCall) -> Bool {
        guard call.interface == ControlInterface.name, let method = ControlInterface.Method(rawValue: call.methodName) else { return false }
        switch method {
        case .history, .dump, .metrics, .fleet, .next: return true
        case .status, .trigger, .cancel, .reload, .tasks, .watches: return false
        }
    }

    /// A slot for `connection`'s call, or false and the connection in line.
    mutating func take(for connection: UInt64, root: Bool) -> Bool {
        guard inFlight < (root ? limit : limit - 1) else {
            if !waiting.contains(connection) { waiting.append(connection) }
            return false
        }
        inFlight += 1
        peak = max(peak, inFlight)
        return true
    }

    mutating func release() {
        inFlight -= 1
    }

    /// The first connection in line, taken out of it (its pump takes a slot, or puts it back).
    mutating func popWaiting() -> UInt64? {
        waiting.popFirst()
    }
}
