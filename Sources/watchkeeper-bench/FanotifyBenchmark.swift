// fanotify for huge trees (issue 24): one tree of a million directories on a tmpfs this
// benchmark mounts, watched by the release daemon with method = "fanotify" (one filesystem
// mark) and with method = "inotify" (one watch per directory), then in turn by fsnotifywait
// -r (fanotify, one inode mark per directory), fsnotifywait -S (one filesystem mark) and
// inotifywait -r. For each: start to watching, RSS, the kernel memory of its marks, and the
// time from a file closed in a random deep directory to its job starting (the daemons; the
// job is inotify-spawn-baseline --record, as in the watch benchmark) or to its line on the
// peer's stdout. The two daemons start one after the other and then run side by side, the
// files going to each in turn, so that this 2-core machine's noise hits both alike.
//
// WATCHKEEPER_BENCH_FANOTIFY_DIRS (1000000), _FILES (1000), _CASES (all five), _TIMEOUT_S (600).
// Results and the reading: docs/measurements/fanotify.md.

import Foundation

#if canImport(Glibc)
import Glibc
#endif

enum FanotifyBenchCase: String, CaseIterable {
    case fanotify
    case inotify
    case fsnotifywait
    case fsnotifywaitFilesystem = "fsnotifywait-S"
    case inotifywait

    var label: String {
        switch self {
        case .fanotify: "watchkeeper fanotify"
        case .inotify: "watchkeeper inotify"
        case .fsnotifywait: "fsnotifywait -r"
        case .fsnotifywaitFilesystem: "fsnotifywait -S"
        case .inotifywait: "inotifywait -r"
        }
    }

    /// The peer's command line before the watched directory; nil for the daemon. Both tools
    /// print "Watches established." on stderr once every mark is in place.
    var peerArguments: [String]? {
        let events = ["-m", "-e", "close_write", "--format", "%w%f"]
        return switch self {
        case .fanotify, .inotify: nil
        // fsnotifywait watches with fanotify by default (-F); -r puts an inode mark on each
        // directory, -S one filesystem mark on the directory's filesystem.
        case .fsnotifywait: ["/usr/bin/fsnotifywait", "-r"] + events
        // With -S it leaves stdout to stdio's buffering (4 KiB on a pipe), where -r flushes
        // each event: line-buffered through stdbuf, as anyone reading it live would.
        case .fsnotifywaitFilesystem: ["/usr/bin/stdbuf", "-oL", "/usr/bin/fsnotifywait", "-S"] + events
        case .inotifywait: ["/usr/bin/inotifywait", "-r"] + events
        }
    }

    /// Its files' names start with this.
    var fileName: String { "f-" + rawValue }

    /// Descriptors it keeps open for each directory: fsnotifywait -r (3.22.6) opens each
    /// directory twice (for its handle and an O_PATH descriptor) and closes neither.
    var descriptorsPerDirectory: Int { self == .fsnotifywait ? 2 : 0 }

    /// The per-user limit its marks count against, one a directory.
    var markLimit: String? {
        switch self {
        case .inotify, .inotifywait: "/proc/sys/fs/inotify/max_user_watches"
        case .fsnotifywait: "/proc/sys/fs/fanotify/max_user_marks"
        case .fanotify, .fsnotifywaitFilesystem: nil
        }
    }
}

struct FanotifyBenchSettings {
    let directories, files: Int
    let timeout: Duration
    let cases: [FanotifyBenchCase]
    /// Between two files: no job is still running when the next file is closed.
    let spacingNanoseconds: UInt64 = 20_000_000

    init() {
        let environment = ProcessInfo.processInfo.environment
        directories = Int(environment["WATCHKEEPER_BENCH_FANOTIFY_DIRS"] ?? "") ?? 1_000_000
        // At 200 files the p99 is the second-largest sample: against inotify mode's it went
        // from 1.05x to 1.22x between runs; at 1,000 both percentiles stayed within 1 %.
        files = Int(environment["WATCHKEEPER_BENCH_FANOTIFY_FILES"] ?? "") ?? 1_000
        timeout = .seconds(Int(environment["WATCHKEEPER_BENCH_FANOTIFY_TIMEOUT_S"] ?? "") ?? 600)
        cases = (environment["WATCHKEEPER_BENCH_FANOTIFY_CASES"] ?? FanotifyBenchCase.allCases.map(\.rawValue).joined(separator: ","))
            .split(separator: ",").compactMap { FanotifyBenchCase(rawValue: String($0)) }
    }
}

struct FanotifyCaseResult {
    var failure: String?
    var watchingAfter: Double = 0
    /// At watching; at the end, after the files (its VmHWM is the peak).
    var atWatching: ProcessMemory?
    var atEnd: ProcessMemory?
    /// Bytes in the fsnotify mark caches at watching, less before the start; and the
    /// unreclaimable slab's growth over the same span (every cache, so other work shows too).
    var markBytes: Int?
    var unreclaimableSlabBytes: Int?
    var latency = LatencyResult()
    /// The daemon's: "tree_method" of its rule in the dump, and when its tree was fully listed.
    var treeMethod: String?
    var listedAfter: Double?
    /// The daemon's CPU (user + system) from its start until the tree was fully listed.
    var cpuUntilListed: Double?
    var notes: [String] = []
}

// MARK: Kernel memory

/// Bytes of the fsnotify mark caches' objects in use. SLUB merges caches of one size and
/// flags: here inotify_inode_mark, fanotify_mark, dnotify_mark and sigqueue are one cache
/// (:A-0000080), and fsnotify_mark_connector shares one with lsm_file_cache. /proc/slabinfo
/// lists a merged cache under one of its names only; /sys/kernel/slab has a link for every
/// name, so each merged cache is read once, through its link's target. The event caches
/// (fanotify_fid_event...) are left out: they hold queued events, not marks, and are merged
/// with busy caches (vmap_area, jbd2_inode).
private func markCacheBytes() -> Int? {
    let base = "/sys/kernel/slab/"
    var caches = Set<String>()
    var bytes = 0
    for name in ["inotify_inode_mark", "fanotify_mark", "fsnotify_mark_connector"] {
        let cache = (try? FileManager.default.destinationOfSymbolicLink(atPath: base + name)) ?? name
        guard caches.insert(cache).inserted else { continue }
        func number(_ file: String) -> Int? {
            (try? String(contentsOfFile: base + name + "/" + file, encoding: .utf8))?.split(separator: " ").first
                .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
        guard let objects = number("objects"), let size = number("slab_size") else { return nil }
        bytes += objects * size
    }
    return bytes
}

private func unreclaimableSlabBytes() -> Int? {
    let meminfo = (try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8)) ?? ""
    return meminfo.split(separator: "\n").first { $0.hasPrefix("SUnreclaim:") }?
        .split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) }.map { $0 * 1024 }
}

/// Both figures at one moment.
private struct KernelMemory {
    let markBytes = markCacheBytes()
    let unreclaimableSlab = unreclaimableSlabBytes()

    func growth(since before: KernelMemory) -> (marks: Int?, unreclaimableSlab: Int?) {
        (markBytes.flatMap { after in before.markBytes.map { after - $0 } },
         unreclaimableSlab.flatMap { after in before.unreclaimableSlab.map { after - $0 } })
    }
}

// MARK: The tree

/// The tmpfs the tree lives on, mounted on `mountPoint`, unmounted at teardown.
private func mountTmpfs(_ mountPoint: String, teardown: WatchTeardown) throws {
    try makeDirectory(mountPoint)
    // nr_inodes=0: no inode limit (the default, half the RAM's pages, would do too).
    guard mount("tmpfs", mountPoint, "tmpfs", 0, "mode=0755,size=1g,nr_inodes=0") == 0 else {
        throw BenchFailure(description: "unable to mount a tmpfs on \(mountPoint): \(String(cString: strerror(errno)))")
    }
    teardown.add {
        // A process still in it (one that would not stop) keeps it busy: detached then.
        if umount2(mountPoint, 0) != 0 && umount2(mountPoint, Int32(MNT_DETACH)) != 0 {
            report("fanotify: unable to unmount \(mountPoint): \(String(cString: strerror(errno)))")
        }
        rmdir(mountPoint)
    }
}

/// `count` random deep directories `d<i>/s<j>` of the tree makeTree made, the same
/// for every case (a fixed seed), so that each case's files land where the others' did.
private func randomDeepDirectories(_ root: String, directories: Int, count: Int) -> [String] {
    let width = max(1, Int(Double(directories).squareRoot()))
    var state: UInt64 = 24
    func next() -> UInt64 {  // SplitMix64
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    return (0..<count).map { _ in
        // makeTree's index i is d<i / width>, itself when i % width is 0, else s<i % width - 1>.
        while true {
            let index = Int(next() % UInt64(directories))
            if width == 1 { return root + "/d\(index)" }
            if index % width != 0 { return root + "/d\(index / width)/s\(index % width - 1)" }
        }
    }
}

// MARK: One case

/// Closes one file at a time, `spacing` apart, into each of `directories` for each of the
/// `names` in turn (the order flipped every directory), so that machine noise hits every case
/// alike; waits until `arrived(i)` knows every file of `names[i]` (or 30 s pass) and returns
/// each one's close-to-arrival times. The files are removed after.
private func closeToArrival(_ directories: [String], names: [String], spacing: UInt64, arrived: (Int) -> [String: UInt64]) throws -> [LatencyResult] {
    var closedAt: [[String: UInt64]] = names.map { _ in [:] }
    defer { for files in closedAt { for path in files.keys { unlink(path) } } }
    var next = now()
    for (index, directory) in directories.enumerated() {
        for which in index % 2 == 0 ? Array(names.indices) : names.indices.reversed() {
            let path = directory + "/\(names[which])-\(index)"
            closedAt[which][path] = try writeFile(path)
            next += spacing
            monotonicSleep(until: next)
        }
    }
    var seen: [[String: UInt64]] = names.map { _ in [:] }
    let deadline = now() + 30_000_000_000
    while now() < deadline {
        for which in names.indices { seen[which] = arrived(which).filter { closedAt[which][$0.key] != nil } }
        if names.indices.allSatisfy({ seen[$0].count == closedAt[$0].count }) { break }
        usleep(20_000)
    }
    return names.indices.map { which in
        var result = LatencyResult()
        for (path, at) in seen[which] { result.samples.append(Int64(bitPattern: at) - Int64(bitPattern: closedAt[which][path]!)) }
        result.missing = closedAt[which].count - seen[which].count
        return result
    }
}

/// A daemon case: its daemon started while no other case's is starting, its start-up
/// figures taken, and it left running for the files, which go to every daemon case in turn.
private func startDaemonCase(_ kind: FanotifyBenchCase, _ settings: FanotifyBenchSettings, launcher: PeerLauncher, scratch: String,
                             tree: String) throws -> (RunningPeer, FanotifyCaseResult) {
    var result = FanotifyCaseResult()
    let peer = RunningPeer(kind: .watchkeeper, scratch: scratch, directory: tree)
    launcher.teardown.add { peer.stop() }
    let kernelBefore = KernelMemory()
    peer.startedAt = now()
    // Every daemon sees every file: each one's jobs are only for its own.
    try launcher.startWatchkeeper(peer, recursive: true, readyTimeout: settings.timeout,
                                  ruleKeys: ["method = \"\(kind.rawValue)\"", "include = [\"**/\(kind.fileName)-*\"]"])
    result.watchingAfter = Double(now() - peer.startedAt) / 1e9
    result.atWatching = ProcessMemory(pid: peer.watcherPid)
    (result.markBytes, result.unreclaimableSlabBytes) = KernelMemory().growth(since: kernelBefore)
    result.treeMethod = benchRule(peer)?["tree_method"] as? String
    // Only the fanotify backend names itself on stderr ("... with fanotify").
    if (peer.child?.stderrText ?? "").contains("with fanotify") != (kind == .fanotify) {
        result.notes.append("stderr \(kind == .fanotify ? "does not say" : "says") \"with fanotify\"")
    }
    result.listedAfter = waitUntilListed(peer, timeout: settings.timeout, notes: &result.notes)
    if result.listedAfter != nil, let stat = readProcessStat(peer.watcherPid) {
        result.cpuUntilListed = Double(stat.cpuTicks) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
    return (peer, result)
}

/// After the files: memory at the end, and what the rule counted.
private func finishDaemonCase(_ peer: RunningPeer, _ result: inout FanotifyCaseResult) {
    result.atEnd = ProcessMemory(pid: peer.watcherPid)
    if let rule = benchRule(peer) {
        result.notes.append(["overflows", "rescans", "events_seen", "jobs_submitted"].map { "\($0) \(rule[$0] ?? "?")" }.joined(separator: ", "))
    }
    peer.stop()
}

/// The daemon's rule in a fresh dump (the benchmark's configuration has one).
private func benchRule(_ peer: RunningPeer) -> [String: Any]? {
    guard let dump = peer.stateDump(), let watches = dump["watches"] as? [String: Any] else { return nil }
    return (watches["rules"] as? [[String: Any]])?.first
}

/// Seconds from the start until the rule's tree is fully listed for the files already there:
/// a fanotify tree is listed after READY, in slices, and the rule's "listing" in the dump is
/// an object until it is done (an inotify tree is listed before READY). Asked every 250 ms,
/// so it is the first dump that shows no listing; nil if none did within `timeout`.
private func waitUntilListed(_ peer: RunningPeer, timeout: Duration, notes: inout [String]) -> Double? {
    let deadline = peer.startedAt + UInt64(timeout.components.seconds) * 1_000_000_000
    var lastSeen: [String: Any]?
    while now() < deadline {
        guard let rule = benchRule(peer) else { return nil }
        guard let listing = rule["listing"] as? [String: Any] else {
            if let last = lastSeen {
                notes.append(String(format: "last dump while listing: %@ directories listed, %@ queued, %.1f s into the listing",
                                    "\(last["directories_listed"] ?? "?")", "\(last["directories_queued"] ?? "?")", last["seconds"] as? Double ?? .nan))
            }
            return Double(now() - peer.startedAt) / 1e9
        }
        lastSeen = listing
        usleep(250_000)
    }
    notes.append("tree not fully listed within \(timeout): \(lastSeen?["directories_listed"] ?? "?") directories listed")
    return nil
}

private func runPeerCase(_ kind: FanotifyBenchCase, _ settings: FanotifyBenchSettings, teardown: WatchTeardown, scratch: String,
                         tree: String, directories: [String]) throws -> FanotifyCaseResult {
    guard let arguments = kind.peerArguments, access(arguments[0], X_OK) == 0 else {
        throw BenchFailure(description: "unable to find \(kind.peerArguments?.first ?? "?"): apt-get install -y inotify-tools")
    }
    var result = FanotifyCaseResult()
    if kind.descriptorsPerDirectory > 0 {
        let limit = raiseOpenFileLimit(to: kind.descriptorsPerDirectory * (settings.directories + 1) + 1_024, teardown: teardown)
        result.notes.append("it keeps \(kind.descriptorsPerDirectory) descriptors open a directory; \(limit)")
    }
    var pipeEnds: [Int32] = [0, 0]
    guard pipe(&pipeEnds) == 0 else { throw BenchFailure(description: "unable to make a pipe: \(String(cString: strerror(errno)))") }
    // Neither end leaks into the next case's processes; dup2 makes the child's stdout without it.
    for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
    let kernelBefore = KernelMemory()
    let started = now()
    let child: BenchChild
    do {
        child = try BenchChild(name: kind.rawValue, arguments: arguments + [tree], environment: ["PATH=/usr/bin:/bin"],
                               stderrPath: scratch + "/stderr.log", stdout: pipeEnds[1])
    } catch {
        close(pipeEnds[0])
        close(pipeEnds[1])
        throw error
    }
    close(pipeEnds[1])
    teardown.add { child.stop() }
    defer { child.stop() }
    // fsnotifywait's fanotify mode also prints "[fid=...;name='f'] /dir/f" before the event
    // line: the path is the last word of both.
    let lines = FirstSeenLines(reading: pipeEnds[0], key: { String($0.split(separator: " ").last ?? "") }, clock: { Double(now()) })
    let deadline = started + UInt64(settings.timeout.components.seconds) * 1_000_000_000
    let context = result.notes.isEmpty ? "" : " (\(result.notes.joined(separator: "; ")))"
    while !child.stderrText.contains("Watches established.") {
        if child.hasExited { throw BenchFailure(description: "\(kind.label) exited before watching: \(child.stderrTail())\(context)") }
        if now() > deadline { throw BenchFailure(description: "\(kind.label) was not watching within \(settings.timeout): \(child.stderrTail())\(context)") }
        usleep(10_000)
    }
    result.watchingAfter = Double(now() - started) / 1e9
    result.atWatching = ProcessMemory(pid: child.pid)
    (result.markBytes, result.unreclaimableSlabBytes) = KernelMemory().growth(since: kernelBefore)
    result.latency = try closeToArrival(directories, names: [kind.fileName], spacing: settings.spacingNanoseconds) { _ in
        var seen: [String: UInt64] = [:]
        for (index, directory) in directories.enumerated() {
            let path = directory + "/\(kind.fileName)-\(index)"
            if let at = lines.firstSeen(path) { seen[path] = UInt64(at) }
        }
        return seen
    }[0]
    result.atEnd = ProcessMemory(pid: child.pid)
    return result
}

/// RLIMIT_NOFILE of this process, which its children inherit, to `needed` (and fs.nr_open,
/// its ceiling, with it), both put back at teardown. Without CAP_SYS_RESOURCE the hard limit
/// cannot rise: the soft one goes up to it, and what was done is returned to be said.
private func raiseOpenFileLimit(to needed: Int, teardown: WatchTeardown) -> String {
    raiseKernelLimit("/proc/sys/fs/nr_open", to: needed, teardown: teardown)
    var old = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &old)
    guard old.rlim_cur < rlim_t(needed) else { return "RLIMIT_NOFILE \(old.rlim_cur)" }
    teardown.add { _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &old) }
    var raised = rlimit(rlim_cur: rlim_t(needed), rlim_max: max(old.rlim_max, rlim_t(needed)))
    if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { return "RLIMIT_NOFILE raised to \(needed) for it" }
    let why = String(cString: strerror(errno))
    var soft = rlimit(rlim_cur: old.rlim_max, rlim_max: old.rlim_max)
    _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &soft)
    return "RLIMIT_NOFILE only \(old.rlim_max), its hard limit: unable to raise it to \(needed): \(why)"
}

// MARK: Entry point

func runFanotifyBenchmark() {
    let settings = FanotifyBenchSettings()
    guard geteuid() == 0 else {
        return report("fanotify: skipped: it mounts a tmpfs, raises fs.inotify.max_user_watches and fs.fanotify.max_user_marks, and fanotify needs CAP_SYS_ADMIN: run it as root")
    }
    let watchSettings = WatchBenchSettings()
    let teardown = WatchTeardown()
    defer { teardown.run() }
    for program in [watchSettings.daemonBinary, watchSettings.baseline] where access(program, X_OK) != 0 {
        return report("fanotify: failed: unable to run \(program): make release")
    }
    guard let root = makeScratchRoot(teardown: teardown) else { return }
    let mountPoint = root + "/tmpfs"
    let tree = mountPoint + "/tree"
    report("fanotify: \(settings.directories) directories on a tmpfs at \(mountPoint), \(settings.files) files a case into random deep directories, \(settings.spacingNanoseconds / 1_000_000) ms apart")
    do {
        try mountTmpfs(mountPoint, teardown: teardown)
        let building = now()
        try makeTree(tree, directories: settings.directories)
        report(String(format: "  tree of %d directories made in %.1f s (not a result)", settings.directories, Double(now() - building) / 1e9))
    } catch {
        return report("fanotify: failed: \(error)")
    }
    let directories = randomDeepDirectories(tree, directories: settings.directories, count: settings.files)
    var results = runDaemonCases(settings, watchSettings, root: root, tree: tree, directories: directories, teardown: teardown)
    for kind in settings.cases where kind.peerArguments == nil { if let result = results[kind] { reportCase(kind, result) } }
    for kind in settings.cases where kind.peerArguments != nil {
        let caseTeardown = WatchTeardown()
        teardown.add { caseTeardown.run() }
        defer { caseTeardown.run() }
        do {
            let scratch = try prepareCase(kind, settings, root: root, teardown: caseTeardown)
            results[kind] = try runPeerCase(kind, settings, teardown: caseTeardown, scratch: scratch, tree: tree, directories: directories)
        } catch {
            results[kind] = FanotifyCaseResult(failure: "\(error)")
        }
        if let result = results[kind] { reportCase(kind, result) }
    }
    reportTable(settings, results)
}

/// A scratch directory that goes at the end. Ctrl-C in `make bench`: the children get the
/// terminal's SIGINT too; the limits go back and the tmpfs goes away here, from a dispatch
/// source, while the main thread waits.
private func makeScratchRoot(teardown: WatchTeardown) -> String? {
    var template = Array("/tmp/wk-fanotify-bench-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else {
        report("fanotify: failed: unable to create a scratch directory: \(String(cString: strerror(errno)))")
        return nil
    }
    let root = String(cString: made)
    teardown.add { try? FileManager.default.removeItem(atPath: root) }
    let interrupts = [SIGINT, SIGTERM].map { signo in
        signal(signo, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: signo, queue: .global())
        source.setEventHandler {
            teardown.run()
            exit(128 + signo)
        }
        source.resume()
        return source
    }
    teardown.add {
        interrupts.forEach { $0.cancel() }
        signal(SIGINT, SIG_DFL)
        signal(SIGTERM, SIG_DFL)
    }
    return root
}

/// A case's scratch directory, with the mark limit it needs raised until `teardown`.
private func prepareCase(_ kind: FanotifyBenchCase, _ settings: FanotifyBenchSettings, root: String, teardown: WatchTeardown) throws -> String {
    if let limit = kind.markLimit { raiseKernelLimit(limit, to: settings.directories + 1 + 8_192, teardown: teardown) }
    let scratch = root + "/" + kind.rawValue
    try makeDirectory(scratch)
    return scratch
}

/// The daemons one after another, each started while the others idle; then the files, to
/// each daemon in turn. Their processes and limits are undone after, or by an interrupt.
private func runDaemonCases(_ settings: FanotifyBenchSettings, _ watchSettings: WatchBenchSettings, root: String, tree: String,
                            directories: [String], teardown: WatchTeardown) -> [FanotifyBenchCase: FanotifyCaseResult] {
    var results: [FanotifyBenchCase: FanotifyCaseResult] = [:]
    let daemonTeardown = WatchTeardown()
    teardown.add { daemonTeardown.run() }
    defer { daemonTeardown.run() }
    var daemons: [(kind: FanotifyBenchCase, peer: RunningPeer)] = []
    for kind in settings.cases where kind.peerArguments == nil {
        do {
            let scratch = try prepareCase(kind, settings, root: root, teardown: daemonTeardown)
            let (peer, result) = try startDaemonCase(kind, settings, launcher: PeerLauncher(settings: watchSettings, teardown: daemonTeardown),
                                                     scratch: scratch, tree: tree)
            daemons.append((kind, peer))
            results[kind] = result
        } catch {
            results[kind] = FanotifyCaseResult(failure: "\(error)")
        }
    }
    guard !daemons.isEmpty else { return results }
    var started: [[String: UInt64]] = daemons.map { _ in [:] }
    do {
        let latencies = try closeToArrival(directories, names: daemons.map(\.kind.fileName), spacing: settings.spacingNanoseconds) { which in
            for record in daemons[which].peer.tail.readNew() where started[which][record.path] == nil { started[which][record.path] = record.started }
            return started[which]
        }
        for (which, daemon) in daemons.enumerated() { results[daemon.kind]?.latency = latencies[which] }
    } catch {
        report("  the files for the daemons: failed: \(error)")
    }
    for daemon in daemons { finishDaemonCase(daemon.peer, &results[daemon.kind]!) }
    return results
}
