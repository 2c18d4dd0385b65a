import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// A child's stdout or stderr: lines into the journal as the job's own entries
/// (SYSLOG_IDENTIFIER is the task's name, so `journalctl -t NAME` shows them), with a
/// `<N>` prefix setting the line's priority. Memory stays bounded whatever the child
/// writes: one read buffer and at most one partial line.
///
/// Its end is a state, not a wait: after the exit the channel reads what is left and
/// gets the last lines out as the sink takes them, on the queue's turns, with a deadline
/// on the jobs' deadline timer (`JobDeadlines`); the run's record waits for it, the queue
/// and every other job do not.
// @unchecked Sendable: confined to the jobs queue, with its child.
final class OutputChannel: @unchecked Sendable {
    let stream: String
    private var source: PolledDescriptor?
    private var splitter = LineSplitter()
    private let writer: JobOutputWriter
    /// The run's last lines, for its hook; shared by its stdout and stderr channels.
    private let tail: OutputTail?
    private var fd: Int32 = -1
    private let context: JobContext
    private let owner: String
    /// While journald or the reader of stderr is behind: the read source is suspended and
    /// this retries the write.
    private var retry: RegisteredTimer?
    private var suspended = false
    private(set) var lines: UInt64 = 0
    private(set) var bytes: UInt64 = 0
    /// Reads per event before yielding the queue to other jobs; the source fires again.
    private static let readsPerEvent = 16
    /// And time per event: every job's timers (budget, kill_grace) share this queue, so a
    /// flood of output that is slow to format (NUL bytes escaped on stderr, a debug build)
    /// must not hold them back by more than this per channel.
    private static let timePerEvent: Duration = .milliseconds(5)
    /// A sink behind: how soon to try again. Polling rather than a writable source:
    /// one timer per waiting channel, not a source shared by all jobs and woken per slot.
    private static let retryInterval: Duration = .milliseconds(2)
    /// At the job's end, how long its last lines may wait for journald before stderr, and
    /// for stderr before they are dropped.
    static let finalFlushTimeout: Duration = .seconds(10)
    /// While closing, the retry backs off to this: a reader stopped for the whole final
    /// wait costs 20 wake-ups a second per channel, not 500.
    private static let closingRetryMax: Duration = .milliseconds(50)

    /// After the exit: what is left in the pipe read and its lines out, or given up on.
    private enum Closing {
        case open
        /// The sink is waited for until `deadline` fires; `stage` says what happens then.
        /// No deadline yet while the close has not had to wait: most end in their first
        /// turn, and a deadline each (registered, in the heap) cost the burst's jobs CPU.
        case draining(stage: FinalStage, deadline: JobDeadline?)
        /// The deadlines passed: the rest is read, and what the sink does not take at once
        /// is dropped and counted.
        case dropping
        case closed
    }
    private enum FinalStage {
        /// Lines wait for journald (or for stderr when that is the sink).
        case sink
        /// journald took nothing in time: its lines were moved to stderr, which gets as long.
        case stderrAfterJournal
    }
    private var closing = Closing.open
    /// Why lines were dropped, for the warning at the end.
    private var dropReason = ""
    private var closingRetry = OutputChannel.retryInterval
    private var whenClosed: [() -> Void] = []
    /// A closing channel keeps itself alive until its end: its child may be let go first.
    private var keepAlive: OutputChannel?

    init(stream: String, pipe: consuming OwnedPipe, name: String, kind: JobKind, runID: String, owner: String, pid: pid_t,
         context: JobContext, tail: OutputTail? = nil) {
        self.stream = stream
        self.tail = tail
        self.context = context
        self.owner = owner
        writer = JobOutputWriter(sink: context.sink, name: name, kind: kind, runID: runID, pid: pid, stream: stream)
        let target = "\(stream) of pid \(pid)"
        let stats = context.sources.register(.read, owner: owner, target: target, on: context.queue)
        let source = context.poller.watch(pipe, owner: owner, target: target, afterClose: { [sources = context.sources] in
            sources.unregister(stats)
        }, handler: { [weak self] in
            stats.fired()
            guard let self else { return }
            self.readAvailable(fd: self.fd)
        })
        fd = source.descriptor.rawValue
        self.source = source
        source.activate()
    }

    var isClosed: Bool {
        if case .closed = closing { return true }
        return false
    }

    /// True while its last lines wait for a sink that is behind.
    var isWaitingForSink: Bool {
        if case .draining = closing { return true }
        return false
    }

    private func readAvailable(fd: Int32) {
        context.poller.withReadBuffer { buffer in readAvailable(fd: fd, into: buffer) }
    }

    private func readAvailable(fd: Int32, into buffer: UnsafeMutableRawBufferPointer) {
        let yieldAt = MonotonicInstant.now + Self.timePerEvent
        for _ in 0..<Self.readsPerEvent {
            if MonotonicInstant.now > yieldAt { return }
            switch readOnce(fd: fd, into: buffer) {
            case .lines:
                if writer.flush() { continue }
                // The sink is behind: read no more until it has taken this read's lines.
                waitForSink()
                return
            case .empty:
                return
            }
        }
    }

    private enum ReadResult { case lines, empty }

    private func readOnce(fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        guard case .bytes(let count) = NonBlockingRead.read(fd, into: buffer) else {
            // EAGAIN: all read. (EOF cannot happen while we hold the write end.)
            return .empty
        }
        bytes += UInt64(count)
        writer.beginRead()
        splitter.feed(UnsafeRawBufferPointer(rebasing: buffer[0..<count])) { line, continues in
            lines += 1
            tail?.append(line)
            writer.line(line, continues: continues)
        }
        return .lines
    }

    private func waitForSink() {
        guard let source, !suspended else { return }
        source.suspend()
        suspended = true
        retryTimer().schedule(after: Self.retryInterval)
    }

    private func retryTimer() -> RegisteredTimer {
        if let retry { return retry }
        let timer = context.sources.makeTimer(owner: owner, target: "\(stream): log sink behind, retry", on: context.queue) { [weak self] in
            guard let self else { return }
            if case .open = self.closing { self.retrySend() } else { self.drainStep() }
        }
        retry = timer
        return timer
    }

    private func retrySend() {
        guard suspended, let source else { return }
        guard writer.flush() else {
            retry?.schedule(after: Self.retryInterval)
            return
        }
        suspended = false
        source.resume()
    }

    /// Reads what is left (the read end is non-blocking) and gets its lines out, then
    /// closes the pipe and calls `then`. Returns at once: while the sink is behind, the
    /// rest happens on later turns of the queue, up to `finalFlushTimeout` for journald
    /// and as long again for stderr; after that what is left is dropped and counted.
    /// Output a leftover descendant writes later is not waited for.
    func close(then: @escaping () -> Void = {}) {
        switch closing {
        case .closed:
            return then()
        case .draining, .dropping:
            whenClosed.append(then)
            return
        case .open:
            break
        }
        guard source != nil else { return then() }
        whenClosed.append(then)
        // Read by the steps below from now on, never by the handler: most closes end in
        // this turn, and their descriptor's close takes it out of the epoll set; a close
        // that has to wait takes it out first (`stopHandlerReads`). An EPOLL_CTL_DEL here
        // cost every job two system calls.
        suspended = false
        keepAlive = self
        closing = .draining(stage: .sink, deadline: nil)
        drainStep()
    }

    /// From the first turn the close has to wait.
    private func armFinalDeadline() {
        if case .draining(let stage, nil) = closing { closing = .draining(stage: stage, deadline: finalDeadline()) }
    }

    private func finalDeadline() -> JobDeadline {
        context.deadlines.schedule(after: Self.finalFlushTimeout, owner: owner,
                                   target: "\(stream): its last lines wait for the log sink, at most \(Self.finalFlushTimeout.compactDescription)") { [weak self] in
            self?.finalDeadlinePassed()
        }
    }

    /// One turn of the close: what waits goes out, then more is read, until the pipe is
    /// empty and everything is out (closed), the sink is behind (a retry later), or this
    /// turn has used its time (a retry at once).
    private func drainStep() {
        guard let source, !isClosed else { return }
        let dropping: Bool
        if case .dropping = closing { dropping = true } else { dropping = false }
        if !flushOrDrop(dropping) { return retryLater() }
        let yieldAt = MonotonicInstant.now + Self.timePerEvent
        let emptied = context.poller.withReadBuffer { buffer -> Bool? in
            while true {
                switch readOnce(fd: source.descriptor.rawValue, into: buffer) {
                case .lines:
                    if !flushOrDrop(dropping) { return nil }
                    if MonotonicInstant.now > yieldAt { return false }
                case .empty:
                    return true
                }
            }
        }
        switch emptied {
        case nil:
            return retryLater()
        case false?:
            // The time of this turn is used: the rest on the next, after what else waits
            // (a leftover descendant that keeps writing is cut off by the deadline).
            stopHandlerReads()
            closingRetry = Self.retryInterval
            armFinalDeadline()
            return retryTimer().schedule(after: .zero)
        case true?:
            splitter.finish { line, continues in
                lines += 1
                tail?.append(line)
                writer.line(line, continues: continues)
            }
            if !flushOrDrop(dropping) { return retryLater() }
            finishClose()
        }
    }

    /// What waits is out (true), or the sink is behind (false); after the deadlines what
    /// it does not take at once is dropped.
    private func flushOrDrop(_ dropping: Bool) -> Bool {
        if writer.flush() {
            closingRetry = Self.retryInterval
            return true
        }
        guard dropping else { return false }
        writer.dropUnwritten()
        return true
    }

    private func retryLater() {
        stopHandlerReads()
        armFinalDeadline()
        retryTimer().schedule(after: closingRetry)
        closingRetry = min(closingRetry * 2, Self.closingRetryMax)
    }

    /// A close that goes on in a later turn: the pipe is read by its steps only, so it
    /// leaves the epoll set (a level-triggered descriptor left in it would call the
    /// handler on every pass).
    private func stopHandlerReads() {
        source?.suspend()
    }

    private func finalDeadlinePassed() {
        guard case .draining(let stage, _) = closing else { return }
        let timeout = Self.finalFlushTimeout.compactDescription
        if stage == .sink, writer.moveJournalLinesToStderr() {
            // journald did not take them in time: shown on stderr rather than lost, and
            // stderr gets the same time again for them.
            closing = .draining(stage: .stderrAfterJournal, deadline: finalDeadline())
        } else {
            dropReason = stage == .sink ? "stderr's reader took nothing for \(timeout)" : "neither journald nor then stderr's reader took them within \(timeout) each"
            closing = .dropping
        }
        closingRetry = Self.retryInterval
        drainStep()
    }

    /// The drain's last resort: what still waits for a sink is dropped now.
    func stopWaitingForSink() {
        guard case .draining(_, let deadline) = closing else { return }
        deadline?.cancel()
        dropReason = "the daemon is stopping and its drain ran out"
        closing = .dropping
        drainStep()
    }

    private func finishClose() {
        if case .draining(_, let deadline) = closing { deadline?.cancel() }
        closing = .closed
        if writer.droppedBytes > 0 {
            context.logger.warning("\(owner): dropped the last \(writer.droppedBytes) bytes of its \(stream): \(dropReason)")
        }
        retry?.cancel()
        retry = nil
        source?.cancel()
        source = nil
        let waiting = whenClosed
        whenClosed = []
        keepAlive = nil
        for body in waiting { body() }
    }
}
