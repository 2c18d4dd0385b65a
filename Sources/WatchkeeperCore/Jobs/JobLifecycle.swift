/// Why a job is being ended before it finished on its own.
public enum ExpiryReason: String, Sendable, Equatable {
    /// Its budget ran out.
    case budget
    /// The daemon is stopping and shutdown_grace ran out.
    case shutdown
    /// overlap = "replace": a new run of the same task wants its place.
    case replaced
    /// `watchkeeper cancel RUN_ID`: an operator ended it.
    case cancelled
    /// A fleet job whose host could not renew its etcd lease: stopped before the lease can
    /// expire and another host take the fire over (docs/fleet.md, "Fencing").
    case fleetLeaseLost = "fleet_lease_lost"
}

/// A running job's life, from spawn to reaped exit, modelled on
/// beginBackgroundTask(expirationHandler:): once the deadline passes, the expiration
/// handler runs first, then the job's process group gets `stop_signal`, then SIGKILL
/// after `kill_grace`. The job is never left hanging.
public enum JobPhase: Equatable, Sendable {
    case running
    /// The `on_expire` handler is running; the job is still alive.
    case expiring(ExpiryReason)
    /// `stop_signal` sent to the group; waiting `kill_grace`.
    case stopping(ExpiryReason)
    /// SIGKILL sent to the group; waiting for the exit.
    case killing(ExpiryReason)
    case finished
}

public enum JobEvent: Equatable, Sendable {
    case warnPointReached
    case expire(ExpiryReason)
    case expireHandlerEnded
    case killGraceElapsed
    case exited(ProcessExit)
}

public enum JobAction: Equatable, Sendable {
    case logBudgetWarning
    case logExpiring(ExpiryReason)
    case runExpireHandler(ExpiryReason)
    case signalGroup(Int32)
    case startKillGrace
    /// The main process is gone; kill what is left of its group (SIGKILL when the job
    /// expired, otherwise a polite stop signal with a warning).
    case reapLeftovers(expired: Bool)
    case record(RunOutcome, ProcessExit, ExpiryReason?)
}

public enum RunOutcome: String, Sendable, Equatable, CaseIterable {
    case ok
    case failed
    case expired
    case skippedOverlap = "skipped-overlap"
    case missed
    case cancelled
    /// A fleet fire another host claimed: not a failure (docs/fleet.md).
    case ranElsewhere = "ran_elsewhere"
    /// A fleet fire that could not be claimed (no etcd quorum) and was given up.
    case held
}

public struct JobMachine: Sendable {
    public private(set) var phase: JobPhase = .running
    public let hasExpireHandler: Bool
    public let stopSignal: Int32

    public init(hasExpireHandler: Bool, stopSignal: Int32) {
        self.hasExpireHandler = hasExpireHandler
        self.stopSignal = stopSignal
    }

    public var expiryReason: ExpiryReason? {
        switch phase {
        case .expiring(let reason), .stopping(let reason), .killing(let reason): return reason
        case .running, .finished: return nil
        }
    }

    public mutating func handle(_ event: JobEvent) -> [JobAction] {
        switch (phase, event) {
        case (.running, .warnPointReached):
            return [.logBudgetWarning]
        case (_, .warnPointReached):
            return []
        case (.running, .expire(let reason)):
            if hasExpireHandler {
                phase = .expiring(reason)
                return [.logExpiring(reason), .runExpireHandler(reason)]
            }
            phase = .stopping(reason)
            return [.logExpiring(reason), .signalGroup(stopSignal), .startKillGrace]
        case (.expiring, .expire), (.stopping, .expire), (.killing, .expire), (.finished, .expire):
            return []
        case (.expiring(let reason), .expireHandlerEnded):
            phase = .stopping(reason)
            return [.signalGroup(stopSignal), .startKillGrace]
        case (_, .expireHandlerEnded):
            return []
        case (.stopping(let reason), .killGraceElapsed):
            phase = .killing(reason)
            return [.signalGroup(SIGKILL)]
        case (_, .killGraceElapsed):
            return []
        case (.running, .exited(let status)):
            phase = .finished
            return [.reapLeftovers(expired: false), .record(status == .exited(0) ? .ok : .failed, status, nil)]
        case (.expiring(let reason), .exited(let status)), (.stopping(let reason), .exited(let status)), (.killing(let reason), .exited(let status)):
            phase = .finished
            return [.reapLeftovers(expired: true), .record(.expired, status, reason)]
        case (.finished, .exited):
            preconditionFailure("job: a process exits once; a second exit event means its pidfd source fired after the job finished")
        }
    }
}

#if canImport(Glibc)
import Glibc
#endif
