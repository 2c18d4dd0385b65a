import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The signals the daemon handles and how it must treat them on Linux, where
/// libdispatch delivers signal sources through a signalfd: a signalfd only sees
/// signals that are blocked in every thread, so they are blocked at the top of
/// main before any thread exists (threads inherit the mask). Until its source is
/// registered a blocked signal stays pending instead of killing us.
public enum HandledSignals {
    public static let all: [Int32] = [SIGUSR1, SIGHUP, SIGTERM, SIGINT]

    /// Call first thing in main. Never SIG_IGN these instead: an ignored signal is
    /// discarded at generation and never reaches the signalfd.
    public static func blockInCallingThread() {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in all { sigaddset(&set, signal) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// For commands that do not run the daemon (check-config), so Ctrl-C works.
    public static func unblockInCallingThread() {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in all { sigaddset(&set, signal) }
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// A reader of the daemon's stderr that goes away (`run | logger`, a collector being
    /// restarted) must not kill it: its writes fail with EPIPE instead, and job output goes
    /// on to the journal or nowhere. SIGPIPE is not a handled signal, so ignoring it is
    /// safe; jobs get it back at its default (the spawn resets every disposition).
    public static func ignoreBrokenPipe() {
        signal(SIGPIPE, SIG_IGN)
    }

    public static func name(_ signal: Int32) -> String {
        switch signal {
        case SIGUSR1: return "SIGUSR1"
        case SIGUSR2: return "SIGUSR2"
        case SIGHUP: return "SIGHUP"
        case SIGTERM: return "SIGTERM"
        case SIGINT: return "SIGINT"
        case SIGKILL: return "SIGKILL"
        case SIGQUIT: return "SIGQUIT"
        default: return "signal \(signal)"
        }
    }
}

/// Owns the daemon's signal sources on the signals queue. Handlers only record and
/// forward: the lifecycle owner decides what a signal means in its current state.
// @unchecked Sendable: its sources are made and fire on the signals queue; registration waits under a Mutex.
public final class SignalSources: @unchecked Sendable {
    public struct RegistrationFailure: Error, CustomStringConvertible {
        public let missing: [String]
        public var description: String {
            "unable to register signal sources for \(missing.joined(separator: ", ")): no registration within the time limit"
        }
    }

    public let queue: SubsystemQueue
    private let registry: SourceRegistry
    private let onSignal: @Sendable (Int32) -> Void
    // Kept for the life of the process and never cancelled: a cancelled signal
    // source leaves its signal blocked and swallowed until the process exits.
    private var sources: [DispatchSourceSignal] = []

    public init(queue: SubsystemQueue, registry: SourceRegistry, onSignal: @escaping @Sendable (Int32) -> Void) {
        self.queue = queue
        self.registry = registry
        self.onSignal = onSignal
    }

    /// Creates one source per handled signal and returns only when every one is
    /// registered with the kernel, so READY=1 can promise that a signal sent right
    /// after it is handled. Must not be called on the signals queue itself.
    public func registerAll(timeout: Duration) throws {
        dispatchPrecondition(condition: .notOnQueue(queue.queue))
        let registered = DispatchGroup()
        let pendingNames = Mutex(Set(HandledSignals.all.map(HandledSignals.name)))
        for signal in HandledSignals.all {
            let name = HandledSignals.name(signal)
            let stats = registry.register(.signal, owner: "signals", target: name, on: queue)
            let source = DispatchSource.makeSignalSource(signal: signal, queue: queue.queue)
            let forward = onSignal
            // The handler holds its source: both live as long as the process.
            source.setEventHandler {
                stats.fired(count: source.data)
                forward(signal)
            }
            registered.enter()
            source.setRegistrationHandler {
                pendingNames.withLock { _ = $0.remove(name) }
                registered.leave()
            }
            sources.append(source)
            source.activate()
        }
        let deadline = DispatchTime.now() + .nanoseconds(Int(timeout.nanosecondsClamped))
        if registered.wait(timeout: deadline) == .timedOut {
            throw RegistrationFailure(missing: pendingNames.withLock { $0.sorted() })
        }
    }
}
