#if canImport(Glibc)
import Glibc
#endif

/// What a finished job left behind in its process group (or cgroup), as the kill that
/// ends it sees it: `ChildProcess`, or a test's stand-in.
protocol LeftoverProcesses: AnyObject {
    var pid: pid_t { get }
    var groupHasMembers: Bool { get }
    var containerDescription: String { get }
    @discardableResult
    func signalGroup(_ signal: Int32) -> Bool
    func releaseContainment()
}

extension ChildProcess: LeftoverProcesses {}

/// Processes a finished job left in its group, until the kill that ends them: the run
/// sent `stop_signal`; SIGKILL follows here after the job's kill_grace, or at once as the
/// drain's last resort, and the containment (cgroup) is released either way. Confined to
/// the jobs queue; the drain waits while `count` is above zero.
final class LingeringKills {
    private struct Entry {
        let key: JobKey
        let group: any LeftoverProcesses
        let timer: RegisteredTimer
    }

    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    private var entries: [pid_t: Entry] = [:]

    init(queue: SubsystemQueue, sources: SourceRegistry) {
        self.queue = queue
        self.sources = sources
    }

    var count: Int { entries.count }

    /// SIGKILL to `group` after `grace`, if anything is left in it then. `onKilled` runs on
    /// the jobs queue after that kill, not after `killAll`. A group that lingers again (its
    /// leader's pid reused) replaces the earlier kill.
    func linger(_ group: any LeftoverProcesses, key: JobKey, grace: Duration, onKilled: @escaping () -> Void) {
        let pid = group.pid
        entries[pid]?.timer.cancel()
        let timer = sources.makeTimer(owner: "jobs", target: "\(key): kill leftovers in \(group.containerDescription)", on: queue) { [weak self] in
            if group.groupHasMembers { group.signalGroup(SIGKILL) }
            group.releaseContainment()
            guard let self, let entry = self.entries.removeValue(forKey: pid) else { return }
            entry.timer.cancel()
            onKilled()
        }
        entries[pid] = Entry(key: key, group: group, timer: timer)
        timer.schedule(after: grace)
    }

    /// Ends every leftover group now (the drain's last resort).
    func killAll() {
        for entry in entries.values {
            entry.group.signalGroup(SIGKILL)
            entry.group.releaseContainment()
            entry.timer.cancel()
        }
        entries.removeAll()
    }
}
