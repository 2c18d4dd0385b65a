import CWatchkeeperSystem
import Dispatch
import Synchronization
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Polls one tree of a rule (PolledTree) on a queue of its own, so that a stat that hangs on
/// a server that stopped answering stalls this poll and nothing else: the watching queue
/// only reads `progress` to say how long it has waited.
///
/// Each pass stats every known directory; only one whose inode, modification or change time
/// moved is listed again (and once more on the next pass, since a change in the same tick
/// of a coarse clock, one second over SFTP, leaves the time as it was). Every known file is
/// stat'ed, so a file rewritten in place is seen too. A file that is new or changed waits
/// `poll_settle` and is looked at again: it is handed on only if its size and modification
/// time did not move between the two looks (a remote writer's close makes no event).
///
/// A pass runs in chunks of a few milliseconds of CPU, each followed by a pause that makes
/// chunk and pause together four times the chunk's CPU: at most a quarter of one core while
/// it runs, whatever the tree's size.
final class TreePoller: @unchecked Sendable {
    struct Settings: Sendable {
        /// The rule's root (real path).
        var root: [UInt8]
        var tree: PolledTree
        var interval: Duration
        var settle: Duration
        var recursive: Bool
        var followSymlinks: Bool
        /// The first pass hands on every file found (the ledger and this life's memory say
        /// which were handled); without it only files changed since the poller started.
        var catchUp: Bool
        /// The rule has no include or exclude: no path is built to ask the filter.
        var selectsAll = false
        /// The files of a directory that did not change are stat'ed every this many passes
        /// (each directory in its own turn): 1 on a local file system, where a stat costs a
        /// microsecond; on a network one each is a round trip (200 µs over sshfs, 13.5 s a
        /// pass for 100,000 files), so new files, which change their directory, are found
        /// at every pass and a file rewritten in place within this many.
        var sweepEvery = 1
        /// The largest share of one core a pass takes while it runs.
        var share: Double = 0.25
    }

    /// A file that was the same in two looks `settle` apart.
    struct Settled: Sendable {
        let relative: [UInt8]
        let identity: FileIdentity
        /// When it was first seen new or changed: where its latency is measured from.
        let firstSeen: MonotonicInstant
    }

    enum Report: Sendable {
        /// A pass stopped at a file system error (ENOTCONN, ESTALE, EIO, ...): said once.
        case unreachable(path: [UInt8], error: Errno)
        /// A pass completed after passes that stopped.
        case reachableAgain(after: Duration)
        /// Entries skipped because they are not regular files, by type (each entry once).
        case skipped(TreeScanner.TypeCounts)
    }

    /// Whether a stall was said in the log (the watching queue's, like everything it says).
    var stallReported = false

    /// What the watching queue may read at any time.
    struct Progress: Sendable {
        /// Set while a chunk runs: since when it has worked on `directory`.
        var busySince: MonotonicInstant?
        var directory: [UInt8] = []
        var passes: UInt64 = 0
        var passesStopped: UInt64 = 0
        /// The pass that ran past the interval (the next one started at once).
        var overruns: UInt64 = 0
        var lastPassWall: Duration?
        var lastPassCPU: Duration?
        var totalCPU: Duration = .zero
        var directoriesKnown = 0
        var filesKnown = 0
        var listedLastPass = 0
        var unchangedLastPass = 0
        var statsLastPass = 0
        var waitingToSettle = 0
        var handedOn: UInt64 = 0
        var settleRestarts: UInt64 = 0
        var unreachableSince: MonotonicInstant?
        var lastError: String?
    }

    let settings: Settings
    let queue: SubsystemQueue
    private let sources: SourceRegistry
    private let selects: @Sendable ([UInt8]) -> Bool
    private let descend: @Sendable ([UInt8]) -> Bool
    private let deliver: @Sendable (TreePoller, [Settled]) -> Void
    private let report: @Sendable (TreePoller, Report) -> Void
    let progress = Mutex(Progress())

    // Everything below is touched only on `queue`.
    /// What a pass compares. The change time too: a deleted file's inode number given to
    /// the next one, with the same size and a preserved mtime (`cp -p`, `tar -x`), differs
    /// from it only there; admission then tells it apart by its birth time, and a chmod
    /// that only moved the change time runs nothing.
    private struct KnownFile: Equatable {
        var inode: UInt64
        var size: Int64
        var modified: Int64
        var changed: Int64

        init(inode: UInt64, size: Int64, modified: Int64, changed: Int64) {
            self.inode = inode
            self.size = size
            self.modified = modified
            self.changed = changed
        }

        init(_ file: wk_file_identity) {
            self.init(inode: file.inode, size: file.size, modified: file.modified_ns, changed: file.changed_ns)
        }
    }

    /// An array, not a dictionary: a pass walks every entry of every directory, and an
    /// array of names already NUL-terminated for statx costs no hashing and no copy.
    private struct FileEntry {
        /// NUL-terminated.
        var name: [UInt8]
        var known: KnownFile

        var bareName: ArraySlice<UInt8> { name.dropLast() }
    }

    private static let unknownFile = KnownFile(inode: 0, size: -1, modified: 0, changed: 0)

    private struct DirectoryState {
        var inode: UInt64
        var modified: Int64
        var changed: Int64
        /// Listed because it changed: listed once more on the next pass.
        var confirm: Bool
        /// Which of `sweepEvery` passes stats its files when it did not change.
        var turn = 0
        var files: [FileEntry] = []
        var subdirectories: [[UInt8]] = []
        /// FIFOs, sockets, devices, links not followed: never handed on.
        var skippedNames: Set<[UInt8]> = []
    }

    private struct Candidate {
        var identity: FileIdentity
        var lookedAt: MonotonicInstant
        let firstSeen: MonotonicInstant
    }

    private struct Pass {
        var frontier: [[UInt8]]
        var head = 0
        let startedAt: MonotonicInstant
        var cpu: Duration = .zero
        var listed = 0
        var unchanged = 0
        var stats = 0
        var skipped = TreeScanner.TypeCounts()
    }

    private var directories: [[UInt8]: DirectoryState] = [:]
    private var candidates: [[UInt8]: Candidate] = [:]
    private var pass: Pass?
    private var isFirstPass = true
    private let startedWall = WallTime.now()
    private var stopped = false
    private var passTimer: RegisteredTimer?
    private var chunkTimer: RegisteredTimer?
    private var settleTimer: RegisteredTimer?
    private var nextPassAt: MonotonicInstant?
    private var passesBegun: UInt64 = 0

    init(settings: Settings, name: String, sources: SourceRegistry, selects: @escaping @Sendable ([UInt8]) -> Bool,
         descend: @escaping @Sendable ([UInt8]) -> Bool, deliver: @escaping @Sendable (TreePoller, [Settled]) -> Void,
         report: @escaping @Sendable (TreePoller, Report) -> Void) {
        self.settings = settings
        self.queue = SubsystemQueue(name: "poll.\(name)", qos: .utility)
        self.sources = sources
        self.selects = selects
        self.descend = descend
        self.deliver = deliver
        self.report = report
    }

    var owner: String { "poll \(String(decoding: absolute(settings.tree.relative), as: UTF8.self))" }

    /// The first pass starts at once.
    func start() {
        queue.async { [self] in
            guard !stopped else { return }
            passTimer = sources.makeTimer(owner: owner, target: "a pass every \(settings.interval.compactDescription)", on: queue) { [unowned self] in
                self.beginPass()
            }
            chunkTimer = sources.makeTimer(owner: owner, target: "the next chunk of a pass (at most \(Int(settings.share * 100)) % of a core)", on: queue) { [unowned self] in
                self.continuePass()
            }
            settleTimer = sources.makeTimer(owner: owner, target: "second looks after \(settings.settle.compactDescription)", on: queue) { [unowned self] in
                self.lookAgain()
            }
            beginPass()
        }
    }

    /// No pass or look after this one; a chunk in progress ends at its next directory.
    func stop() {
        queue.async { [self] in
            stopped = true
            passTimer?.cancel()
            chunkTimer?.cancel()
            settleTimer?.cancel()
            pass = nil
            progress.withLock { $0.busySince = nil }
        }
    }

    private func absolute(_ relative: [UInt8]) -> [UInt8] {
        relative.isEmpty ? settings.root : settings.root + [UInt8(ascii: "/")] + relative
    }

    private static func join(_ directory: [UInt8], _ name: [UInt8]) -> [UInt8] {
        directory.isEmpty ? name : directory + [UInt8(ascii: "/")] + name
    }

    // MARK: Passes

    private func beginPass() {
        guard !stopped, pass == nil else { return }
        let now = MonotonicInstant.now
        nextPassAt = now + settings.interval
        passesBegun += 1
        pass = Pass(frontier: [settings.tree.relative], startedAt: now)
        continuePass()
    }

    private static let chunkCPU: Duration = .milliseconds(5)

    private func continuePass() {
        guard !stopped, var current = pass else { return }
        let cpuAtStart = Self.threadCPU()
        let chunkStarted = MonotonicInstant.now
        var failure: (path: [UInt8], error: Errno)?
        while current.head < current.frontier.count {
            let directory = current.frontier[current.head]
            current.head += 1
            progress.withLock {
                $0.busySince = .now
                $0.directory = directory
            }
            if let failed = visit(directory, pass: &current) {
                failure = failed
                break
            }
            if stopped { break }
            if Self.threadCPU() - cpuAtStart >= Self.chunkCPU { break }
        }
        let used = Self.threadCPU() - cpuAtStart
        current.cpu += used
        progress.withLock { $0.busySince = nil }
        if current.head >= 4_096 && current.head * 2 >= current.frontier.count {
            current.frontier.removeFirst(current.head)
            current.head = 0
        }
        guard !stopped else { return }
        if let failure {
            pass = nil
            stopPass(current, at: failure.path, error: failure.error)
            return
        }
        if current.head < current.frontier.count {
            pass = current
            // The chunk and its pause take at least its CPU / share: a quarter of a core at most.
            // On a share most of a chunk is waiting for the server, which costs no CPU.
            let pause = used * (1 / settings.share) - (MonotonicInstant.now - chunkStarted)
            chunkTimer?.schedule(after: max(pause, .microseconds(100)))
            return
        }
        pass = nil
        finishPass(current)
    }

    private func finishPass(_ done: Pass) {
        let now = MonotonicInstant.now
        let wall = now - done.startedAt
        isFirstPass = false
        let wasUnreachable = progress.withLock { state -> MonotonicInstant? in
            state.passes += 1
            if wall > settings.interval { state.overruns += 1 }
            state.lastPassWall = wall
            state.lastPassCPU = done.cpu
            state.totalCPU += done.cpu
            state.directoriesKnown = directories.count
            state.filesKnown = directories.values.reduce(0) { $0 + $1.files.count }
            state.listedLastPass = done.listed
            state.unchangedLastPass = done.unchanged
            state.statsLastPass = done.stats
            state.waitingToSettle = candidates.count
            defer {
                state.unreachableSince = nil
                state.lastError = nil
            }
            return state.unreachableSince
        }
        if let since = wasUnreachable { report(self, .reachableAgain(after: now - since)) }
        if done.skipped.skipped > 0 { report(self, .skipped(done.skipped)) }
        scheduleNextPass(now: now)
        armSettle()
    }

    /// A pass that met a file system error stops there; what it learned so far is kept, and
    /// the next pass (at the interval) starts again from the top.
    private func stopPass(_ stoppedPass: Pass, at path: [UInt8], error: Errno) {
        let now = MonotonicInstant.now
        let first = progress.withLock { state -> Bool in
            state.passesStopped += 1
            state.lastError = "\(error) (\(error.symbolicName)) at \(LineEscaping.escaped(absolute(path)))"
            guard state.unreachableSince == nil else { return false }
            state.unreachableSince = now
            return true
        }
        if first { report(self, .unreachable(path: absolute(path), error: error)) }
        scheduleNextPass(now: now)
    }

    private func scheduleNextPass(now: MonotonicInstant) {
        let next = max(nextPassAt ?? now, now)
        passTimer?.schedule(at: next.dispatchTime)
    }

    /// Errors that mean the file system, not this entry, is unwell: the pass stops.
    static func isFileSystemFailure(_ error: Errno) -> Bool {
        fileSystemFailures.contains(error.rawValue)
    }

    private static let fileSystemFailures: Set<Int32> = [
        ENOTCONN, ESTALE, EIO, EHOSTDOWN, EHOSTUNREACH, ETIMEDOUT, ECONNABORTED, ECONNRESET, ENETDOWN, ENETUNREACH,
        EREMOTEIO, ENODEV, ENXIO, ENOLINK, ECOMM,
    ]

    /// Looks at one directory: stat, a listing if it changed, a stat of each of its files
    /// (by name, relative to the directory's descriptor: one component for the kernel to
    /// walk). Returns the failure that stops the pass, if any.
    private func visit(_ directory: [UInt8], pass: inout Pass) -> (path: [UInt8], error: Errno)? {
        let path = absolute(directory)
        let isTop = directory == settings.tree.relative
        // The tree's own top follows a link (the rule's root was resolved); nothing below does.
        // By path first: most directories neither changed nor have their files' turn, and need
        // no descriptor (on a share an open is one more round trip).
        var raw = wk_file_identity()
        if case .failure(let error) = nothingOrErrno({ TreeScanner.withCString(path) { wk_poll_stat(AT_FDCWD, $0, isTop ? 0 : AT_SYMLINK_NOFOLLOW, &raw) } }) {
            if Self.isFileSystemFailure(error) { return (directory, error) }
            forget(directory)
            return nil
        }
        guard mode_t(raw.mode) & S_IFMT == S_IFDIR else {
            forget(directory)
            return nil
        }
        if let known = directories[directory], known.inode == raw.inode, known.modified == raw.modified_ns, known.changed == raw.changed_ns,
           !known.confirm, settings.sweepEvery > 1, (passesBegun % UInt64(settings.sweepEvery)) != UInt64(known.turn) {
            // Unchanged, and not its files' turn: only its subdirectories are visited.
            pass.unchanged += 1
            if settings.recursive {
                for name in known.subdirectories {
                    let child = Self.join(directory, name)
                    if descend(child) { pass.frontier.append(child) }
                }
            }
            return nil
        }
        let descriptor: Int32
        switch valueOrErrno({ TreeScanner.withCString(path) { open($0, Int32(WK_O_PATH) | O_DIRECTORY | O_CLOEXEC | (isTop ? 0 : O_NOFOLLOW)) } }) {
        case .success(let opened):
            descriptor = opened
        case .failure(let error):
            if Self.isFileSystemFailure(error) { return (directory, error) }
            forget(directory)
            return nil
        }
        defer { close(descriptor) }
        var state = directories[directory]
        let changed = state.map { $0.inode != raw.inode || $0.modified != raw.modified_ns || $0.changed != raw.changed_ns } ?? true
        if changed || state?.confirm == true {
            let listing = TreeScanner(root: settings.root).listDirectory(directory)
            if let failure = listing.failure {
                let error = Errno(rawValue: failure.errorNumber)
                if Self.isFileSystemFailure(error) { return (directory, error) }
                if failure.step == .open {
                    forget(directory)
                    return nil
                }
            }
            pass.listed += 1
            var next = DirectoryState(inode: raw.inode, modified: raw.modified_ns, changed: raw.changed_ns, confirm: changed,
                                      turn: state?.turn ?? Int(PolledTree.fnv1a(directory) % UInt64(max(1, settings.sweepEvery))))
            var before: [[UInt8]: KnownFile] = [:]
            if let old = state {
                before.reserveCapacity(old.files.count)
                for entry in old.files { before[entry.name] = entry.known }
            }
            for entry in listing.entries {
                switch entry.type {
                case .regular:
                    let name = entry.name + [0]
                    next.files.append(FileEntry(name: name, known: before.removeValue(forKey: name) ?? Self.unknownFile))
                case .directory:
                    next.subdirectories.append(entry.name)
                case .symlink where settings.followSymlinks:
                    let name = entry.name + [0]
                    next.files.append(FileEntry(name: name, known: before.removeValue(forKey: name) ?? Self.unknownFile))
                default:
                    // Counted once, when first listed, not at every listing.
                    next.skippedNames.insert(entry.name)
                    if state?.skippedNames.contains(entry.name) != true { pass.skipped[entry.type] += 1 }
                }
            }
            for gone in state?.subdirectories ?? [] where !next.subdirectories.contains(gone) {
                forget(Self.join(directory, gone))
            }
            // Files no longer listed: what waited for their second look is dropped.
            for name in before.keys { candidates[Self.join(directory, Array(name.dropLast()))] = nil }
            state = next
        } else {
            pass.unchanged += 1
            state!.confirm = false
        }
        guard var current = state else { return nil }
        state = nil // the only reference left: the arrays below are changed in place, not copied
        if settings.recursive {
            for name in current.subdirectories {
                let child = Self.join(directory, name)
                if descend(child) { pass.frontier.append(child) }
            }
        }
        let now = MonotonicInstant.now
        let looks = statFiles(current.files, in: descriptor, directory: directory)
        var dropped = false
        for index in current.files.indices {
            let relative: [UInt8]? = settings.selectsAll ? nil : Self.join(directory, Array(current.files[index].bareName))
            guard let look = looks[index] else { continue } // not selected
            pass.stats += 1
            let file = look.status
            guard look.error == 0 else {
                let error = Errno(rawValue: look.error)
                if Self.isFileSystemFailure(error) {
                    directories[directory] = current
                    return (relative ?? Self.join(directory, Array(current.files[index].bareName)), error)
                }
                candidates[relative ?? Self.join(directory, Array(current.files[index].bareName))] = nil
                current.files[index].known.size = -2 // gone: dropped below
                dropped = true
                continue
            }
            guard mode_t(file.mode) & S_IFMT == S_IFREG else {
                let name = Array(current.files[index].bareName)
                if current.skippedNames.insert(name).inserted { pass.skipped[TreeScanner.EntryType(mode: mode_t(file.mode))] += 1 }
                current.files[index].known.size = -2
                dropped = true
                continue
            }
            let seen = KnownFile(file)
            let known = current.files[index].known
            guard seen != known else { continue }
            current.files[index].known = seen
            if known.size < 0 && isFirstPass && !settings.catchUp && !changedSinceStart(file) { continue }
            let path = relative ?? Self.join(directory, Array(current.files[index].bareName))
            let identity = settings.tree.identity(of: FileIdentity(file), relative: path)
            if var waiting = candidates[path] {
                waiting.identity = identity
                waiting.lookedAt = now
                candidates[path] = waiting
            } else {
                candidates[path] = Candidate(identity: identity, lookedAt: now, firstSeen: now)
            }
        }
        if dropped { current.files.removeAll { $0.known.size == -2 } }
        directories[directory] = current
        return nil
    }

    private struct Look {
        var status = wk_file_identity()
        /// 0, or the errno of the statx.
        var error: Int32 = 0
    }

    /// One statx per selected file (nil for one the filter leaves out). From one thread:
    /// stats from eight threads at once made a pass over sshfs slower, not faster (18.4 s
    /// against 13.5 s for 100,000 files: sshfs answers one request at a time).
    private func statFiles(_ files: [FileEntry], in descriptor: Int32, directory: [UInt8]) -> [Look?] {
        // A pass comes poll_interval after the last look: the cache has expired, and the
        // lookup that refills it asks the server once (forcing would ask twice).
        let flags = settings.followSymlinks ? 0 : AT_SYMLINK_NOFOLLOW
        return files.map { file in
            if !settings.selectsAll && !selects(Self.join(directory, Array(file.bareName))) { return nil }
            var result = Look()
            let stated = nothingOrErrno {
                file.name.withUnsafeBufferPointer { bytes in
                    bytes.withMemoryRebound(to: CChar.self) { wk_poll_stat(descriptor, $0.baseAddress!, flags, &result.status) }
                }
            }
            if case .failure(let error) = stated { result.error = error.rawValue }
            return result
        }
    }

    /// Without catch-up, the first pass takes only what changed since the poller started: the
    /// rest was there before. The slack is the file system clock's step: file times lag the
    /// wall clock by up to a tick (10 ms at HZ=100) on a local disk; over SFTP they are whole
    /// seconds. Two seconds ran files written before the start (issue 36).
    private func changedSinceStart(_ file: wk_file_identity) -> Bool {
        let since = (startedWall.nanosecondsSinceEpoch ?? 0) - (settings.tree.isRemote ? 1_000_000_000 : 10_000_000)
        return file.modified_ns >= since || file.changed_ns >= since
    }

    /// What a second look saw becomes what the next pass compares with.
    private func remember(_ relative: [UInt8], _ known: KnownFile) {
        let cut = relative.lastIndex(of: UInt8(ascii: "/"))
        let directory = cut.map { Array(relative[..<$0]) } ?? []
        let name = Array(relative[(cut.map { $0 + 1 } ?? 0)...]) + [0]
        guard let index = directories[directory]?.files.firstIndex(where: { $0.name == name }) else { return }
        directories[directory]!.files[index].known = known
    }

    private func forget(_ directory: [UInt8]) {
        guard let state = directories.removeValue(forKey: directory) else { return }
        for entry in state.files { candidates[Self.join(directory, Array(entry.bareName))] = nil }
        for name in state.subdirectories { forget(Self.join(directory, name)) }
    }

    // MARK: Second looks

    private func armSettle() {
        guard let next = candidates.values.map(\.lookedAt).min() else { return }
        settleTimer?.schedule(at: (next + settings.settle).dispatchTime)
    }

    /// Candidates whose first look is `settle` old are looked at again: unchanged ones are
    /// handed on, changed ones wait again from now, vanished ones are dropped.
    private func lookAgain() {
        guard !stopped, !candidates.isEmpty else { return }
        let now = MonotonicInstant.now
        var settled: [Settled] = []
        var restarted: UInt64 = 0
        for (relative, candidate) in candidates where candidate.lookedAt + settings.settle <= now {
            guard !stopped else { return }
            var file = wk_file_identity()
            progress.withLock {
                $0.busySince = .now
                $0.directory = relative
            }
            let stated = nothingOrErrno { TreeScanner.withCString(absolute(relative)) { wk_poll_stat(AT_FDCWD, $0, statFlags, &file) } }
            progress.withLock { $0.busySince = nil }
            if case .failure(let error) = stated {
                // Unreachable: the next pass finds out and says so; gone: nothing to run.
                if !Self.isFileSystemFailure(error) { candidates[relative] = nil }
                continue
            }
            let identity = settings.tree.identity(of: FileIdentity(file), relative: relative)
            let before = candidate.identity
            if identity.inode == before.inode && identity.size == before.size && identity.modifiedNanoseconds == before.modifiedNanoseconds
                && mode_t(file.mode) & S_IFMT == S_IFREG {
                candidates[relative] = nil
                settled.append(Settled(relative: relative, identity: identity, firstSeen: candidate.firstSeen))
                remember(relative, KnownFile(file))
            } else {
                restarted += 1
                candidates[relative] = Candidate(identity: identity, lookedAt: now, firstSeen: candidate.firstSeen)
            }
        }
        progress.withLock {
            $0.handedOn += UInt64(settled.count)
            $0.settleRestarts += restarted
            $0.waitingToSettle = candidates.count
        }
        if !settled.isEmpty { deliver(self, settled) }
        armSettle()
    }

    // MARK: CPU

    static func threadCPU() -> Duration {
        var spec = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec)
        return .seconds(Int64(spec.tv_sec)) + .nanoseconds(Int64(spec.tv_nsec))
    }

    // MARK: Dump

    func describe(now: MonotonicInstant) -> [DumpField] {
        let state = progress.withLock { $0 }
        func ms(_ value: Duration?) -> DumpValue { value.map { .double(($0.secondsDouble * 1_000_000).rounded() / 1_000) } ?? .null }
        return [
            .init("tree", .bytes(absolute(settings.tree.relative))),
            .init("file_system", .string(settings.tree.fileSystemType)),
            .init("source", .string(settings.tree.source)),
            .init("why", .string(settings.tree.reason)),
            .init("interval_s", .double(settings.interval.secondsDouble)),
            .init("settle_s", .double(settings.settle.secondsDouble)),
            .init("unchanged_directories_files_every_passes", .int(Int64(settings.sweepEvery))),
            .init("state", .string(Self.stateText(state, now: now))),
            .init("passes", .int(Int64(state.passes))),
            .init("passes_stopped", .int(Int64(state.passesStopped))),
            .init("overruns", .int(Int64(state.overruns))),
            .init("last_pass_ms", ms(state.lastPassWall)),
            .init("last_pass_cpu_ms", ms(state.lastPassCPU)),
            .init("cpu_total_ms", ms(state.totalCPU)),
            .init("directories", .int(Int64(state.directoriesKnown))),
            .init("files", .int(Int64(state.filesKnown))),
            .init("listed_last_pass", .int(Int64(state.listedLastPass))),
            .init("unchanged_last_pass", .int(Int64(state.unchangedLastPass))),
            .init("stats_last_pass", .int(Int64(state.statsLastPass))),
            .init("waiting_to_settle", .int(Int64(state.waitingToSettle))),
            .init("handed_on", .int(Int64(state.handedOn))),
            .init("settle_restarts", .int(Int64(state.settleRestarts))),
            .init("last_error", state.lastError.map { .string($0) } ?? .null),
        ]
    }

    /// "polling", "unreachable for 42s: ...", "waiting 20s for the file system at ...".
    static func stateText(_ state: Progress, now: MonotonicInstant) -> String {
        if let since = state.busySince, now - since >= stallAfter {
            return "waiting \((now - since).compactDescription) for the file system (at \(LineEscaping.escaped(state.directory)))"
        }
        if let since = state.unreachableSince {
            return "unreachable for \((now - since).compactDescription): \(state.lastError ?? "?")"
        }
        return state.passes == 0 ? "first pass" : "polling"
    }

    /// How a second look stats. On a network or FUSE file system the client keeps attributes
    /// for a while (FUSE's attr_timeout, 1 s by default; NFS's actimeo, 3 s and more): the
    /// second look, poll_settle after the first, must ask the server, or a file still being
    /// written can look unchanged (seen with poll_settle = 1s on sshfs: a file appended to for
    /// 5 s ran before its last append, in 2 of 9 runs).
    private var statFlags: Int32 {
        (settings.followSymlinks ? 0 : AT_SYMLINK_NOFOLLOW) | (settings.tree.isRemote ? WK_AT_STATX_FORCE_SYNC : 0)
    }

    /// `sweepEvery` on a network or FUSE file system: each stat there is a round trip that
    /// costs the daemon ~12 µs of kernel CPU (sshfs), and a file rewritten in place is the
    /// only one an unchanged directory hides. Every sixth pass cost 0.244 s a pass on
    /// 100,000 files over sshfs, over issue 24's 0.2 s (docs/measurements/polling.md).
    static let remoteSweepEvery = 10

    /// A directory or stat this long in the making is a file system that stopped answering.
    static let stallAfter: Duration = .seconds(10)
}
