import Dispatch
import Logging
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Where a cgroup that is not empty yet is retried: the jobs' queue, its registry and logger
/// (the engine's `JobContext`).
protocol CgroupRemovalContext {
    var queue: SubsystemQueue { get }
    var sources: SourceRegistry { get }
    var logger: Logger { get }
}

/// The cgroup systemd delegated to the daemon, laid out as its documentation asks
/// (docs/CGROUP_DELEGATION.md: no processes in an inner cgroup): the daemon in the leaf
/// `daemon`, each job in a `run-<run id>` beside it, with the controllers limits need
/// enabled in the delegated cgroup's subtree_control. After setup, confined to the jobs
/// queue.
// @unchecked Sendable: after setup (before any queue runs), confined to the jobs queue (`release` asserts it).
public final class JobCgroups: @unchecked Sendable {
    public let path: String
    /// What the delegated cgroup offers (cgroup.controllers), and what is enabled for the jobs.
    public let available: Set<String>
    public let controllers: Set<String>
    private let root: CgroupDirectory
    /// Job cgroups whose rmdir met EBUSY (a process still exiting): retried on a timer.
    private var pendingRemoval: [(cgroup: JobCgroup, attempts: Int)] = []
    private var removalTimer: RegisteredTimer?
    /// The controllers a limit can ask for; io only where the kernel has it for the jobs.
    static let wanted = ["cpu", "io", "memory", "pids"]

    init(path: String) throws(CgroupSetupError) {
        self.path = path
        do {
            root = try CgroupDirectory(path: path)
        } catch {
            throw CgroupSetupError(description: error.unable("open the delegated cgroup \(path)"))
        }
        // Leftovers of an earlier instance killed with SIGKILL: under systemd they were
        // killed with the unit, but their cgroups stay until someone removes them.
        for name in root.children() where name.hasPrefix(JobCgroup.prefix) {
            if let stale = try? root.makeChild(name) { stale.killAll() }
            try? root.removeChild(name)
        }
        do {
            let leaf = try root.makeChild("daemon")
            try leaf.write("cgroup.procs", "0")
        } catch {
            throw CgroupSetupError(description: error.unable("move the daemon into \(path)/daemon"))
        }
        available = Set(((try? root.read("cgroup.controllers")) ?? "").split(whereSeparator: \.isWhitespace).map(String.init))
        // One write per controller: one refused (a controller systemd did not delegate)
        // must not keep the others off.
        for controller in Self.wanted where available.contains(controller) {
            try? root.write("cgroup.subtree_control", "+" + controller)
        }
        controllers = Set(((try? root.read("cgroup.subtree_control")) ?? "").split(whereSeparator: \.isWhitespace).map(String.init))
    }

    /// A cgroup for one process of a run, with the limits applied before anything runs in it.
    func create(_ name: String, limits: JobLimits) throws(SpawnError) -> JobCgroup {
        func failure(_ error: Errno, _ action: String) -> SpawnError {
            SpawnError(step: .cgroup, errorNumber: error.rawValue, description: error.unable(action))
        }
        let directory: CgroupDirectory
        do {
            directory = try root.makeChild(name)
        } catch {
            throw failure(error, "create the job's cgroup \(path)/\(name)")
        }
        for file in limits.cgroupFiles where controllers.contains(file.controller) {
            do {
                try directory.write(file.file, file.value)
            } catch where file.file == "memory.swap.max" && error == .noSuchFileOrDirectory {
                // No swap accounting in this kernel: memory.max alone still holds.
            } catch {
                try? root.removeChild(name)
                throw failure(error, "set \(file.key) (\(file.file) = \(file.value)) in \(directory.path)")
            }
        }
        do {
            return JobCgroup(name: name, directory: directory, procs: try directory.openForWriting("cgroup.procs"))
        } catch {
            try? root.removeChild(name)
            throw failure(error, "open \(directory.path)/cgroup.procs")
        }
    }

    /// Kills what is left in it and removes it; a cgroup whose last process is still
    /// exiting is retried every 50 ms, then every second, and reported after a minute.
    func release(_ cgroup: JobCgroup, context: any CgroupRemovalContext) {
        dispatchPrecondition(condition: .onQueue(context.queue.queue))
        cgroup.closeProcs()
        if cgroup.directory.isPopulated { cgroup.directory.killAll() }
        if (try? root.removeChild(cgroup.name)) != nil { return }
        pendingRemoval.append((cgroup, 0))
        scheduleRemoval(context: context)
    }

    private func scheduleRemoval(context: any CgroupRemovalContext) {
        if removalTimer == nil {
            removalTimer = context.sources.makeTimer(owner: "jobs", target: "remove emptied job cgroups", on: context.queue) { [weak self] in
                self?.retryRemovals(context: context)
            }
        }
        let soonest = pendingRemoval.map(\.attempts).min() ?? 0
        removalTimer?.schedule(after: soonest < 20 ? .milliseconds(50) : .seconds(1))
    }

    private func retryRemovals(context: any CgroupRemovalContext) {
        var left: [(cgroup: JobCgroup, attempts: Int)] = []
        for (cgroup, attempts) in pendingRemoval {
            if cgroup.directory.isPopulated { cgroup.directory.killAll() }
            do {
                try root.removeChild(cgroup.name)
            } catch where error == .resourceBusy && attempts < 80 {
                left.append((cgroup, attempts + 1))
            } catch {
                context.logger.warning("\(error.unable("remove the job cgroup \(cgroup.directory.path)")); \(cgroup.directory.processIDs().count) process(es) still in it; the next start removes it")
            }
        }
        pendingRemoval = left
        if !left.isEmpty { scheduleRemoval(context: context) }
    }

    var pendingRemovalCount: Int { pendingRemoval.count }
}

/// One job process's cgroup (the run's main process, or its on_expire handler).
// @unchecked Sendable: confined to the jobs queue, with the run that holds it.
final class JobCgroup: @unchecked Sendable {
    static let prefix = "run-"
    let name: String
    let directory: CgroupDirectory
    /// Handed to the spawn, which writes "0" to it in the child; closed once spawned.
    private(set) var procs: Int32

    init(name: String, directory: CgroupDirectory, procs: Int32) {
        self.name = name
        self.directory = directory
        self.procs = procs
    }

    func closeProcs() {
        if procs >= 0 { close(procs) }
        procs = -1
    }

    deinit { closeProcs() }

    /// Processes the OOM killer ended in it (memory.events "oom_kill"); 0 without the memory controller.
    var oomKills: Int { directory.counter("oom_kill", in: "memory.events") ?? 0 }
}
