import TOMLKit

#if canImport(Glibc)
import Glibc
#endif

/// The inotify events a rule can react to, by the names the configuration uses.
public enum WatchEvent: String, Sendable, CaseIterable {
    case created
    case closedWrite = "closed_write"
    case movedIn = "moved_in"
    case movedOut = "moved_out"
    case deleted
    case modified
    case attrib

    var mask: UInt32 {
        switch self {
        case .created: return UInt32(IN_CREATE)
        case .closedWrite: return UInt32(IN_CLOSE_WRITE)
        case .movedIn: return UInt32(IN_MOVED_TO)
        case .movedOut: return UInt32(IN_MOVED_FROM)
        case .deleted: return UInt32(IN_DELETE)
        case .modified: return UInt32(IN_MODIFY)
        case .attrib: return UInt32(IN_ATTRIB)
        }
    }

    /// "A file is ready": written and closed, or moved in whole.
    public static let ready: [WatchEvent] = [.closedWrite, .movedIn]
}

/// How a rule learns of files: the kernel's events, a periodic look, or both.
public enum WatchMethod: String, Sendable, CaseIterable {
    /// inotify everywhere, and polling too on each network or FUSE file system found at the
    /// root or mounted below it (inotify sees only this host's writes there). A tree that
    /// grows past `WatchBackends.fanotifyAbove` directories (or reaches the inotify watch
    /// limit) moves to fanotify if the daemon can use it.
    case auto
    /// inotify only, whatever the file system.
    case inotify
    /// Polling only: no inotify watch at all.
    case poll
    /// One fanotify mark on each local file system of the tree instead of one inotify watch
    /// per directory (huge trees; needs CAP_SYS_ADMIN), polling network and FUSE trees as
    /// `auto` does. Without what fanotify needs, the daemon says why and uses inotify.
    case fanotify
}

/// One `[[watch]]` rule: a directory (tree) and the job its files start.
public struct WatchSettings: Equatable, Sendable {
    public var name: String
    public var path: String
    public var recursive = false
    public var events: [WatchEvent] = WatchEvent.ready
    public var filter: PathFilter
    public var followSymlinks = false
    /// Events for one path within this window become one job.
    public var settle: Duration = .zero
    public var maxConcurrent = 1_024
    /// Scan at start-up (and after an overflow) for matching files never handled, using
    /// the ledger in the state directory. On by default when the rule reacts to files
    /// being ready; off for rules about deletions and changes.
    public var catchUp: Bool
    /// `one`: a shared inbox; each file is claimed in etcd before its job starts, so one
    /// host of the fleet runs it (docs/fleet.md).
    public var fleet: FleetScope = .each
    /// Many files per job (nil: one job per file): the command has a `{paths}` element that
    /// becomes one argument per file, or the paths come NUL-terminated on stdin; a batch too
    /// large for one argv (or one pipe) is split into several runs, never cut.
    public var batchInput: BatchInput?
    public var batch: Bool { batchInput != nil }

    public enum BatchInput: String, Sendable {
        /// `batch = true` or `"argv"`: `{paths}` becomes one argument per file.
        case argv
        /// `batch = "stdin"`: each path followed by a NUL byte on stdin (`xargs -0`, `tar --null -T -`).
        case stdin
    }
    /// Keep the last N raw inotify events of this rule for the dump (debugging; 0 = off).
    public var recentEvents = 0
    public var method: WatchMethod = .auto
    /// How often a polled tree is looked at.
    public var pollInterval: Duration = .seconds(10)
    /// A file a poll finds new or changed is looked at again this much later, and starts its
    /// job only if its size and modification time are the same in both looks: a file written
    /// by another host gives no close event.
    public var pollSettle: Duration = .seconds(5)
    /// A file whose job failed is tried again after a backoff, up to `attempts` in all.
    public var retry: RetryPolicy?
    /// A file whose job expired on its budget is retried too, as for tasks.
    public var retryExpired = false
    public var job: JobSettings

    public static let placeholders = ["path", "dir", "name", "event", "watch", "run_id", "attempt"]
    public static let batchPlaceholders = ["paths", "watch", "run_id", "attempt"]
    public static let stdinBatchPlaceholders = ["watch", "run_id", "attempt"]

    static func read(name: String, from reader: inout TableReader) -> WatchSettings? {
        let context = reader.context
        let batchInput: BatchInput?
        switch reader.boolOrWord("batch", words: ["argv", "stdin"]) {
        case .bool(false)?: batchInput = nil
        case .word("stdin")?: batchInput = .stdin
        case .bool(true)?, .word?: batchInput = .argv
        // Absent, or a bad value: that is reported once, and the rest is checked as for
        // batch = true, so that a "{paths}" in the command adds no second, misleading error.
        case nil: batchInput = reader.table["batch"] != nil ? .argv : nil
        }
        let known: [String] = switch batchInput {
        case nil: placeholders
        case .argv?: batchPlaceholders
        case .stdin?: stdinBatchPlaceholders
        }
        let job = TaskSettings.readJob(&reader, placeholders: known)
        let path = reader.absolutePath("path")
        if let path, let pseudo = ["/proc", "/sys"].first(where: { path == $0 || path.hasPrefix($0 + "/") }) {
            reader.context.error(at: reader.valuePosition("path"),
                                 "watch.path = \"\(path)\" is under \(pseudo), a kernel pseudo-filesystem whose changes inotify never reports: nothing would ever be handled")
        }
        if path == nil && reader.table["path"] == nil {
            context.error(at: reader.headerPosition, "missing required key \"path\" in \(reader.displayName)")
        }
        var watch = WatchSettings(name: name, path: path ?? "/", filter: PathFilter(include: [], exclude: []), catchUp: true,
                                  job: job ?? JobSettings(command: .arguments(["/bin/true"])))
        if let value = reader.bool("recursive") { watch.recursive = value }
        if let names = reader.stringArray("events") {
            var events: [WatchEvent] = []
            for name in names {
                guard let event = WatchEvent(rawValue: name) else {
                    context.error(at: reader.valuePosition("events"),
                                  "\(reader.dotted("events")): unknown event \"\(name)\" (known: \(WatchEvent.allCases.map(\.rawValue).joined(separator: ", ")))")
                    continue
                }
                if !events.contains(event) { events.append(event) }
            }
            if !events.isEmpty { watch.events = events }
        }
        let include = readGlobs("include", from: &reader)
        let exclude = readGlobs("exclude", from: &reader)
        // The temporary names of rsync, cp --backup, editors and downloads are left out
        // unless asked for: their files arrive when renamed into place (PathFilter).
        watch.filter = PathFilter(include: include, exclude: exclude, excludesTemporaryNames: reader.bool("exclude_temporary") ?? true)
        if let value = reader.bool("follow_symlinks") { watch.followSymlinks = value }
        let settle = reader.duration("settle", range: .zero ... .seconds(3_600))
        if let settle { watch.settle = settle }
        if let limit = reader.integer("max_concurrent", range: 1 ... 1_024) { watch.maxConcurrent = limit }
        if let scope = reader.oneOf("fleet", allowed: FleetScope.allCases.map(\.rawValue)) { watch.fleet = FleetScope(rawValue: scope) ?? .each }
        watch.catchUp = reader.bool("catch_up") ?? watch.events.contains { WatchEvent.ready.contains($0) || $0 == .created }
        watch.batchInput = batchInput
        if let count = reader.integer("recent_events", range: 0 ... 10_000) { watch.recentEvents = count }
        if let word = reader.oneOf("method", allowed: WatchMethod.allCases.map(\.rawValue)), let method = WatchMethod(rawValue: word) {
            watch.method = method
        }
        if let interval = reader.duration("poll_interval", range: .seconds(1) ... .seconds(86_400)) { watch.pollInterval = interval }
        if let settle = reader.duration("poll_settle", range: .seconds(1) ... .seconds(3_600)) { watch.pollSettle = settle }
        watch.retry = TaskSettings.readRetry(&reader)
        if let value = reader.bool("retry_expired") { watch.retryExpired = value }
        if let batchInput, let job {
            if batchInput == .argv {
                guard case .arguments(let arguments) = job.command, arguments.contains("{paths}") else {
                    context.error(at: reader.valuePosition("command"), "with batch = true, \(reader.dotted("command")) must be an array with a \"{paths}\" element of its own, which becomes one argument per file")
                    return nil
                }
            }
            // A refused settle has its own error; asking for one again would be a second.
            if watch.settle == .zero && (settle != nil || reader.table["settle"] == nil) {
                let shown = batchInput == .stdin ? "batch = \"stdin\"" : "batch = true"
                context.error(at: reader.valuePosition("batch"), "\(shown) needs a settle window (for example settle = \"1s\") to collect files in")
            }
        }
        return job == nil || path == nil ? nil : watch
    }

    private static func readGlobs(_ key: String, from reader: inout TableReader) -> [GlobPattern] {
        guard let texts = reader.stringArray(key, allowEmpty: true) else { return [] }
        var patterns: [GlobPattern] = []
        for (index, text) in texts.enumerated() {
            do {
                patterns.append(try GlobPattern(text))
            } catch {
                var position = reader.context.sourceMap.valuePosition(reader.path + [.key(key), .index(index)]) ?? reader.valuePosition(key)
                if let start = position { position = SourcePosition(line: start.line, column: start.column + error.column) }
                reader.context.error(at: position, "bad pattern \"\(text)\" in \(reader.dotted(key)): \(error.message)")
            }
        }
        return patterns
    }
}
