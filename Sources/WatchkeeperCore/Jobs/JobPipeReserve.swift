import Dispatch

/// The pipes of the next job (stdout, stderr, progress), made ahead of its event: the
/// seven system calls that make them (three `pipe2`, three `fcntl` for the non-blocking read
/// ends, `F_SETPIPE_SZ` for the progress pipe) then run after the previous job's exec
/// instead of between an event and its job's (docs/measurements/latency-path.md). One set,
/// six descriptors: a burst takes the set for its first job and makes the others' in line,
/// as before. Pipes nobody wrote to are as good as new, and every end is close-on-exec, so
/// a set waiting here reaches no child. Touched only on the jobs queue.
final class JobPipeReserve: @unchecked Sendable {
    private let queue: SubsystemQueue
    private var stdout: OwnedPipe?
    private var stderr: OwnedPipe?
    private var progress: OwnedPipe?
    private var refillQueued = false

    /// Bytes asked for the progress pipe: room for bursts between two progress reads.
    static let progressCapacity = 1 << 20

    init(queue: SubsystemQueue) {
        self.queue = queue
    }

    /// The prepared stdout pipe, or one made now.
    func takeOutput() throws(SpawnError) -> OwnedPipe {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        if let pipe = stdout.take() { return pipe }
        return try OwnedPipe.forJobOutput()
    }

    /// The prepared stderr pipe, or one made now.
    func takeErrorOutput() throws(SpawnError) -> OwnedPipe {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        if let pipe = stderr.take() { return pipe }
        return try OwnedPipe.forJobOutput()
    }

    /// The prepared progress pipe, or one made and enlarged now.
    func takeProgress() throws(SpawnError) -> OwnedPipe {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        if let pipe = progress.take() { return pipe }
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
            if stdout == nil { stdout = try? OwnedPipe.forJobOutput() }
            if stderr == nil { stderr = try? OwnedPipe.forJobOutput() }
            if progress == nil { progress = try? Self.makeProgress() }
        }
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
