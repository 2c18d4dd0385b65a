import CWatchkeeperSystem

#if canImport(Glibc)
import Glibc
#endif

/// A job's stdout or stderr on its way to the log, the daemon's hottest path: a job may
/// write a gigabyte. Everything that is the same for every line (the journal fields
/// naming the job, the stderr prefix) is prepared once; lines are gathered per read and
/// go out together: to the journal as up to 64 entries per syscall (`JournalSocket`),
/// to stderr as one write.
///
/// A sink that cannot keep up slows the job: while journald's queue is full the entries
/// wait here (`isBehind`), the channel stops reading the job's pipe, and the job blocks on
/// its next write (a stderr reader that is slow blocks the write itself). No line is lost,
/// and memory stays one read buffer, one partial line and one read's batch. The job's
/// budget still runs meanwhile.
final class JobOutputWriter {
    private let sink: LogSink
    /// stderr: " NAME[PID] STREAM: ", after each line's time stamp.
    private let stderrPrefix: [UInt8]
    /// stderr: lines formatted since the last write.
    private var pending: [UInt8] = []
    /// stderr: the time stamp, taken once per read.
    private var stamp: [UInt8] = []
    private static let batchBytes = 65_536
    private static let cutMark = Array(" […]".utf8)

    /// journal: the fields every line shares, in the native encoding.
    private let sharedFields: [UInt8]
    private static let priorityFields = (0...7).map { Array("PRIORITY=\($0)\n".utf8) }
    private static let messageKey = Array("MESSAGE=".utf8)
    private var batch = JournalBatch()
    /// How many of the batch's entries journald has taken.
    private var sent = 0
    /// Where each entry's MESSAGE value lies in the batch, to show it on stderr instead
    /// when the journal cannot take it.
    private var messages: [(start: Int, length: Int)] = []

    init(sink: LogSink, name: String, kind: JobKind, runID: String, pid: pid_t, stream: String) {
        self.sink = sink
        stderrPrefix = Array(" \(name)[\(pid)] \(stream): ".utf8)
        sharedFields = JournalBatch.encode([
            ("SYSLOG_IDENTIFIER", Array(name.utf8)), ("SYSLOG_PID", Array(String(pid).utf8)), (kind.fieldName, Array(name.utf8)),
            ("WATCHKEEPER_RUN_ID", Array(runID.utf8)), ("WATCHKEEPER_STREAM", Array(stream.utf8)),
        ])
    }

    /// Before the lines of one read: their time stamp for stderr.
    func beginRead() {
        stamp = sink.target == .stderr ? Array(WallTime.now().iso8601.utf8) : []
    }

    func line(_ bytes: UnsafeBufferPointer<UInt8>, continues: Bool) {
        let (priority, start) = LineSplitter.priorityPrefix(bytes)
        let text = UnsafeBufferPointer(rebasing: bytes[start...])
        if sink.journalSocket != nil {
            batch.beginEntry()
            batch.append(sharedFields)
            batch.append(Self.priorityFields[priority ?? 6])
            let messageStart = batch.bytes + Self.messageKey.count
            batch.appendField(prefix: Self.messageKey, value: text, suffix: continues ? Self.cutMark : [])
            messages.append((messageStart, batch.bytes - 1 - messageStart))
            batch.endEntry()
            if batch.bytes >= 4 * Self.batchBytes && !isBehind { flush() }
        } else {
            appendStderrLine(text, continues: continues)
        }
    }

    /// Entries wait for room in journald's queue.
    var isBehind: Bool { sent < batch.count }

    /// What is gathered goes out, as far as the sink takes it now: called after each read,
    /// so no line waits for the next. False: journald is behind, try again later.
    @discardableResult
    func flush() -> Bool {
        if let journal = sink.journalSocket, batch.count > 0 {
            let result = journal.send(batch, from: sent)
            sent = result.sent
            if result.behind {
                flushStderr()
                return false
            }
            // The journal is gone: the rest is shown on stderr rather than lost.
            showUnsentOnStderr()
        }
        flushStderr()
        return true
    }

    private func showUnsentOnStderr() {
        for index in sent..<batch.count {
            batch.arena.withUnsafeBufferPointer { arena in
                let message = messages[index]
                appendStderrLine(UnsafeBufferPointer(rebasing: arena[message.start..<(message.start + message.length)]), continues: false)
            }
        }
        batch.removeAll()
        messages.removeAll(keepingCapacity: true)
        sent = 0
    }

    /// The job's last lines: waits for journald (up to `timeout`) so they are in before its
    /// run record; what still does not fit then goes to stderr.
    func flushWaiting(timeout: Duration) {
        let deadline = MonotonicInstant.now + timeout
        while !flush() {
            guard MonotonicInstant.now < deadline, let journal = sink.journalSocket else {
                // journald did not take them in time: shown on stderr rather than lost.
                showUnsentOnStderr()
                flushStderr()
                return
            }
            journal.waitUntilWritable(timeout: .milliseconds(100))
        }
    }

    private func flushStderr() {
        guard !pending.isEmpty else { return }
        StandardError.write(bytes: pending)
        pending.removeAll(keepingCapacity: pending.count <= 4 * Self.batchBytes)
    }

    private func appendStderrLine(_ text: UnsafeBufferPointer<UInt8>, continues: Bool) {
        if stamp.isEmpty { stamp = Array(WallTime.now().iso8601.utf8) }
        pending += stamp
        pending += stderrPrefix
        LineEscaping.appendControlsEscaped(text, to: &pending)
        if continues { pending += Self.cutMark }
        pending.append(UInt8(ascii: "\n"))
        if pending.count >= Self.batchBytes { flushStderr() }
    }
}
