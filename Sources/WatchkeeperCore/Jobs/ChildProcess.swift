import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// One spawned process seen from the daemon: its pidfd in the jobs' epoll for its exit
/// (no SIGCHLD handler, no waitpid(-1)) and each output pipe there too, streaming lines
/// into the journal. Confined to the jobs queue; every fd is closed only by cancelling
/// its `PolledDescriptor`.
///
/// The pidfd leaves epoll before it is reaped (a reaped pid's pidfd reports EPOLLHUP) and
/// each pipe's write end stays open until its read end has left (no EOF, no hang-up):
/// rules from the time each was a dispatch source, when a hang-up raced libdispatch's
/// manager thread (swift-corelibs-libdispatch #949), and still what keeps a level-triggered
/// descriptor from firing in a loop.
// @unchecked Sendable: confined to the jobs queue, where its descriptors are polled.
final class ChildProcess: @unchecked Sendable {
    let name: String
    let runID: String
    let pid: pid_t
    private let context: JobContext
    private var exitSource: PolledDescriptor?
    private var budgetTimer: JobDeadline?
    private var outputs: [OutputChannel] = []
    private var onExit: ((ProcessExit) -> Void)?
    /// Set before `onExit` runs when the child's setup or exec failed after a spawn that did
    /// not wait for it (`SpawnRequest.reportsLater`): what the spawn would have thrown. Read
    /// by `onExit` (a property rather than a second closure: no allocation per job).
    private(set) var spawnFailure: SpawnError?
    private(set) var exit: ProcessExit?
    /// Its cgroup, or nil: its process group is all that holds it together.
    private var cgroup: JobCgroup?
    /// Read from memory.events when the process exited, before the cgroup goes.
    private(set) var oomKills = 0

    /// `output`: the child's stdout and stderr, with the stream names its lines are
    /// journaled under when they pass through the daemon. `killAfter`: a budget of the child's own (the expiration handler's),
    /// enforced here so it holds even if the job that started it has already finished.
    /// A spawn made with `reportsLater` has its report collected here (`spawnFailure`).
    /// `owner`: the run's label ("task backup run 0123…"), how its sources are listed.
    init(name: String, kind: JobKind, runID: String, owner: String, spawned: consuming SpawnedProcess,
         output: consuming JobOutputPlan, streams: (stdout: String, stderr: String), context: JobContext, cgroup: JobCgroup?,
         tail: OutputTail? = nil, killAfter: Duration? = nil, onKill: ((Duration) -> Void)? = nil, onExit: @escaping (ProcessExit) -> Void) {
        let pid = spawned.pid
        let pendingReport = spawned.pendingReport
        cgroup?.closeProcs()
        self.cgroup = cgroup
        self.name = name
        self.runID = runID
        self.pid = pid
        self.context = context
        self.onExit = onExit
        outputs = output.channels(name: name, kind: kind, runID: runID, owner: owner, pid: pid, streams: streams, context: context, tail: tail)
        let target = "pidfd of pid \(pid)"
        let stats = context.sources.register(.read, owner: owner, target: target, on: context.queue)
        // The handlers hold `self` strongly on purpose: a child's owner lives as long as
        // the child, whoever started it; libdispatch drops the handlers after cancel.
        // Readable means exited (not yet reaped): stop watching first, and reap through the
        // pidfd once it is out of epoll, before it closes.
        let source = context.poller.watch(spawned.pidfd, owner: owner, target: target, beforeClose: { [sources = context.sources] pidfd in
            let status = reap(pid: pid, pidfd: pidfd.rawValue)
            sources.unregister(stats)
            // Reaped, so its report (if it failed before its exec) is all there.
            if let status { self.exited(status, spawnFailure: pendingReport?.collect()) }
        }, handler: {
            stats.fired()
            let source = self.exitSource
            source?.cancel()
        })
        exitSource = source
        source.activate()
        if let killAfter {
            budgetTimer = context.deadlines.schedule(after: killAfter, owner: owner, target: "pid \(pid) budget \(killAfter.compactDescription)") { [weak self] in
                guard let self, self.exit == nil else { return }
                onKill?(killAfter)
                self.signalGroup(SIGKILL)
            }
        }
    }

    private func exited(_ status: ProcessExit, spawnFailure: SpawnError?) {
        guard exit == nil else { return }
        exit = status
        oomKills = cgroup?.oomKills ?? 0
        exitSource = nil
        budgetTimer?.cancel()
        budgetTimer = nil
        self.spawnFailure = spawnFailure
        let handler = onExit
        onExit = nil
        handler?(status)
        // What the child wrote before it exited is read now; its pipes close.
        closeOutputs()
        context.pipeReserve.prepareSoon()
    }

    /// Every process of the job: its cgroup's (SIGKILL through cgroup.kill), or its
    /// process group's (the child is a session leader, so its pid is the pgid).
    @discardableResult
    func signalGroup(_ signal: Int32) -> Bool {
        let reached: Bool
        if let cgroup {
            reached = signal == SIGKILL ? cgroup.directory.killAll() > 0 : cgroup.directory.signalAll(signal) > 0
        } else {
            reached = kill(-pid, signal) == 0
        }
        // A child still in its setup (the spawn did not wait for its exec) may not have
        // joined its cgroup or made its process group yet. Not reaped (that happens on this
        // queue, with `exit` set), its pid is still its own; the signal waits, blocked,
        // until the end of its setup and then takes effect.
        guard !reached, exit == nil else { return reached }
        return kill(pid, signal) == 0
    }

    /// True while any process of the job is alive. A process group's id stays reserved
    /// (no new process can get it) while one member lives, so this cannot hit a stranger.
    var groupHasMembers: Bool {
        guard let cgroup else { return kill(-pid, 0) == 0 }
        return cgroup.directory.isPopulated
    }

    /// "its cgroup /sys/fs/…/run-x" or "its process group 1234", for messages.
    var containerDescription: String {
        cgroup.map { "its cgroup \($0.directory.path)" } ?? "its process group \(pid)"
    }

    /// After the exit and its leftovers: kills what is still in the cgroup and removes it.
    func releaseContainment() {
        guard let cgroup else { return }
        self.cgroup = nil
        context.release(cgroup)
    }

    /// After the exit: what is still in the pipes is read and its lines go out, then the
    /// pipes close and `then` runs (at once when nothing waits for a sink; otherwise on a
    /// later turn of the queue, within the channels' final deadlines). Output a leftover
    /// descendant writes later is not waited for.
    func closeOutputs(then: @escaping () -> Void = {}) {
        var open = outputs.count
        guard open > 0 else { return then() }
        for output in outputs {
            output.close {
                open -= 1
                if open == 0 { then() }
            }
        }
    }

    /// True while a channel's last lines wait for journald or stderr's reader.
    var isWaitingForSink: Bool { outputs.contains { $0.isWaitingForSink } }

    /// The drain's last resort: output still waiting for a sink is dropped now.
    func stopWaitingForSinks() {
        for output in outputs { output.stopWaitingForSink() }
    }

    var outputStats: [(stream: String, lines: UInt64, bytes: UInt64)] {
        outputs.map { ($0.stream, $0.lines, $0.bytes) }
    }
}
