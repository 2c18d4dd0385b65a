/// The daemon's lifecycle as a state machine: each event returns the actions the
/// owner runs, so the rules live in one table that tests can read and drive.
public enum LifecycleState: Equatable, Sendable {
    /// Configuration loaded; sources being registered; READY=1 not sent yet.
    case starting
    case running
    /// SIGTERM/SIGINT received: no new work, running work finishing.
    case draining(signal: Int32)
    case stopped
}

extension LifecycleState: CustomStringConvertible {
    public var description: String {
        switch self {
        case .starting: return "starting"
        case .running: return "running"
        case .draining(let signal): return "draining (\(HandledSignals.name(signal)))"
        case .stopped: return "stopped"
        }
    }
}

public enum LifecycleEvent: Equatable, Sendable {
    case sourcesRegistered
    case reloadRequested
    case terminationRequested(signal: Int32)
    case drainFinished
}

public enum LifecycleAction: Equatable, Sendable {
    case announceReady
    case reload
    case beginDrain(signal: Int32)
    /// A second SIGTERM/SIGINT while draining: the operator does not want to wait.
    case expireRunningWorkNow
    case finishStopping
    case ignore(reason: String)
}

public struct LifecycleMachine: Sendable {
    public private(set) var state: LifecycleState = .starting

    public init() {}

    public mutating func handle(_ event: LifecycleEvent) -> [LifecycleAction] {
        switch (state, event) {
        case (.starting, .sourcesRegistered):
            state = .running
            return [.announceReady]
        case (.starting, .reloadRequested):
            return [.ignore(reason: "reload requested during start-up; the configuration was read moments ago")]
        case (.starting, .terminationRequested(let signal)), (.running, .terminationRequested(let signal)):
            state = .draining(signal: signal)
            return [.beginDrain(signal: signal)]
        case (.running, .reloadRequested):
            return [.reload]
        case (.draining, .reloadRequested):
            return [.ignore(reason: "reload requested while shutting down")]
        case (.draining, .terminationRequested):
            return [.expireRunningWorkNow]
        case (.draining, .drainFinished):
            state = .stopped
            return [.finishStopping]
        case (.stopped, _):
            return [.ignore(reason: "already stopped")]
        case (.running, .sourcesRegistered), (.draining, .sourcesRegistered):
            preconditionFailure("lifecycle: signal sources are registered once, before READY=1; a second registration means start() ran twice")
        case (.starting, .drainFinished), (.running, .drainFinished):
            preconditionFailure("lifecycle: a drain can only finish after it began; drainFinished arrived in state \(state)")
        }
    }
}
