import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A task or a watch rule: the unit the engine limits (`max_concurrent`), configures and
/// names in records. Two kinds may share a name; the key keeps them apart.
public struct JobKey: Hashable, Sendable, CustomStringConvertible {
    public let kind: JobKind
    public let name: String

    public init(_ kind: JobKind, _ name: String) {
        self.kind = kind
        self.name = name
    }

    /// "task backup", "watch inbox": how logs and the dump name it.
    public var description: String { "\(kind.rawValue) \(name)" }
}

/// A run's identity: 64 random bits, shown as 16 hex digits. Kept as a number while a run
/// waits, so a burst of 100,000 waiting files costs no string per file.
public struct RunID: Hashable, Sendable, CustomStringConvertible {
    public let value: UInt64

    public init(_ value: UInt64) { self.value = value }

    /// From the system random generator (getrandom): unique enough to grep the journal for.
    public static func random() -> RunID { RunID(RunIDPool.shared.next()) }

    public init?(_ text: String) {
        guard text.count == 16, let value = UInt64(text, radix: 16) else { return nil }
        self.value = value
    }

    /// Written digit by digit into the string's own storage: made for every job on the way
    /// to its exec (its WATCHKEEPER_RUN_ID), where `String(value, radix:)` and the padding
    /// cost three strings.
    public var description: String {
        String(unsafeUninitializedCapacity: 16) { buffer in
            let digits: StaticString = "0123456789abcdef"
            var rest = value
            for index in stride(from: 15, through: 0, by: -1) {
                buffer[index] = digits.utf8Start[Int(rest & 0xf)]
                rest >>= 4
            }
            return 16
        }
    }
}

/// Random run IDs drawn from the kernel 32 at a time: a job's ID was a `getrandom` system
/// call of its own on the way to its exec (docs/measurements/latency-path.md). The bytes
/// are the kernel's either way.
final class RunIDPool: Sendable {
    static let shared = RunIDPool()
    private static let size = 32
    private let drawn = Mutex<(values: [UInt64], used: Int)>(([], 0))

    func next() -> UInt64 {
        drawn.withLock { pool in
            if pool.used == pool.values.count {
                pool.values = Self.draw()
                pool.used = 0
            }
            pool.used += 1
            return pool.values[pool.used - 1]
        }
    }

    /// glibc's arc4random_buf (2.36): the kernel's getrandom, one call for the whole pool.
    private static func draw() -> [UInt64] {
        var values = [UInt64](repeating: 0, count: size)
        values.withUnsafeMutableBytes { arc4random_buf($0.baseAddress!, $0.count) }
        return values
    }
}

/// One file of a watch rule: its absolute path (bytes, as the kernel gave them), where its
/// rule's root ends in it, the event, and its form when admitted (nil when it is gone:
/// `deleted`, `moved_out`).
public struct FileSubject: Sendable {
    public let path: [UInt8]
    /// The root's length in `path`: `relative` is what follows it and its slash.
    public let rootLength: Int
    public let event: WatchEvent
    public let identity: FileIdentity?
    /// When its last event came, or a scan found it (monotonic nanoseconds): where its
    /// event-to-start latency is measured from.
    public let eventAt: MonotonicInstant?
    /// The rule follows symbolic links: the check before the start does too.
    public let followsSymlinks: Bool
    /// False for a file on a network or FUSE file system: its identity is not the kernel's
    /// (PolledTree), and a stat there may hang, which must not happen on the jobs queue. Its
    /// job finds out itself whether the file is still there.
    public let checksBeforeStart: Bool

    public init(path: [UInt8], rootLength: Int, event: WatchEvent, identity: FileIdentity?, eventAt: MonotonicInstant? = nil,
                followsSymlinks: Bool = false, checksBeforeStart: Bool = true) {
        self.path = path
        self.rootLength = rootLength
        self.event = event
        self.identity = identity
        self.eventAt = eventAt
        self.followsSymlinks = followsSymlinks
        self.checksBeforeStart = checksBeforeStart
    }

    /// Still the file that was admitted: the same inode at the same path (its content may
    /// have grown since; that runs, at least once). One statx, no file handle.
    var isStillThere: Bool {
        guard let identity, checksBeforeStart else { return true }
        guard let now = FileStatus.of(path, followSymlinks: followsSymlinks, generation: false) else { return false }
        return now.identity.sameInode(as: identity)
    }

    public var relative: ArraySlice<UInt8> {
        path.count > rootLength ? path[(rootLength + 1)...] : []
    }

    private var lastSlash: Int { path.lastIndex(of: UInt8(ascii: "/")) ?? 0 }

    /// The directory part, as `{dir}` and WATCHKEEPER_DIR give it ("/" for a file at the root).
    func writeDirectory(to strings: SpawnStrings) {
        let slash = lastSlash
        if slash == 0 { strings.append(CollectionOfOne(UInt8(ascii: "/"))) } else { strings.append(path[..<slash]) }
    }

    /// The name, as `{name}` and WATCHKEEPER_NAME give it.
    func writeName(to strings: SpawnStrings) {
        strings.append(path[(lastSlash + 1)...])
    }
}

/// What started a job. It travels with the job from submission to record: it gives the
/// command its placeholders and environment, and the record its fields
/// (`WATCHKEEPER_PATH=` for a file), so a record always says what it was about.
public enum JobSubject: Sendable {
    /// A task's run: its schedule, a catch-up, a trigger. `scheduledAt` is the instant it
    /// was due (nil: now).
    case schedule(scheduledAt: WallTime?)
    /// One file of a watch rule.
    case file(FileSubject)
    /// Files of a watch rule whose settle windows ended together, as `{paths}` or on stdin.
    case batch([FileSubject], input: WatchSettings.BatchInput)

    var scheduledAt: WallTime? {
        if case .schedule(let at) = self { return at }
        return nil
    }

    public enum StartCheck {
        case unchanged
        /// Some of a batch's files are gone: the rest run.
        case narrowed(JobSubject, gone: [FileSubject])
        /// Every file is gone: nothing to run.
        case gone
    }

    /// Just before the start: are its files still the ones that were admitted?
    func checkedBeforeStart() -> StartCheck {
        switch self {
        case .schedule:
            return .unchanged
        case .file(let file):
            return file.isStillThere ? .unchanged : .gone
        case .batch(let files, let input):
            var kept: [FileSubject] = []
            var gone: [FileSubject] = []
            for file in files {
                if file.isStillThere { kept.append(file) } else { gone.append(file) }
            }
            if gone.isEmpty { return .unchanged }
            return kept.isEmpty ? .gone : .narrowed(.batch(kept, input: input), gone: gone)
        }
    }

    /// Every file the job is about (none for a task).
    public var files: [FileSubject] {
        switch self {
        case .schedule: return []
        case .file(let file): return [file]
        case .batch(let files, _): return files
        }
    }

    /// The short form logs use: the path, or "N files".
    var summary: [UInt8]? {
        switch self {
        case .schedule: return nil
        case .file(let file): return file.path
        case .batch(let files, _): return Array("\(files.count) files".utf8)
        }
    }

    /// `{path}`, `{dir}`, `{name}` or `{event}` of a single file; nothing for the others.
    func writePlaceholder(_ value: JobCommand.Value, to strings: SpawnStrings) {
        guard case .file(let file) = self else { return }
        switch value {
        case .path: strings.append(file.path)
        case .directory: file.writeDirectory(to: strings)
        case .name: file.writeName(to: strings)
        case .event: strings.append(file.event.rawValue.utf8)
        default: break
        }
    }

    /// `{paths}` of a batch given in argv: one argument per file. False for every other name
    /// and subject.
    func writeList(_ name: String, to strings: SpawnStrings) -> Bool {
        guard case .batch(let files, .argv) = self, name == "paths" else { return false }
        for file in files { strings.append(argument: file.path) }
        return true
    }

    /// WATCHKEEPER_PATH, _DIR, _NAME and _EVENT of a file, or WATCHKEEPER_BATCH_SIZE.
    func writeEnvironment(to strings: SpawnStrings) {
        switch self {
        case .schedule:
            break
        case .file(let file):
            strings.addOwn("WATCHKEEPER_PATH", file.path)
            strings.addOwn("WATCHKEEPER_DIR") { file.writeDirectory(to: $0) }
            strings.addOwn("WATCHKEEPER_NAME") { file.writeName(to: $0) }
            strings.addOwn("WATCHKEEPER_EVENT", file.event.rawValue.utf8)
        case .batch(let files, _):
            strings.addOwn("WATCHKEEPER_BATCH_SIZE") { $0.appendDecimal(files.count) }
        }
    }

    /// The job's whole stdin (`batch = "stdin"`: each path followed by a NUL); nil: /dev/null.
    var standardInput: [UInt8]? {
        guard case .batch(let files, .stdin) = self else { return nil }
        var paths: [UInt8] = []
        paths.reserveCapacity(files.reduce(0) { $0 + $1.path.count + 1 })
        for file in files { paths += file.path + [0] }
        return paths
    }
}
