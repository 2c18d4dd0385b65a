import CWatchkeeperSystem
import CWatchkeeperSystemd
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Reading the journal through libsystemd's sd-journal, for `watchkeeper logs`, loaded with
/// dlopen when a reader is opened (the daemon maps no libsystemd): the files themselves, so it needs neither journald nor the daemon to be running. A thin wrapper:
/// matches, a cursor that moves, the fields of the entry under it, and a wait for new ones.
/// Not thread-safe (sd_journal is not): one reader, one thread.
public final class JournalReader {
    public enum Source: Sendable, Equatable {
        /// This machine's journals: /run/log/journal and /var/log/journal, as journalctl.
        case local
        /// The files in one directory (and its machine-ID subdirectories), as `journalctl
        /// --directory`: another machine's journal, or a copy.
        case directory(String)

        /// Where its files are looked for: what the "nothing there" messages name.
        public var directories: [String] {
            switch self {
            case .local: return ["/run/log/journal", "/var/log/journal"]
            case .directory(let path): return [path]
            }
        }
    }

    private let journal: OpaquePointer
    public let source: Source
    /// The journal files found on disk, and how many of them this user cannot open.
    public let files: JournalFiles

    /// Opens the journal, after making sure it has files this user can read: sd_journal_open
    /// succeeds on an empty or unreadable journal and then simply finds nothing, which would
    /// read as "no entries" when the truth is "nothing is kept" or "not allowed".
    public init(source: Source) throws(JournalReaderError) {
        self.source = source
        if case .directory(let path) = source {
            // A mistyped directory is not an empty journal.
            switch pointerOrErrno({ opendir(path) }) {
            case .success(let stream): closedir(stream)
            case .failure(let error): throw .failed("open the journal directory \(LineEscaping.escaped(path))", error)
            }
        }
        files = JournalFiles.scan(source.directories)
        if files.found == 0 { throw .keepsNothing(source) }
        if files.unreadable == files.found { throw .unreadable(source, files) }
        var why = [CChar](repeating: 0, count: 256)
        guard wk_sd_journal_load(&why, why.count) == 0 else { throw .noLibrary(String(cString: why)) }
        var handle: OpaquePointer?
        let result: Int32
        switch source {
        case .local: result = wk_sd_journal_open(&handle, Int32(WK_SD_JOURNAL_LOCAL_ONLY))
        case .directory(let path): result = wk_sd_journal_open_directory(&handle, path, 0)
        }
        guard result >= 0, let handle else { throw .failed("open the journal", Errno(rawValue: -result)) }
        journal = handle
        // Whole fields: a job's line or a record is never shown cut at the default 64 KiB.
        wk_sd_journal_set_data_threshold(journal, 0)
    }

    deinit {
        wk_sd_journal_close(journal)
    }

    /// One term of the filter: `FIELD=value`, value as bytes (a path or a name need not be
    /// UTF-8). Terms on the same field are alternatives, on different fields all must hold,
    /// until `addDisjunction` starts another group (wk_sd_journal_add_match(3)).
    public func addMatch(field: String, value: some Collection<UInt8>) throws(JournalReaderError) {
        let term = Array(field.utf8) + [UInt8(ascii: "=")] + Array(value)
        let result = term.withUnsafeBytes { wk_sd_journal_add_match(journal, $0.baseAddress, $0.count) }
        if result < 0 { throw .failed("add the match \(field)=\(LineEscaping.escaped(value))", Errno(rawValue: -result)) }
    }

    public func addDisjunction() throws(JournalReaderError) {
        let result = wk_sd_journal_add_disjunction(journal)
        if result < 0 { throw .failed("combine the journal matches", Errno(rawValue: -result)) }
    }

    public func flushMatches() {
        wk_sd_journal_flush_matches(journal)
    }

    public func seekTail() throws(JournalReaderError) {
        let result = wk_sd_journal_seek_tail(journal)
        if result < 0 { throw .failed("seek to the end of the journal", Errno(rawValue: -result)) }
    }

    public func seekHead() throws(JournalReaderError) {
        let result = wk_sd_journal_seek_head(journal)
        if result < 0 { throw .failed("seek to the start of the journal", Errno(rawValue: -result)) }
    }

    /// Moves to the next matching entry: false at the end.
    public func next() throws(JournalReaderError) -> Bool {
        let result = wk_sd_journal_next(journal)
        if result < 0 { throw .failed("read the next journal entry", Errno(rawValue: -result)) }
        return result > 0
    }

    /// Moves to the previous matching entry: false at the start.
    public func previous() throws(JournalReaderError) -> Bool {
        let result = wk_sd_journal_previous(journal)
        if result < 0 { throw .failed("read the previous journal entry", Errno(rawValue: -result)) }
        return result > 0
    }

    /// Where the current entry is, to come back to it (sd_journal_get_cursor).
    public func cursor() throws(JournalReaderError) -> String {
        var text: UnsafeMutablePointer<CChar>?
        let result = wk_sd_journal_get_cursor(journal, &text)
        guard result >= 0, let text else { throw .failed("read a journal entry's cursor", Errno(rawValue: -result)) }
        defer { free(text) }
        return String(cString: text)
    }

    public func seek(cursor: String) throws(JournalReaderError) {
        let result = wk_sd_journal_seek_cursor(journal, cursor)
        if result < 0 { throw .failed("seek to a journal cursor", Errno(rawValue: -result)) }
    }

    /// A field of the current entry as its bytes, nil when the entry has none.
    public func field(_ name: String) -> [UInt8]? {
        var data: UnsafeRawPointer?
        var length = 0
        guard wk_sd_journal_get_data(journal, name, &data, &length) >= 0, let data else { return nil }
        // The data is "NAME=value".
        let skip = name.utf8.count + 1
        guard length >= skip else { return nil }
        return Array(UnsafeRawBufferPointer(start: data + skip, count: length - skip))
    }

    /// When the current entry was written (journald's receive time).
    public func realtime() throws(JournalReaderError) -> WallTime {
        var microseconds: UInt64 = 0
        let result = wk_sd_journal_get_realtime_usec(journal, &microseconds)
        if result < 0 { throw .failed("read a journal entry's time", Errno(rawValue: -result)) }
        return WallTime(secondsSinceEpoch: Int64(microseconds / 1_000_000), nanoseconds: Int32(microseconds % 1_000_000) * 1_000)
    }

    /// The current entry with the fields asked for.
    public func entry(fields names: [String]) throws(JournalReaderError) -> JournalEntry {
        var fields: [String: [UInt8]] = [:]
        for name in names { fields[name] = field(name) }
        return JournalEntry(time: try realtime(), fields: fields)
    }

    /// Waits until the journal changes (new entries, files added or rotated) or a signal
    /// arrives on `signalDescriptor` (a signalfd, readable when one is pending): sd_journal_wait
    /// alone would sleep through SIGINT, which the caller keeps blocked. The journal's own
    /// timeout (sd_journal_get_timeout) bounds the wait, for file systems without inotify.
    public func wait(orSignalOn signalDescriptor: Int32) throws(JournalReaderError) -> JournalWakeup {
        let fd = wk_sd_journal_get_fd(journal)
        if fd < 0 { throw .failed("watch the journal for new entries", Errno(rawValue: -fd)) }
        let events = wk_sd_journal_get_events(journal)
        if events < 0 { throw .failed("watch the journal for new entries", Errno(rawValue: -events)) }
        var until: UInt64 = 0
        let timeoutResult = wk_sd_journal_get_timeout(journal, &until)
        if timeoutResult < 0 { throw .failed("watch the journal for new entries", Errno(rawValue: -timeoutResult)) }
        var timeoutMilliseconds: Int32 = -1
        if until != UInt64.max {
            let now = MonotonicClock.nowMicroseconds()
            timeoutMilliseconds = until <= now ? 0 : Int32(min((until - now + 999) / 1000, UInt64(Int32.max)))
        }
        var descriptors = [pollfd(fd: fd, events: Int16(events), revents: 0), pollfd(fd: signalDescriptor, events: Int16(POLLIN), revents: 0)]
        // Interrupted: a signal this process does not wait for; the journal is looked at anyway.
        if case .failure(let error) = valueOrErrno(retryOnInterrupt: false, { poll(&descriptors, nfds_t(descriptors.count), timeoutMilliseconds) }),
           error != .interrupted {
            throw .failed("wait for new journal entries", error)
        }
        if descriptors[1].revents & Int16(POLLIN) != 0 { return .signal }
        let processed = wk_sd_journal_process(journal)
        if processed < 0 { throw .failed("read the journal's changes", Errno(rawValue: -processed)) }
        return .changed
    }
}

extension JournalReader {
    /// A signalfd for `signals`, blocked in the calling thread first so that they wait for
    /// `wait(orSignalOn:)` instead of ending the process.
    public static func signalDescriptor(for signals: [Int32]) throws(JournalReaderError) -> Int32 {
        var mask = sigset_t()
        sigemptyset(&mask)
        for signal in signals { sigaddset(&mask, signal) }
        pthread_sigmask(SIG_BLOCK, &mask, nil)
        switch valueOrErrno({ signalfd(-1, &mask, Int32(SFD_CLOEXEC)) }) {
        case .success(let fd): return fd
        case .failure(let error): throw .failed("create a signalfd to wait for signals", error)
        }
    }
}

public enum JournalWakeup: Sendable {
    case changed
    case signal
}

/// One journal entry: its time and the fields that were read.
public struct JournalEntry: Sendable {
    public let time: WallTime
    public let fields: [String: [UInt8]]

    public init(time: WallTime, fields: [String: [UInt8]]) {
        self.time = time
        self.fields = fields
    }

    public subscript(_ name: String) -> [UInt8]? { fields[name] }

    public func text(_ name: String) -> String? { fields[name].map { String(decoding: $0, as: UTF8.self) } }
}

/// What the journal directories hold: files named *.journal or *.journal~ (those journald
/// set aside after an unclean end, which sd-journal reads too), in the directory and its
/// subdirectories one level down (the machine ID's, and a namespace's `<id>.<namespace>`).
public struct JournalFiles: Sendable, Equatable {
    public var found = 0
    public var unreadable = 0
    /// One of the unreadable files, to name in the message, and why open(2) refused it.
    public var firstUnreadable: (path: String, error: Errno)?

    public static func == (lhs: JournalFiles, rhs: JournalFiles) -> Bool {
        lhs.found == rhs.found && lhs.unreadable == rhs.unreadable && lhs.firstUnreadable?.path == rhs.firstUnreadable?.path
            && lhs.firstUnreadable?.error == rhs.firstUnreadable?.error
    }

    static func scan(_ directories: [String]) -> JournalFiles {
        var files = JournalFiles()
        for directory in directories { files.scan(directory, depth: 1) }
        return files
    }

    private mutating func scan(_ directory: String, depth: Int) {
        guard let stream = opendir(directory) else { return }
        defer { closedir(stream) }
        while let item = readdir(stream) {
            let name = withUnsafeBytes(of: item.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            let path = directory.hasSuffix("/") ? directory + name : directory + "/" + name
            if name.hasSuffix(".journal") || name.hasSuffix(".journal~") {
                found += 1
                switch valueOrErrno({ open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY) }) {
                case .success(let fd):
                    close(fd)
                case .failure(let error):
                    unreadable += 1
                    if firstUnreadable == nil { firstUnreadable = (path, error) }
                }
            } else if depth > 0 && item.pointee.d_type == UInt8(DT_DIR) {
                scan(path, depth: depth - 1)
            }
        }
    }
}

public enum JournalReaderError: Error, CustomStringConvertible, Equatable {
    /// No journal files at all: journald is not running, or keeps nothing (Storage=none).
    case keepsNothing(JournalReader.Source)
    /// Files there, none readable by this user.
    case unreadable(JournalReader.Source, JournalFiles)
    /// What could not be done ("open the journal") and why.
    case failed(String, Errno)
    /// libsystemd.so.0, which reads journal files, could not be loaded: dlerror's words.
    case noLibrary(String)

    public var description: String {
        switch self {
        case .keepsNothing(let source):
            let places = source.directories.map { LineEscaping.escaped($0) }.joined(separator: " or ")
            switch source {
            case .local:
                return "unable to read the journal: it keeps nothing: no journal files in \(places) "
                    + "(journald is not running, or keeps nothing: Storage=none in journald.conf)"
            case .directory:
                return "unable to read the journal: it keeps nothing: no journal files in \(places)"
            }
        case .unreadable(_, let files):
            let example = files.firstUnreadable.map { " (\(LineEscaping.escaped($0.path)): \($0.error))" } ?? ""
            return "unable to read the journal: this user may read none of its \(files.found) files\(example); "
                + "are you root or in the group systemd-journal or adm?"
        case .failed(let action, let error):
            return error.unable(action)
        case .noLibrary(let why):
            return "unable to read the journal: unable to load libsystemd.so.0 (Debian's libsystemd0): \(why)"
        }
    }

    /// sysexits: 66 nothing to read, 77 not allowed to read it, 71 the system failed.
    public var exitCode: Int32 {
        switch self {
        case .keepsNothing: return ExitCode.noInput
        case .unreadable: return ExitCode.permission
        case .failed, .noLibrary: return ExitCode.osError
        }
    }
}
