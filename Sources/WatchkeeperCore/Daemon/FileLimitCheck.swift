#if canImport(Glibc)
import Glibc
#endif

/// RLIMIT_NOFILE against what the daemon and its jobs hold. A running job holds 7
/// descriptors (its stdout, stderr and progress pipes, both ends each until their sources
/// are cancelled, and its pidfd); the daemon's own are counted once everything is open. At
/// EMFILE jobs wait in line (StartHold) and start as others end, so fewer run at once than
/// max_jobs says: a warning at start, with the numbers, while it is cheap to fix. A limit
/// with no room for a single job made the daemon report READY=1 and then handle nothing:
/// that is refused.
struct FileLimitCheck: Equatable {
    static let descriptorsPerJob = 7
    /// Beside one job: a scan's open directory, or the dump's state.json being written.
    static let descriptorsInPassing = 2
    /// What the daemon holds when all of it opened (30 measured with one task and one watch
    /// rule: the databases, signalfds, epolls, inotify, the mount table, the locks, the
    /// control socket). After a start at a low limit, when its own opens failed, the count
    /// alone would say there is room.
    static let descriptorsForTheDaemonAtLeast = 30

    enum Verdict: Equatable {
        case fine
        case warn(String)
        case refuse(String)
    }

    /// The daemon's own descriptors: the least any daemon holds until `measure`.
    private(set) var held = FileLimitCheck.descriptorsForTheDaemonAtLeast

    /// Once everything of the daemon's own is open. `counted` nil: listing /proc/self/fd
    /// found no descriptor free, the limit is reached.
    mutating func measure(counted: Int?, soft: UInt64) {
        held = max(counted ?? Int(clamping: soft), Self.descriptorsForTheDaemonAtLeast)
    }

    /// `startOnly`: before the daemon's own are open, only a limit too low for any daemon
    /// is refused (a warning waits for the count).
    func verdict(soft: UInt64, hard: UInt64, maxJobs: Int, startOnly: Bool = false) -> Verdict {
        let forOneJob = held + Self.descriptorsPerJob + Self.descriptorsInPassing
        let forMaxJobs = held + maxJobs * Self.descriptorsPerJob + Self.descriptorsInPassing
        if soft < UInt64(forOneJob) {
            return .refuse("the open file limit RLIMIT_NOFILE=\(soft) (hard \(hard)) leaves no room for a job: the daemon needs \(held) descriptors itself and a job \(Self.descriptorsPerJob) more (\(Self.descriptorsInPassing) spare for scans and dumps); raise LimitNOFILE= in the unit (or ulimit -Hn) to at least \(forOneJob), and to \(forMaxJobs) for max_jobs = \(maxJobs)")
        }
        if !startOnly && soft < UInt64(forMaxJobs) {
            return .warn("open file limit RLIMIT_NOFILE=\(soft) (hard \(hard)) is below what max_jobs = \(maxJobs) needs: \(Self.descriptorsPerJob) per job + the daemon's \(held) + \(Self.descriptorsInPassing) = \(forMaxJobs); raise LimitNOFILE= in the unit (or ulimit -n) or lower max_jobs; until then jobs wait for descriptors and fewer run at once")
        }
        return .fine
    }

    /// The soft limit raised to the hard one (ours to take; select(2) is not used here),
    /// and the limits then in force.
    static func raiseSoftLimit() -> (soft: UInt64, hard: UInt64)? {
        guard let limit = current() else { return nil }
        guard limit.soft < limit.hard else { return limit }
        var raised = rlimit(rlim_cur: rlim_t(limit.hard), rlim_max: rlim_t(limit.hard))
        return setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 ? (limit.hard, limit.hard) : limit
    }

    static func current() -> (soft: UInt64, hard: UInt64)? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        return (UInt64(limit.rlim_cur), UInt64(limit.rlim_max))
    }
}
