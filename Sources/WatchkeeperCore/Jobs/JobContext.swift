import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// What every child-owning object needs from the daemon. A class: each run, child and
/// channel keeps it, and a copy of a struct of a dozen references was a dozen retains on
/// the way to every exec.
public final class JobContext: CgroupRemovalContext, Sendable {
    public let queue: SubsystemQueue
    public let sink: LogSink
    public let logger: Logger
    public let sources: SourceRegistry
    /// The daemon's environment, read once: jobs get PATH, LANG, LC_ALL and TZ from it.
    public let daemonEnvironment: [String: String]
    /// The daemon's own passwd entry, read once rather than at every spawn: jobs without
    /// `user` get its HOME, USER, LOGNAME and SHELL.
    let daemonAccount: Account?
    /// A cgroup per job where one is delegated to the daemon, process groups otherwise.
    public let containment: JobContainment
    /// Every job's pidfd and pipes, in one epoll instance of `queue`.
    let poller: DescriptorPoller
    /// Every job's budget, warn_at and kill_grace deadline, on one timer of `queue`.
    let deadlines: JobDeadlines
    /// The next job's pipes, made after the previous spawn rather than on the way to its exec.
    let pipeReserve: JobPipeReserve
    /// Every spawn's argv and envp, in storage kept from one spawn to the next.
    private let strings = SpawnStrings()

    public init(queue: SubsystemQueue, sink: LogSink, logger: Logger, sources: SourceRegistry, daemonEnvironment: [String: String],
                containment: JobContainment = .processGroups(reason: "not set up")) {
        self.queue = queue
        self.sink = sink
        self.logger = logger
        self.sources = sources
        self.daemonEnvironment = daemonEnvironment
        self.daemonAccount = Account.lookup(uid: geteuid())
        self.containment = containment
        self.poller = DescriptorPoller(queue: queue, sources: sources, logger: logger, owner: "jobs", purpose: "job descriptors (pidfds, output and progress pipes)")
        self.deadlines = JobDeadlines(queue: queue, sources: sources)
        self.pipeReserve = JobPipeReserve(queue: queue, prepares: daemonEnvironment[JobPipeReserve.switchedOffBy] == nil)
    }

    /// The queue's SpawnStrings, emptied, for the next spawn request: what was in them is
    /// gone, so a request built on them is spawned before the next one is made.
    func spawnStrings() -> SpawnStrings {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        strings.reset()
        return strings
    }

    /// A one-shot timer on the jobs queue that the calling thread sets itself (`PolledTimer`),
    /// or a dispatch timer when no timerfd can be made (no descriptor left).
    func makeTimer(owner: String, target: String, handler: @escaping () -> Void) -> any QueueTimer {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        if let timer = try? PolledTimer(poller: poller, sources: sources, queue: queue, owner: owner, target: target, handler: handler) {
            return timer
        }
        return sources.makeTimer(owner: owner, target: target, on: queue, handler: handler)
    }

    /// A cgroup for one process of a run, when the daemon has cgroups; released by the
    /// ChildProcess it is handed to, or by the caller if the spawn fails.
    func makeCgroup(runID: String, suffix: String = "", limits: JobLimits) throws(SpawnError) -> JobCgroup? {
        guard case .cgroups(let tree) = containment else { return nil }
        return try tree.create(JobCgroup.prefix + runID + suffix, limits: limits)
    }

    func release(_ cgroup: JobCgroup) {
        guard case .cgroups(let tree) = containment else { return }
        tree.release(cgroup, context: self)
    }

    /// Spawns one process of a run (the job, its on_expire handler, a hook) in a cgroup of
    /// its own, set in `cgroup`, when the daemon has cgroups; the cgroup goes again if the
    /// spawn fails. Only a job (`forJob`) uses the pipe reserve and its prepared child: a
    /// hook's or handler's spawn leaves both to the next job.
    func spawn(_ request: SpawnRequest, runID: String, suffix: String = "", limits: JobLimits, cgroup: inout JobCgroup?,
               forJob: Bool) throws(SpawnError) -> SpawnedProcess {
        var request = request
        cgroup = try makeCgroup(runID: runID, suffix: suffix, limits: limits)
        request.cgroupProcsDescriptor = cgroup?.procs
        request.cgroupPath = cgroup?.directory.path
        if forJob { request.preparedTicket = pipeReserve.takePrepared(for: request) }
        do {
            let spawned = try ProcessSpawner.spawn(request)
            if forJob { pipeReserve.refillSoon() }
            return spawned
        } catch {
            if let made = cgroup { release(made) }
            cgroup = nil
            throw error
        }
    }
}
