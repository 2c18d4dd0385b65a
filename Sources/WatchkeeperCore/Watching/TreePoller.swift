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
// @unchecked Sendable: confined to its own poll queue (watchkeeper.poll.RULE).
final class TreePoller: @unchecked Sendable {
    /// Whether a stall was said in the log (the watching queue's, like everything it says).
    var stallReported = false

    let settings: Settings
    let queue: SubsystemQueue
    private let sources: SourceRegistry
    private let selects: @Sendable ([UInt8]) -> Bool
    private let descend: @Sendable ([UInt8]) -> Bool
    private let deliver: @Sendable (TreePoller, [Settled]) -> Void
    private let report: @Sendable (TreePoller, Report) -> Void
    /// What the watching queue may read at any time.
    let progress = Mutex(PollProgress())

    // Everything below is touched only on `queue`.
    private typealias KnownFile = PolledDirectory.KnownFile

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

    private var directories: [[UInt8]: PolledDirectory] = [:]
    /// Renames within the tree, told only where the tree's identities hash the path (FUSE).
    private var moves: PolledMoves?
    private var secondLooks: SecondLooks
    /// Passes in a row that stopped at a file system error: the next waits longer.
    private var passFailuresInARow = 0
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
        self.secondLooks = SecondLooks(settle: settings.settle, maximumPause: Self.longestPause(interval: settings.interval))
        if settings.tree.isRemote && !FilesystemClass.hasStableInodes(settings.tree.fileSystemType) { moves = PolledMoves() }
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
            state.waitingToSettle = secondLooks.count
            defer {
                state.unreachableSince = nil
                state.lastError = nil
                state.retryAt = nil
            }
            return state.unreachableSince
        }
        passFailuresInARow = 0
        secondLooks.fileSystemAnswered()
        moves?.passEnded(passesBegun)
        if let since = wasUnreachable { report(self, .reachableAgain(after: now - since)) }
        if done.skipped.skipped > 0 { report(self, .skipped(done.skipped)) }
        passTimer?.schedule(at: max(nextPassAt ?? now, now).dispatchTime)
        armSettle()
    }

    /// A pass that met a file system error stops there; what it learned so far is kept, and
    /// the next pass starts again from the top after a pause: the interval, doubled with
    /// each stopped pass in a row up to `longestPause`.
    private func stopPass(_ stoppedPass: Pass, at path: [UInt8], error: Errno) {
        let now = MonotonicInstant.now
        passFailuresInARow += 1
        let pause = min(settings.interval * (1 << min(passFailuresInARow - 1, 16)), Self.longestPause(interval: settings.interval))
        let next = max(nextPassAt ?? now, now + pause)
        let first = noteFailure(at: path, error: error, now: now) { $0.passesStopped += 1; $0.retryAt = next }
        if first { report(self, .unreachable(path: absolute(path), error: error)) }
        passTimer?.schedule(at: next.dispatchTime)
    }

    /// Says in `progress` that the file system failed at `path`; true the first time since
    /// it last answered.
    private func noteFailure(at path: [UInt8], error: Errno, now: MonotonicInstant, _ count: (inout PollProgress) -> Void) -> Bool {
        progress.withLock { state -> Bool in
            count(&state)
            state.lastError = "\(error) (\(error.symbolicName)) at \(LineEscaping.escaped(absolute(path)))"
            guard state.unreachableSince == nil else { return false }
            state.unreachableSince = now
            return true
        }
    }

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
        if let known = directories[directory], known.isUnchanged(raw),
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
        let changed = state.map { !$0.isUnchanged(raw) } ?? true
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
            let relisting = PolledDirectory.listed(listing.entries, status: raw, changed: changed,
                                                   turn: state?.turn ?? Int(PolledTree.fnv1a(directory) % UInt64(max(1, settings.sweepEvery))),
                                                   followSymlinks: settings.followSymlinks, before: state, skipped: &pass.skipped)
            for gone in relisting.goneSubdirectories { forget(Self.join(directory, gone)) }
            // Files no longer listed: what waited for their second look is dropped.
            for (name, known) in relisting.goneFiles { vanished(Self.join(directory, name), known) }
            state = relisting.directory
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
        let failure = lookAtFiles(of: directory, &current, in: descriptor, pass: &pass)
        directories[directory] = current
        return failure
    }

    /// A stat of each selected file of `directory` (open as `descriptor`): what changed
    /// waits for its second look, what is gone or not a regular file is dropped from
    /// `state`. Returns the failure that stops the pass, if any.
    private func lookAtFiles(of directory: [UInt8], _ current: inout PolledDirectory, in descriptor: Int32,
                             pass: inout Pass) -> (path: [UInt8], error: Errno)? {
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
                if Self.isFileSystemFailure(error) { return (relative ?? Self.join(directory, Array(current.files[index].bareName)), error) }
                vanished(relative ?? Self.join(directory, Array(current.files[index].bareName)), current.files[index].known)
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
            if known.isUnknown && isFirstPass && !settings.catchUp && !changedSinceStart(file) { continue }
            let path = relative ?? Self.join(directory, Array(current.files[index].bareName))
            if known.isUnknown, !isFirstPass, let move = moves?.appeared(path, seen, pass: passesBegun) { followed(move) }
            let identity = settings.tree.identity(of: FileIdentity(file), relative: path)
            secondLooks.saw(path, as: identity, at: now, replacedAnother: !known.isUnknown && known.inode != seen.inode)
        }
        if dropped { current.files.removeAll { $0.known.size == -2 } }
        return nil
    }

    /// A file no longer there: its second look is dropped, and it may be half of a rename.
    private func vanished(_ path: [UInt8], _ known: KnownFile) {
        secondLooks.forget(path)
        if let move = moves?.vanished(path, known, pass: passesBegun) { followed(move) }
    }

    /// The watcher hears of it before the file's second look can hand it on from its new
    /// path (both go to its queue in order).
    private func followed(_ move: (from: [UInt8], to: [UInt8])) {
        progress.withLock { $0.movesFollowed += 1 }
        report(self, .moved(from: move.from, to: move.to))
    }

    private struct Look {
        var status = wk_file_identity()
        var error: Int32 = 0 // or the errno of the statx
    }

    /// One statx per selected file (nil for one the filter leaves out). From one thread:
    /// stats from eight threads at once made a pass over sshfs slower, not faster (18.4 s
    /// against 13.5 s for 100,000 files: sshfs answers one request at a time).
    private func statFiles(_ files: [PolledDirectory.FileEntry], in descriptor: Int32, directory: [UInt8]) -> [Look?] {
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
        for entry in state.files { secondLooks.forget(Self.join(directory, Array(entry.bareName))) }
        for name in state.subdirectories { forget(Self.join(directory, name)) }
    }

    // MARK: Second looks

    private func armSettle() {
        guard let next = secondLooks.nextLook else { return }
        settleTimer?.schedule(at: next.dispatchTime)
    }

    /// Candidates whose last look is `settle` old are looked at again: unchanged ones are
    /// handed on, changed ones wait again from now, vanished ones are dropped. A look the
    /// file system fails ends the round and pauses the looks (SecondLooks); its CPU, like a
    /// pass's, is counted in `progress`.
    private func lookAgain() {
        guard !stopped, !secondLooks.isEmpty else { return }
        let cpuAtStart = Self.threadCPU()
        let now = MonotonicInstant.now
        var settled: [Settled] = []
        var restarted: UInt64 = 0
        var failure: (path: [UInt8], error: Errno)?
        var answered = false
        for (relative, candidate) in secondLooks.due(at: now) {
            guard !stopped else { return }
            var file = wk_file_identity()
            progress.withLock { ($0.busySince, $0.directory) = (.now, relative) }
            let stated = nothingOrErrno { TreeScanner.withCString(absolute(relative)) { wk_poll_stat(AT_FDCWD, $0, statFlags, &file) } }
            progress.withLock { $0.busySince = nil }
            if case .failure(let error) = stated {
                // Unreachable: no more looks for now; gone: nothing to run.
                if Self.isFileSystemFailure(error) {
                    failure = (relative, error)
                    break
                }
                secondLooks.forget(relative)
                answered = true
                continue
            }
            answered = true
            let status = FileIdentity(file)
            let identity = settings.tree.identity(of: status, relative: relative)
            let before = candidate.identity
            if identity.inode == before.inode && identity.size == before.size && identity.modifiedNanoseconds == before.modifiedNanoseconds
                && mode_t(file.mode) & S_IFMT == S_IFREG {
                _ = secondLooks.take(relative)
                settled.append(Settled(relative: relative, identity: identity, status: status, firstSeen: candidate.firstSeen, replacedAnother: candidate.replacedAnother))
                remember(relative, KnownFile(file))
            } else {
                restarted += 1
                secondLooks.saw(relative, as: identity, at: now)
            }
        }
        // A timer that fired a little before the pause's end looked at nothing: no answer.
        if failure != nil { secondLooks.fileSystemFailed(at: now) } else if answered { secondLooks.fileSystemAnswered() }
        let used = Self.threadCPU() - cpuAtStart
        progress.withLock {
            $0.handedOn += UInt64(settled.count)
            $0.settleRestarts += restarted
            $0.waitingToSettle = secondLooks.count
            $0.totalCPU += used
            $0.secondLookCPU += used
        }
        if let failure, noteFailure(at: failure.path, error: failure.error, now: now, { $0.secondLookFailures += 1 }) {
            report(self, .unreachable(path: absolute(failure.path), error: failure.error))
        }
        if !settled.isEmpty { deliver(self, settled) }
        armSettle()
    }

    /// Its part of the dump (PollProgress).
    func describe(now: MonotonicInstant) -> [DumpField] {
        progress.withLock { $0 }.describe(settings, now: now, absolute: absolute)
    }

    /// How a second look stats. On a network or FUSE file system the client keeps attributes
    /// for a while (FUSE's attr_timeout, 1 s by default; NFS's actimeo, 3 s and more): the
    /// second look, poll_settle after the first, must ask the server, or a file still being
    /// written can look unchanged (seen with poll_settle = 1s on sshfs: a file appended to for
    /// 5 s ran before its last append, in 2 of 9 runs).
    private var statFlags: Int32 {
        (settings.followSymlinks ? 0 : AT_SYMLINK_NOFOLLOW) | (settings.tree.isRemote ? WK_AT_STATX_FORCE_SYNC : 0)
    }
}
