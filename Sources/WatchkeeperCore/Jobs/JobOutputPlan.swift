import CWatchkeeperSystem
import CWatchkeeperSystemd

#if canImport(Glibc)
import Glibc
#endif

/// A job's fds 1 and 2, decided before the spawn by the rule's `output`: two pipes the
/// daemon reads line by line (`daemon`), or one descriptor the job writes to itself
/// (`direct`): a journald stream named after the job when the daemon logs to the journal,
/// as systemd gives a service, else the daemon's own stderr. Direct output costs the daemon
/// no pipe, no read source and no CPU per line (docs/measurements/performance.md).
struct JobOutputPlan: ~Copyable {
    private var stdoutPipe: OwnedPipe?
    private var stderrPipe: OwnedPipe?
    /// The journal stream: the child gets copies as fds 1 and 2; ours closes with the plan.
    private var stream: OwnedFileDescriptor?
    let stdout: Int32
    let stderr: Int32
    /// For the job: JOURNAL_STREAM when its output is a journal stream, as systemd sets it.
    let environment: [(String, [UInt8])]

    /// `pipes`: the reserve a job's pipes come from; nil for a hook or an on_expire handler,
    /// which make their own and leave the reserve's set (and the prepared child holding it)
    /// to the next job.
    init(route: JobOutputRoute, name: String, sink: LogSink, pipes: JobPipeReserve?, warn: (String) -> Void) throws(SpawnError) {
        switch route {
        case .daemon:
            let stdoutPipe: OwnedPipe
            let stderrPipe: OwnedPipe
            if let pipes {
                stdoutPipe = try pipes.takeOutput()
                stderrPipe = try pipes.takeErrorOutput()
            } else {
                stdoutPipe = try OwnedPipe.forJobOutput()
                stderrPipe = try OwnedPipe.forJobOutput()
            }
            stdout = stdoutPipe.writeEnd.rawValue
            stderr = stderrPipe.writeEnd.rawValue
            self.stdoutPipe = consume stdoutPipe
            self.stderrPipe = consume stderrPipe
            stream = nil
            environment = []
        case .direct:
            stdoutPipe = nil
            stderrPipe = nil
            guard sink.target == .journal else {
                stream = nil
                stdout = 2
                stderr = 2
                environment = []
                return
            }
            // Priority info, and a "<N>" prefix sets a line's priority, as through the daemon.
            let fd = wk_journal_stream_fd(WK_JOURNAL_STDOUT, name, LOG_INFO, 1)
            guard fd >= 0 else {
                warn("unable to open a journal stream for \(name)'s output: \(errorText(-fd)); it goes to the daemon's stderr")
                stream = nil
                stdout = 2
                stderr = 2
                environment = []
                return
            }
            var info = stat()
            fstat(fd, &info)
            stream = OwnedFileDescriptor(adopting: fd)
            stdout = fd
            stderr = fd
            environment = [("JOURNAL_STREAM", Array("\(info.st_dev):\(info.st_ino)".utf8))]
        }
    }

    /// After the spawn: the channels that read the pipes (none for direct output).
    consuming func channels(name: String, kind: JobKind, runID: String, owner: String, pid: pid_t, streams: (stdout: String, stderr: String),
                            context: JobContext, tail: OutputTail? = nil) -> [OutputChannel] {
        guard let stdoutPipe = stdoutPipe.take(), let stderrPipe = stderrPipe.take() else { return [] }
        return [
            OutputChannel(stream: streams.stdout, pipe: stdoutPipe, name: name, kind: kind, runID: runID, owner: owner, pid: pid, context: context, tail: tail),
            OutputChannel(stream: streams.stderr, pipe: stderrPipe, name: name, kind: kind, runID: runID, owner: owner, pid: pid, context: context, tail: tail),
        ]
    }
}
