import CWatchkeeperSystem
import CWatchkeeperSystemd
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where every log line of the process goes: the journal (native fields) when
/// stderr is connected to it, readable lines on stderr otherwise. One sink per
/// process; the swift-log handlers all share it, so a reload can change the log
/// level of every logger at once.
public final class LogSink: Sendable {
    public enum Target: String, Sendable {
        case journal
        case stderr
    }

    public let target: Target
    public let problems: ProblemRing
    /// Job output's way to the journal, when that is the target.
    let journalSocket: JournalSocket?
    /// Job output's way to stderr, never blocking (the daemon's own lines use fd 2 as is).
    let stderrStream: StderrStream
    private let levelIndex: Atomic<Int>

    /// The daemon's own entries, written on a queue of their own so no caller waits for
    /// journald or a stderr reader.
    let outbox: LogOutbox

    public convenience init(target: Target, level: Logger.Level, problemCapacity: Int, stderrStream: StderrStream = .shared) {
        self.init(target: target, level: level, problemCapacity: problemCapacity, stderrStream: stderrStream) { entries in
            Self.write(entries, target: target)
        }
    }

    /// `write`: where the daemon's own entries go, on the outbox's queue (tests: a slow journal).
    init(target: Target, level: Logger.Level, problemCapacity: Int, stderrStream: StderrStream, write: @escaping @Sendable ([LogOutbox.Entry]) -> Void) {
        self.target = target
        self.outbox = LogOutbox(write: write)
        self.journalSocket = target == .journal ? JournalSocket() : nil
        self.stderrStream = stderrStream
        self.problems = ProblemRing(capacity: problemCapacity)
        self.levelIndex = Atomic(Logger.Level.allCases.firstIndex(of: level) ?? 2)
    }

    public var level: Logger.Level {
        get { Logger.Level.allCases[levelIndex.load(ordering: .relaxed)] }
    }

    public func setLevel(_ level: Logger.Level) {
        levelIndex.store(Logger.Level.allCases.firstIndex(of: level) ?? 2, ordering: .relaxed)
    }

    /// systemd sets JOURNAL_STREAM=<dev>:<inode> for a service whose stderr goes to
    /// the journal. Comparing it with fd 2 tells us that the stream really is
    /// ours, not inherited by a shell started from such a service.
    public static func detectTarget(environment: [String: String]) -> Target {
        guard let stream = environment["JOURNAL_STREAM"] else { return .stderr }
        let parts = stream.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return .stderr }
        var info = stat()
        guard fstat(2, &info) == 0 else { return .stderr }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode ? .journal : .stderr
    }

    public func log(level: Logger.Level, message: String, metadata: Logger.Metadata, label: String, file: String, function: String, line: UInt) {
        if level >= .warning {
            problems.record(level: level.rawValue, message: message)
        }
        switch target {
        case .journal:
            let fields = JournalFields.fields(level: level, message: message, metadata: metadata, label: label, file: file, function: function, line: line)
                .map { ($0.name, Array($0.value.utf8)) }
            let time = WallTime.now()
            outbox.submit(.journal(fields, fallback: { Self.line(time: time, level: level, message: message, metadata: metadata) }),
                          size: Self.size(of: fields))
        case .stderr:
            let line = Array(Self.line(level: level, message: message, metadata: metadata).utf8)
            outbox.submit(.stderr(line), size: line.count)
        }
    }

    /// Waits up to `timeout` for the daemon's queued entries to be written: before it
    /// exits. False when the sink is stuck and entries are left.
    @discardableResult
    public func flush(within timeout: Duration) -> Bool {
        outbox.flush(within: timeout)
    }

    /// `body` runs (on the log queue: hop to your own) once the entries emitted before
    /// this call are written; never, while the sink takes nothing.
    func afterWritten(_ body: @escaping @Sendable () -> Void) {
        outbox.afterWritten(body)
    }

    /// The one place the daemon's own entries are written, on the outbox's queue: here a
    /// blocking journal send or write(2) holds nothing but that queue. Lines for stderr
    /// go out together, up to 64 KiB a write.
    private static func write(_ entries: [LogOutbox.Entry], target: Target) {
        var lines: [UInt8] = []
        func writeLines() {
            guard !lines.isEmpty else { return }
            StandardError.write(bytes: lines)
            lines.removeAll(keepingCapacity: true)
        }
        for entry in entries {
            switch entry {
            case .journal(let fields, let fallback):
                if Journal.send(bytes: fields) != 0 {
                    writeLines()
                    StandardError.write(fallback())
                }
            case .stderr(let bytes):
                lines += bytes
                if lines.count >= 65_536 { writeLines() }
            case .dropReport(let text):
                writeLines()
                if target == .journal, Journal.send([("MESSAGE", text), ("PRIORITY", "4"), ("SYSLOG_IDENTIFIER", "watchkeeper")]) == 0 { continue }
                StandardError.write(line(level: .warning, message: text, metadata: [:]))
            }
        }
        writeLines()
    }

    private static func size(of fields: [(name: String, value: [UInt8])]) -> Int {
        fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.count + 2 }
    }

    /// A journal entry that is not a log message of a logger: the state dump, a
    /// job's output line, a run record. Always written, whatever the log level.
    public func emit(fields: [(name: String, value: String)], stderrText: @escaping @autoclosure @Sendable () -> String) {
        emit(bytes: fields.map { ($0.name, Array($0.value.utf8)) }, stderrText: stderrText())
    }

    /// Values as bytes: a job's output need not be UTF-8, and the journal keeps it as it came.
    ///
    /// `stderrText` is what stderr shows instead, and may span lines (the state dump's text
    /// does): its newlines stay, every other control character is escaped there, so a
    /// job's output cannot reach the terminal as ESC sequences. A value from outside the
    /// daemon that must not start a line of its own belongs in it as
    /// `LineEscaping.escaped(_:)`, which also shows invalid UTF-8 as `\xNN`.
    public func emit(bytes fields: [(name: String, value: [UInt8])], stderrText: @escaping @autoclosure @Sendable () -> String) {
        let stderrLine: @Sendable () -> String = {
            let text = LineEscaping.controlsEscaped(inFormatted: stderrText())
            return text.hasSuffix("\n") ? text : text + "\n"
        }
        if target == .journal {
            var all = fields
            if !fields.contains(where: { $0.name == "SYSLOG_IDENTIFIER" }) { all.append(("SYSLOG_IDENTIFIER", Array("watchkeeper".utf8))) }
            outbox.submit(.journal(all, fallback: stderrLine), size: Self.size(of: all))
            return
        }
        let line = Array(stderrLine().utf8)
        outbox.submit(.stderr(line), size: line.count)
    }

    static func line(level: Logger.Level, message: String, metadata: Logger.Metadata) -> String {
        line(time: .now(), level: level, message: message, metadata: metadata)
    }

    /// One log call as exactly one stderr line. The message and every metadata key and
    /// value are escaped (`LineEscaping`): they carry file names, job names and output,
    /// and a newline in one of them must not start a line that reads as the daemon's own.
    static func line(time: WallTime, level: Logger.Level, message: String, metadata: Logger.Metadata) -> String {
        let pairs = JournalFields.flatten(metadata).filter { $0.key != JournalFields.messageIDKey }
        return "\(time.iso8601) \(level.rawValue): \(LineEscaping.escaped(message))"
            + metadataSuffix(pairs.map { ($0.key, $0.value.utf8) }) + "\n"
    }

    /// ` (key=value, key="value", ...)`, or nothing without pairs: every key and value as
    /// `LineEscaping.field(_:)` gives it, quoted when it holds more than a plain word, so
    /// a value can never read as further pairs.
    static func metadataSuffix<Value: Collection<UInt8>>(_ pairs: [(key: String, value: Value)]) -> String {
        guard !pairs.isEmpty else { return "" }
        return " (" + pairs.map { "\(LineEscaping.field($0.key))=\(LineEscaping.field($0.value))" }.joined(separator: ", ") + ")"
    }
}

enum Journal {
    /// One entry to journald's native socket, as sd_journal_sendv(3) sends it (`wk_journal_sendv`,
    /// without libsystemd): 0 when sent or when no journal listens there, -errno otherwise.
    /// Values may hold newlines (the dump does); an entry too big for a datagram goes as a memfd.
    static func send(_ fields: [(name: String, value: String)], path: String = JournalSocket.defaultPath) -> Int32 {
        send(bytes: fields.map { ($0.name, Array($0.value.utf8)) }, path: path)
    }

    static func send(bytes fields: [(name: String, value: [UInt8])], path: String = JournalSocket.defaultPath) -> Int32 {
        let prepared = entry(fields)
        var buffer = prepared.buffer
        return buffer.withUnsafeMutableBytes { raw -> Int32 in
            var vectors = prepared.spans.map { iovec(iov_base: raw.baseAddress! + $0.start, iov_len: $0.length) }
            return wk_journal_sendv(path, &vectors, Int32(vectors.count))
        }
    }

    /// One `FIELD=value` span per field, the value's bytes exactly as given: nothing is
    /// escaped for the journal. `wk_journal_sendv` takes each span by length and sends a
    /// value that holds a newline in journald's binary-safe form (name, newline, 64-bit
    /// length, data), so control bytes, NUL and invalid UTF-8 all arrive intact.
    static func entry(_ fields: [(name: String, value: [UInt8])]) -> (buffer: [UInt8], spans: [(start: Int, length: Int)]) {
        var buffer: [UInt8] = []
        var spans: [(start: Int, length: Int)] = []
        for (name, value) in fields {
            let start = buffer.count
            buffer.append(contentsOf: name.utf8)
            buffer.append(UInt8(ascii: "="))
            buffer.append(contentsOf: value)
            spans.append((start, buffer.count - start))
        }
        return (buffer, spans)
    }
}

public enum StandardError {
    public static func write(_ text: String) {
        write(bytes: Array(text.utf8))
    }

    /// All of `bytes`, however many writes it takes; an error (stderr closed) drops them.
    public static func write(bytes: [UInt8]) {
        bytes.withUnsafeBytes { write(bytes: $0, fd: 2) }
    }

    /// A descriptor someone left non-blocking is waited on rather than dropping the rest.
    static func write(bytes raw: UnsafeRawBufferPointer, fd: Int32) {
        var offset = 0
        while offset < raw.count {
            switch valueOrErrno({ Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset) }) {
            case .success(let written):
                offset += written
            case .failure(.resourceTemporarilyUnavailable):
                var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = poll(&poller, 1, -1)
            case .failure:
                return
            }
        }
    }
}

/// The swift-log handler: a thin value that forwards to the process's sink.
public struct WatchkeeperLogHandler: LogHandler {
    public let label: String
    public let sink: LogSink
    public var metadata: Logger.Metadata = [:]
    private var levelOverride: Logger.Level?

    public init(label: String, sink: LogSink) {
        self.label = label
        self.sink = sink
    }

    /// The sink's level unless this logger was given its own.
    public var logLevel: Logger.Level {
        get { levelOverride ?? sink.level }
        set { levelOverride = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let extra = event.metadata {
            merged.merge(extra) { _, new in new }
        }
        sink.log(level: event.level, message: event.message.description, metadata: merged, label: label,
                 file: event.file, function: event.function, line: event.line)
    }
}
