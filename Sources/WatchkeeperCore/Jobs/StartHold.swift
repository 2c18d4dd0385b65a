import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Job starts held back while the daemon is short of descriptors or processes (a spawn
/// failed with EMFILE, ENFILE or EAGAIN; `SpawnError.isResourceShortage`). The job that hit
/// the shortage goes back to the head of the line instead of failing, and starts are tried
/// again when a running job ends (which frees its seven descriptors) or after a delay that
/// doubles up to five seconds (when something else holds them). Under a limit too low for
/// max_jobs that happens at every burst, many times a second: a warning at most once a
/// minute, counting the holds since the last one, and a notice when starts succeed again
/// only after a hold of a second or more.
struct StartHold {
    enum State: Equatable {
        case open
        /// `retrying`: a job ended or the delay passed, so the next start is a probe.
        case held(since: MonotonicInstant, retrying: Bool, putBack: Int)
    }

    enum Action: Equatable {
        /// `holdsBefore`: holds since the previous warning that were not reported.
        case warn(SpawnError, holdsBefore: Int)
        case retryAfter(Duration)
        case recovered(after: Duration, putBack: Int)
    }

    private(set) var state = State.open
    private var delay = Self.firstDelay
    /// Jobs put back in line over the daemon's life, and holds begun: for the dump.
    private(set) var totalPutBack: UInt64 = 0
    private(set) var holds: UInt64 = 0
    private var lastWarning: MonotonicInstant?
    private var holdsSinceWarning = 0

    static let firstDelay = Duration.milliseconds(250)
    static let longestDelay = Duration.seconds(5)
    static let warningInterval: Duration = .seconds(60)
    static let reportedHold = Duration.seconds(1)

    var allowsStarts: Bool {
        switch state {
        case .open: true
        case .held(_, let retrying, _): retrying
        }
    }

    /// A start failed for want of resources; the job is back in line.
    mutating func shortage(_ cause: SpawnError, now: MonotonicInstant) -> [Action] {
        totalPutBack += 1
        var actions: [Action] = []
        switch state {
        case .open:
            holds += 1
            delay = Self.firstDelay
            state = .held(since: now, retrying: false, putBack: 1)
            if let lastWarning, now - lastWarning < Self.warningInterval {
                holdsSinceWarning += 1
            } else {
                actions.append(.warn(cause, holdsBefore: holdsSinceWarning))
                lastWarning = now
                holdsSinceWarning = 0
            }
        case .held(let since, _, let putBack):
            delay = min(delay * 2, Self.longestDelay)
            state = .held(since: since, retrying: false, putBack: putBack + 1)
        }
        actions.append(.retryAfter(delay))
        return actions
    }

    /// A job ended or the retry delay passed: the next start may try again.
    mutating func release() {
        if case .held(let since, _, let putBack) = state {
            state = .held(since: since, retrying: true, putBack: putBack)
        }
    }

    /// A job started: a hold, if there was one, is over. `now` is read only then: this
    /// runs at every job start.
    mutating func started(now: @autoclosure () -> MonotonicInstant) -> [Action] {
        guard case .held(let since, _, let putBack) = state else { return [] }
        state = .open
        delay = Self.firstDelay
        let held = now() - since
        return held >= Self.reportedHold ? [.recovered(after: held, putBack: putBack)] : []
    }
}

/// The engine's start hold acting on the jobs queue: StartHold decides, this warns, says
/// when starts recover, and owns the timer that tries held starts again. Confined to the
/// jobs queue.
final class HeldStarts {
    private(set) var hold = StartHold()
    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    private let logger: Logger
    private var timer: RegisteredTimer?

    init(queue: SubsystemQueue, sources: SourceRegistry, logger: Logger) {
        self.queue = queue
        self.sources = sources
        self.logger = logger
    }

    var allowsStarts: Bool { hold.allowsStarts }

    /// A job ended (its descriptors are free again): a held start may try.
    func release() { hold.release() }

    /// A job started: a hold, if there was one, is over.
    func started() { perform(hold.started(now: .now), waiting: 0, retry: nil) }

    /// A start failed for want of resources and its job is back in line, with `waiting`
    /// jobs now waiting. `retry` runs on the jobs queue when the delay has passed.
    func shortage(_ cause: SpawnError, waiting: Int, retry: @escaping () -> Void) {
        perform(hold.shortage(cause, now: .now), waiting: waiting, retry: retry)
    }

    private func perform(_ actions: [StartHold.Action], waiting: Int, retry: (() -> Void)?) {
        for action in actions {
            switch action {
            case .warn(let cause, let holdsBefore):
                let earlier = holdsBefore > 0 ? "; \(holdsBefore) more time(s) in the last minute" : ""
                logger.warning("unable to start jobs: \(cause.shortageExplanation); \(waiting) waiting job(s) stay in line and start as running jobs end (\(cause))\(earlier)")
            case .retryAfter(let delay):
                if timer == nil, let retry {
                    timer = sources.makeTimer(owner: "jobs", target: "try held job starts again", on: queue) { [weak self] in
                        self?.hold.release()
                        retry()
                    }
                }
                timer?.schedule(after: delay)
            case .recovered(let after, let putBack):
                logger.notice("jobs start again after being held back for \(after.compactDescription); \(putBack) start(s) went back in line, none failed")
            }
        }
    }

    /// For the dump.
    func describe() -> [DumpField] {
        [
            .init("starts_held", .bool(!hold.allowsStarts)),
            .init("start_holds_since_start", .int(Int64(hold.holds))),
            .init("jobs_put_back_since_start", .int(Int64(hold.totalPutBack))),
        ]
    }
}

extension SpawnError {
    /// What ran out, and what the administrator can change.
    var shortageExplanation: String {
        switch errorNumber {
        case EMFILE:
            var limit = rlimit()
            let value = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 ? "=\(limit.rlim_cur)" : ""
            return "the open file limit RLIMIT_NOFILE\(value) is reached (a job needs \(FileLimitCheck.descriptorsPerJob)); raise LimitNOFILE= in the unit or lower max_jobs"
        case ENFILE:
            return "the system's open file table is full (fs.file-max)"
        default:
            return "no more processes may be started (RLIMIT_NPROC, or the pids.max of the daemon's cgroup: TasksMax= in the unit)"
        }
    }
}
