import Dispatch
import Synchronization

/// A subsystem's own serial queue: every piece of state a subsystem owns is touched
/// only here, and every dispatch source it owns delivers here. The wrapper adds what
/// plain DispatchQueue cannot tell us: how many items are waiting, and whether the
/// queue still answers (the watchdog's probe).
public final class SubsystemQueue: Sendable {
    public let name: String
    public let qos: DispatchQoS
    public let queue: DispatchQueue
    private let pending = Atomic<Int>(0)
    private let probe = Mutex(ProbeState())

    public struct ProbeState: Sendable, Equatable {
        /// When the unanswered probe was sent.
        public var outstandingSince: MonotonicInstant?
        public var lastLatency: Duration?
        public var lastAnsweredAt: MonotonicInstant?
        public var probesAnswered: UInt64 = 0
    }

    public init(name: String, qos: DispatchQoS = .default) {
        self.name = name
        self.qos = qos
        label = "watchkeeper.\(name)"
        self.queue = DispatchQueue(label: label, qos: qos)
    }

    /// Kept: DispatchQueue.label makes a new String from the C label at every read, and
    /// every source a job registers reads it (about 1,000 instructions each).
    public let label: String

    /// Counted so the dump can show a backlog. Dispatch source handlers target the
    /// queue directly and are not counted; they are listed with the sources instead. From a
    /// block a feeding thread carries (CarriedHandOffs), `work` may run after that block on
    /// the same thread instead of on a worker woken for it; in order either way.
    public func async(_ work: @escaping @Sendable () -> Void) {
        pending.wrappingAdd(1, ordering: .relaxed)
        if let carrier = CarriedHandOffs.current, carrier.hold(work, for: self) { return }
        enqueue(work)
    }

    /// Enqueues work already counted in `pending` (a carrier handing over what it held).
    func enqueue(_ work: @escaping @Sendable () -> Void) {
        queue.async { self.runCounted(work) }
    }

    /// Runs counted work, on this queue.
    func runCounted(_ work: @Sendable () -> Void) {
        pending.wrappingSubtract(1, ordering: .relaxed)
        work()
    }

    public var pendingItems: Int { pending.load(ordering: .relaxed) }

    public var probeState: ProbeState { probe.withLock { $0 } }

    /// An empty block through the queue. It only answers once everything queued
    /// before it has run, so an unanswered probe means the queue is stuck.
    public func sendProbe(at now: MonotonicInstant) {
        let alreadyOutstanding = probe.withLock { state -> Bool in
            if state.outstandingSince != nil { return true }
            state.outstandingSince = now
            return false
        }
        guard !alreadyOutstanding else { return }
        async {
            let answered = MonotonicInstant.now
            self.probe.withLock { state in
                if let sent = state.outstandingSince {
                    state.lastLatency = answered - sent
                }
                state.outstandingSince = nil
                state.lastAnsweredAt = answered
                state.probesAnswered += 1
            }
        }
    }

    public var qosName: String {
        switch qos.qosClass {
        case .userInteractive: return "user-interactive"
        case .userInitiated: return "user-initiated"
        case .default: return "default"
        case .utility: return "utility"
        case .background: return "background"
        case .unspecified: return "unspecified"
        @unknown default: return "unknown"
        }
    }
}
