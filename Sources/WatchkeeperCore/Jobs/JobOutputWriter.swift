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
/// A sink that cannot keep up slows the job: while journald's queue is full, or the
/// reader of stderr is behind (`StderrStream`), the lines wait here, the channel stops
/// reading the job's pipe, and the job blocks on its next write. No write blocks the
/// daemon, no line is lost, and memory stays one read buffer, one partial line and one
/// read's lines. The job's budget still runs meanwhile.
///
/// On stderr a line is at most PIPE_BUF bytes, so it reaches a pipe in one piece: a
/// longer one goes on in the next line, each piece ending in " […]" as a line cut at
/// the splitter's limit does.
final class JobOutputWriter {
    private let sink: LogSink
    /// stderr: " NAME[PID] STREAM: ", after each line's time stamp. Made at the first line:
    /// most jobs write nothing on one of their streams, and many on neither.
    private lazy var stderrPrefix = Array(" \(job.name)[\(job.pid)] \(job.stream): ".utf8)
    private let job: (name: String, kind: JobKind, runID: String, pid: pid_t, stream: String)
    /// stderr: lines formatted and not yet written, from `pendingWritten`.
    private var pending: [UInt8] = []
    private var pendingWritten = 0
    /// stderr: the time stamp, taken once per read.
    private var stamp: [UInt8] = []
    private static let batchBytes = 65_536
    private static let cutMark = Array(" […]".utf8)

    /// journal: the fields every line shares, in the native encoding; made at the first line.
    private lazy var sharedFields = JournalBatch.encode([
        ("SYSLOG_IDENTIFIER", Array(job.name.utf8)), ("SYSLOG_PID", Array(String(job.pid).utf8)), (job.kind.fieldName, Array(job.name.utf8)),
        ("WATCHKEEPER_RUN_ID", Array(job.runID.utf8)), ("WATCHKEEPER_STREAM", Array(job.stream.utf8)),
    ])
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
        job = (name, kind, runID, pid, stream)
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

    /// The reader of stderr was behind at the last write: lines wait for the channel's retry.
    private var stderrBehind = false

    /// What is gathered goes out, as far as the sink takes it now: called after each read,
    /// so no line waits for the next. False: journald or the reader of stderr is behind,
    /// try again later.
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
        return flushStderr()
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

    /// At the end of a job's final wait for journald: what it has not taken goes to
    /// stderr instead (true), or nothing waited for journald (false).
    func moveJournalLinesToStderr() -> Bool {
        guard isBehind else { return false }
        showUnsentOnStderr()
        return true
    }

    /// At the end of a job's final wait: what the sink does not take now is dropped and
    /// counted, rather than hold the job's record behind a reader that stopped.
    func dropUnwritten() {
        if isBehind { showUnsentOnStderr() }
        guard !flushStderr() else { return }
        droppedBytes += UInt64(pending.count - pendingWritten)
        pending.removeAll(keepingCapacity: false)
        pendingWritten = 0
        stderrBehind = false
    }

    /// Bytes of formatted lines the sink did not take within a job's final wait.
    private(set) var droppedBytes: UInt64 = 0

    /// True when everything formatted is out.
    @discardableResult
    private func flushStderr() -> Bool {
        guard pendingWritten < pending.count else { return true }
        let result = pending.withUnsafeBufferPointer { sink.stderrStream.write($0, from: pendingWritten) }
        pendingWritten = result.offset
        stderrBehind = result.behind
        guard !result.behind else { return false }
        pending.removeAll(keepingCapacity: pending.count <= 4 * Self.batchBytes)
        pendingWritten = 0
        return true
    }

    /// One line of the job's, as one or more stderr lines of at most PIPE_BUF bytes.
    private func appendStderrLine(_ text: UnsafeBufferPointer<UInt8>, continues: Bool) {
        if stamp.isEmpty { stamp = Array(WallTime.now().iso8601.utf8) }
        let room = StderrStream.maxLineBytes - stamp.count - stderrPrefix.count - Self.cutMark.count - 1
        let lineStart = pending.count
        pending += stamp
        pending += stderrPrefix
        let textStart = pending.count
        LineEscaping.appendControlsEscaped(text, to: &pending)
        if pending.count - textStart > room {
            // Too long once escaped: cut the escaped text into pieces that fit, each marked
            // as going on. The text is escaped once, whatever its length.
            let escaped = Array(pending[textStart...])
            pending.removeSubrange(lineStart...)
            var offset = 0
            while escaped.count - offset > room {
                let end = Self.safeCut(escaped, from: offset, limit: offset + room)
                pending += stamp
                pending += stderrPrefix
                pending += escaped[offset..<end]
                pending += Self.cutMark
                pending.append(UInt8(ascii: "\n"))
                offset = end
            }
            pending += stamp
            pending += stderrPrefix
            pending += escaped[offset...]
        }
        if continues { pending += Self.cutMark }
        pending.append(UInt8(ascii: "\n"))
        if pending.count - pendingWritten >= Self.batchBytes && !stderrBehind { flushStderr() }
    }

    /// Where to end a piece of escaped text, at most `limit`: never inside a UTF-8
    /// sequence, nor inside an escape (`\xNN`, `\uNNNN`: a backslash in the 5 bytes before
    /// the cut moves the cut before it; a literal backslash only makes the piece shorter).
    static func safeCut(_ escaped: [UInt8], from start: Int, limit: Int) -> Int {
        var cut = limit
        var steps = 0
        while steps < 3 && cut > start + 1 && escaped[cut] & 0xC0 == 0x80 {
            cut -= 1
            steps += 1
        }
        for position in max(start + 1, cut - 5)..<cut where escaped[position] == UInt8(ascii: "\\") {
            return position
        }
        return cut
    }
}
