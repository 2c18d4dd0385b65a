import CWatchkeeperSpawn
import Dispatch

/// The pipes of the next job (stdout, stderr, progress), made ahead of its event: the
/// seven system calls that make them (three `pipe2`, three `fcntl` for the non-blocking read
/// ends, `F_SETPIPE_SZ` for the progress pipe) then run after the previous job's exec
/// instead of between an event and its job's (docs/measurements/latency-path.md). One set,
/// six descriptors: a burst takes the set for its first job and makes the others' in line,
/// as before. Pipes nobody wrote to are as good as new, and every end is close-on-exec, so
/// a set waiting here reaches no child. Touched only on the jobs queue.
///
/// Once a set is here, a child can be made for it too (`prepareSoon`, after a child's exit):
/// a prepared child (Sources/CWatchkeeperSpawn/prepared.c) holds the set's write ends as
/// its fds 1 to 3 and waits, so that the job that takes the whole set is a wake, not a
/// clone and a setup (latency-path.md, "The prepared child"). Only after a spawn of the kind
/// it serves (stdin /dev/null, the daemon's user, all three pipes), so a configuration whose
/// jobs cannot use one never makes one, and an idle daemon has none. Hooks and on_expire
/// handlers make pipes of their own (JobContext.spawn's `forJob`) and never touch either.
/// `WATCHKEEPER_NO_PREPARED_CHILD` in the daemon's environment turns prepared children off,
/// for a tool that cannot follow their clone (valgrind ends the daemon at it).
final class JobPipeReserve: @unchecked Sendable {
    private let queue: SubsystemQueue
    private var stdout: OwnedPipe?
    private var stderr: OwnedPipe?
    private var progress: OwnedPipe?
    private var refillQueued = false
    private var prepareQueued = false
    /// The prepared child of the set above, if any.
    private var prepared: (ticket: UInt64, pid: pid_t)?
    /// Which pipes the spawn being made took (bits: stdout 1, stderr 2, progress 4), from
    /// here and in all; cleared at each spawn.
    private var takenFromSet: UInt8 = 0
    private var taken: UInt8 = 0
    /// Whether the last spawn could have used a prepared child.
    private var lastSpawnFits = false
    /// False once the engine stops accepting jobs (or from the start, when switched off):
    /// nothing is prepared any more.
    private var preparing: Bool
    private static let wholeSet: UInt8 = 7

    /// Bytes asked for the progress pipe: room for bursts between two progress reads.
    static let progressCapacity = 1 << 20

    init(queue: SubsystemQueue, prepares: Bool) {
        self.queue = queue
        preparing = prepares
    }

    /// The environment variable that switches prepared children off, whatever its value.
    static let switchedOffBy = "WATCHKEEPER_NO_PREPARED_CHILD"

    /// The prepared stdout pipe, or one made now.
    func takeOutput() throws(SpawnError) -> OwnedPipe {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        taken |= 1
        if let pipe = stdout.take() {
            takenFromSet |= 1
            return pipe
        }
        return try OwnedPipe.forJobOutput()
    }

    /// The prepared stderr pipe, or one made now.
    func takeErrorOutput() throws(SpawnError) -> OwnedPipe {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        taken |= 2
        if let pipe = stderr.take() {
            takenFromSet |= 2
            return pipe
        }
        return try OwnedPipe.forJobOutput()
    }

    /// The prepared progress pipe, or one made and enlarged now.
    func takeProgress() throws(SpawnError) -> OwnedPipe {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        taken |= 4
        if let pipe = progress.take() {
            takenFromSet |= 4
            return pipe
        }
        return try Self.makeProgress()
    }

    /// Makes what was taken, once the work item that took it (the spawn) has run: a queued
    /// block, so never on the way to an exec. Failing is harmless: the next spawn makes its
    /// own pipes and reports its own error (descriptors short: the job waits for one).
    func refillSoon() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard !refillQueued, stdout == nil || stderr == nil || progress == nil else { return }
        refillQueued = true
        queue.async { [self] in
            refillQueued = false
            // Its set was taken by a spawn that did not come (a failure on the way): its
            // copies of the write ends must not outlive the pipes' new owners.
            if stdout == nil || stderr == nil || progress == nil { discardPrepared() }
            if stdout == nil { stdout = try? OwnedPipe.forJobOutput() }
            if stderr == nil { stderr = try? OwnedPipe.forJobOutput() }
            if progress == nil { progress = try? Self.makeProgress() }
        }
    }

    /// For the spawn about to be made: the ticket of the prepared child if this spawn took its
    /// whole set (0: none; the spawn uses it if the request fits, discards it otherwise). A
    /// child whose set was taken in part is discarded here, before the spawn, so the new
    /// owner's pipes have no other writer; one whose set is untouched waits for the next.
    func takePrepared(for request: SpawnRequest) -> UInt64 {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        let fromSet = takenFromSet
        lastSpawnFits = taken == Self.wholeSet && request.standardInput == nil && request.credentials == nil && !request.forceFork
        taken = 0
        takenFromSet = 0
        guard let child = prepared else { return 0 }
        if fromSet == Self.wholeSet {
            prepared = nil
            return child.ticket
        }
        if fromSet != 0 { discardPrepared() }
        return 0
    }

    /// Makes a child for the set, in a queued block, if the last spawn could have used one
    /// and none waits. Called when a child has exited: not right after a spawn, where the
    /// clone and the new child's setup would take CPU from the job's start-up.
    func prepareSoon() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard preparing, lastSpawnFits, prepared == nil, !prepareQueued else { return }
        prepareQueued = true
        queue.async { [self] in
            prepareQueued = false
            guard preparing, lastSpawnFits, prepared == nil,
                  let out = stdout?.writeEnd.rawValue, let err = stderr?.writeEnd.rawValue, let fd3 = progress?.writeEnd.rawValue
            else { return }
            var ticket: UInt64 = 0
            var pid: pid_t = 0
            // Failing (no block free, -ENOSYS on an architecture without raw system calls)
            // only means the next job is cloned as before.
            guard wk_prepare(out, err, fd3, &ticket, &pid) == 0 else { return }
            takenFromSet = 0
            prepared = (ticket, pid)
        }
    }

    /// No more prepared children: the engine is stopping.
    func stopPreparing() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        preparing = false
        discardPrepared()
    }

    private func discardPrepared() {
        guard let child = prepared.take() else { return }
        wk_prepared_discard(child.ticket)
    }

    /// The pid of the prepared child, if one waits (for the dump and tests).
    var preparedPID: pid_t? {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        return prepared?.pid
    }

    deinit {
        if let child = prepared { wk_prepared_discard(child.ticket) }
    }

    /// Whether a whole set is waiting (for tests and the dump).
    var isFull: Bool {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        return stdout != nil && stderr != nil && progress != nil
    }

    private static func makeProgress() throws(SpawnError) -> OwnedPipe {
        let pipe = try OwnedPipe.forJobOutput()
        _ = pipe.enlarge(to: progressCapacity)
        return pipe
    }
}
