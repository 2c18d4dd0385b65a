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
    public static func random() -> RunID { RunID(UInt64.random(in: .min ... .max)) }

    public init?(_ text: String) {
        guard text.count == 16, let value = UInt64(text, radix: 16) else { return nil }
        self.value = value
    }

    public var description: String {
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
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

    /// The directory part and the name, as `{dir}` and `{name}` give them.
    var directoryAndName: (directory: [UInt8], name: [UInt8]) {
        let slash = path.lastIndex(of: UInt8(ascii: "/")) ?? 0
        let directory = slash == 0 ? [UInt8(ascii: "/")] : Array(path[..<slash])
        return (directory, Array(path[(slash + 1)...]))
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

    /// `{path}`-style placeholders, list placeholders, WATCHKEEPER_* variables and stdin.
    func jobInputs() -> (placeholders: [String: [UInt8]], lists: [String: [[UInt8]]], environment: [(String, [UInt8])], standardInput: [UInt8]?) {
        switch self {
        case .schedule:
            return ([:], [:], [], nil)
        case .file(let file):
            let (directory, name) = file.directoryAndName
            let event = Array(file.event.rawValue.utf8)
            return (["path": file.path, "dir": directory, "name": name, "event": event], [:],
                    [("WATCHKEEPER_PATH", file.path), ("WATCHKEEPER_DIR", directory), ("WATCHKEEPER_NAME", name), ("WATCHKEEPER_EVENT", event)],
                    nil)
        case .batch(let files, let input):
            let environment = [("WATCHKEEPER_BATCH_SIZE", Array(String(files.count).utf8))]
            switch input {
            case .argv:
                return ([:], ["paths": files.map(\.path)], environment, nil)
            case .stdin:
                var paths: [UInt8] = []
                paths.reserveCapacity(files.reduce(0) { $0 + $1.path.count + 1 })
                for file in files { paths += file.path + [0] }
                return ([:], [:], environment, paths)
            }
        }
    }
}
