// Watch rules against what people run instead, on the release binary: event to job start
// latency, a burst of files, and the idle cost of 10,000 watched directories.
//
// Peers: `inotify-spawn-baseline --watch` (a bare inotify + posix_spawn loop in C, the
// practical lower bound), `inotifywait -m` piped into a shell loop, and incrond. Every job is
// the baseline's `--record` mode, which reads CLOCK_MONOTONIC first thing in main and appends
// it with the path to one file per peer; the writer reads the same clock right after close(2).
// So every peer is timed by one clock from the file being closed to its job running.
// Results and the reading: docs/measurements/watch.md.

import Foundation

#if canImport(Glibc)
import Glibc
#endif

private enum WatchPeer: String, CaseIterable {
    case watchkeeper
    case cLoop = "c-loop"
    case inotifywait
    case incron

    var label: String {
        switch self {
        case .watchkeeper: "watchkeeper"
        case .cLoop: "C inotify+posix_spawn"
        case .inotifywait: "inotifywait | sh loop"
        case .incron: "incrond"
        }
    }
}

private struct WatchBenchSettings {
    let daemonBinary: String
    let baseline: String
    let latencyFiles: Int
    let latencySpacingNanoseconds: UInt64
    let burstFiles: Int
    let burstQuietNanoseconds: UInt64
    let burstTimeoutNanoseconds: UInt64
    let idleSeconds: Int
    let idleDirectories: Int
    let peers: [WatchPeer]
    let burstPeers: [WatchPeer]
    let parts: Set<String>

    init() {
        let environment = ProcessInfo.processInfo.environment
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        daemonBinary = environment["WATCHKEEPER_BIN"] ?? directory.appendingPathComponent("watchkeeper").path
        baseline = environment["WATCHKEEPER_BENCH_BASELINE"] ?? directory.appendingPathComponent("inotify-spawn-baseline").path
        latencyFiles = Int(environment["WATCHKEEPER_BENCH_LATENCY_FILES"] ?? "") ?? 300
        latencySpacingNanoseconds = 20_000_000
        burstFiles = Int(environment["WATCHKEEPER_BENCH_BURST"] ?? "") ?? 100_000
        burstQuietNanoseconds = 15_000_000_000
        burstTimeoutNanoseconds = UInt64(Int(environment["WATCHKEEPER_BENCH_BURST_TIMEOUT_S"] ?? "") ?? 900) * 1_000_000_000
        idleSeconds = Int(environment["WATCHKEEPER_BENCH_IDLE_S"] ?? "") ?? 60
        idleDirectories = Int(environment["WATCHKEEPER_BENCH_IDLE_DIRS"] ?? "") ?? 10_000
        func peerList(_ variable: String, default fallback: [WatchPeer]) -> [WatchPeer] {
            guard let text = environment[variable] else { return fallback }
            return text.split(separator: ",").compactMap { WatchPeer(rawValue: String($0)) }
        }
        peers = peerList("WATCHKEEPER_BENCH_WATCH_PEERS", default: WatchPeer.allCases)
        burstPeers = peerList("WATCHKEEPER_BENCH_BURST_PEERS", default: WatchPeer.allCases).filter(peers.contains)
        parts = Set((environment["WATCHKEEPER_BENCH_WATCH_PARTS"] ?? "latency,burst,idle").split(separator: ",").map(String.init))
    }
}

// MARK: Clean-up

/// Everything the benchmark starts, creates or changes outside its scratch directory is
/// undone here, in reverse order, whether the benchmark finished or threw.
private final class WatchTeardown {
    private var steps: [() -> Void] = []

    func add(_ step: @escaping () -> Void) { steps.append(step) }

    func run() {
        while let step = steps.popLast() { step() }
    }
}

// MARK: Processes

private struct ProcessStat {
    let state: Character
    let parent: pid_t
    let cpuTicks: UInt64
}

private func readProcessStat(_ pid: pid_t) -> ProcessStat? {
    guard pid > 0, let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = text.lastIndex(of: ")") else { return nil }
    // After "pid (comm) ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    let fields = text[text.index(close, offsetBy: 2)...].split(separator: " ")
    guard fields.count > 12, let state = fields[0].first, let parent = pid_t(fields[1]) else { return nil }
    return ProcessStat(state: state, parent: parent, cpuTicks: (UInt64(fields[11]) ?? 0) + (UInt64(fields[12]) ?? 0))
}

private func processAlive(_ pid: pid_t) -> Bool {
    guard let stat = readProcessStat(pid) else { return false }
    return stat.state != "Z" && stat.state != "X"
}

private func processName(_ pid: pid_t) -> String {
    ((try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Every live process below `root`, from /proc's parent links.
private func descendants(of root: pid_t) -> [pid_t] {
    var children: [pid_t: [pid_t]] = [:]
    for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
        guard let pid = pid_t(entry), let stat = readProcessStat(pid), stat.state != "Z" else { continue }
        children[stat.parent, default: []].append(pid)
    }
    var found: [pid_t] = []
    var frontier = [root]
    while let next = frontier.popLast() {
        for child in children[next] ?? [] where child > 0 && !found.contains(child) {
            found.append(child)
            frontier.append(child)
        }
    }
    return found
}

/// Memory of one process from /proc/PID/status, in KiB.
private struct ProcessMemory {
    let resident: Int
    let anonymous: Int
    let peak: Int

    init(pid: pid_t) {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        func field(_ name: String) -> Int {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }?
                .split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first.flatMap { Int($0) } ?? 0
        }
        resident = field("VmRSS")
        anonymous = field("RssAnon")
        peak = field("VmHWM")
    }
}

private func cString(_ text: String) -> UnsafeMutablePointer<CChar>? { strdup(text) }

/// A process this benchmark started: stdin and stdout on /dev/null, stderr to a file.
private final class BenchChild {
    let name: String
    let pid: pid_t
    let stderrPath: String
    private var reaped = false

    init(name: String, arguments: [String], environment: [String], stderrPath: String) throws {
        self.name = name
        self.stderrPath = stderrPath
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let argv = arguments.map(cString) + [nil]
        let envp = environment.map(cString) + [nil]
        var child: pid_t = 0
        let result = posix_spawn(&child, arguments[0], &actions, nil, argv, envp)
        posix_spawn_file_actions_destroy(&actions)
        argv.forEach { free($0) }
        envp.forEach { free($0) }
        guard result == 0, child > 0 else {
            throw BenchFailure(description: "unable to start \(arguments[0]): \(String(cString: strerror(result)))")
        }
        pid = child
    }

    var hasExited: Bool {
        if reaped { return true }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid { reaped = true }
        return reaped
    }

    var stderrText: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    func stderrTail(lines: Int = 5) -> String {
        stderrText.split(separator: "\n").suffix(lines).joined(separator: " | ")
    }

    /// SIGTERM to `first` (our child, or the process below it whose exit ends the rest, as
    /// inotifywait ends its pipeline), then SIGKILL to our child and everything below it
    /// that is left after `grace`. Only positive pids found under our own child: never a
    /// process group, never -1. Stopping from the watcher down lets each parent reap its
    /// children: orphans would go to PID 1, which here may never reap them.
    func stop(first: pid_t? = nil, grace: Duration = .seconds(10)) {
        guard !hasExited else { return }
        let tree = descendants(of: pid)
        let target = first.flatMap { $0 > 0 && tree.contains($0) ? $0 : nil } ?? pid
        kill(target, SIGTERM)
        let deadline = now() + UInt64(grace.components.seconds) * 1_000_000_000
        while !hasExited && now() < deadline { usleep(10_000) }
        if !hasExited {
            for member in [pid] + tree where member > 0 && processAlive(member) { kill(member, SIGKILL) }
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            reaped = true
        }
        let orphanDeadline = now() + 2_000_000_000
        while tree.contains(where: processAlive) && now() < orphanDeadline { usleep(10_000) }
        for member in tree where member > 0 && processAlive(member) { kill(member, SIGKILL) }
    }
}

/// Prints and flushes: a run takes many minutes and its output often goes to a file.
private func report(_ line: String) {
    print(line)
    fflush(nil)
}

// MARK: Files and records

private func monotonicSleep(until deadline: UInt64) {
    var target = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &target, nil) == EINTR {}
}

private let fileContents = Array("watchkeeper bench\n".utf8)

/// Creates the file, writes a line, closes it; returns CLOCK_MONOTONIC right after close(2).
@discardableResult
private func writeFile(_ path: String) throws -> UInt64 {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw BenchFailure(description: "unable to create \(path): \(String(cString: strerror(errno)))") }
    _ = fileContents.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
    return now()
}

private func makeDirectory(_ path: String) throws {
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
}

/// Reads the lines the jobs appended to a records file since the last call.
private final class RecordTail {
    let path: String
    private var fd: Int32 = -1
    private var partial: [UInt8] = []

    init(path: String) { self.path = path }
    deinit { if fd >= 0 { close(fd) } }

    func readNew() -> [(started: UInt64, path: String)] {
        if fd < 0 { fd = open(path, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { return [] }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var records: [(started: UInt64, path: String)] = []
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            partial += buffer[0..<count]
            guard let lastNewline = partial.lastIndex(of: UInt8(ascii: "\n")) else { continue }
            for line in partial[..<lastNewline].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
                guard let space = line.firstIndex(of: UInt8(ascii: " ")),
                      let started = UInt64(String(decoding: line[..<space], as: UTF8.self)) else { continue }
                records.append((started, String(decoding: line[(space + 1)...], as: UTF8.self)))
            }
            partial.removeSubrange(...lastNewline)
        }
        return records
    }
}

// MARK: Peers

/// One peer watching one directory and running the recording job for each file.
private final class RunningPeer {
    let kind: WatchPeer
    let directory: String
    let scratch: String
    let records: String
    let tail: RecordTail
    var child: BenchChild?
    /// The process whose CPU and memory are reported: the daemon, the C loop, inotifywait, incrond.
    var watcherPid: pid_t = 0
    var undo: [() -> Void] = []
    var startedAt: UInt64 = 0
    var handlingAfter: UInt64 = 0

    init(kind: WatchPeer, scratch: String) {
        self.kind = kind
        self.scratch = scratch
        directory = scratch + "/in"
        records = scratch + "/records"
        tail = RecordTail(path: records)
    }

    func stop() {
        child?.stop(first: watcherPid)
        while let step = undo.popLast() { step() }
    }

    /// The peer's long-lived processes (not its jobs), fixed once it handles files.
    var resident: [pid_t] = []

    func rememberResidentProcesses() {
        guard let child else { return }
        resident = ([child.pid] + descendants(of: child.pid)).filter { processName($0) != "inotify-spawn-b" }
    }

    /// User + system CPU of the resident processes, in clock ticks.
    var cpuTicks: UInt64 { resident.reduce(0) { $0 + (readProcessStat($1)?.cpuTicks ?? 0) } }

    /// The daemon's state dump, after asking for a fresh one with SIGUSR1.
    func stateDump() -> [String: Any]? {
        guard kind == .watchkeeper, watcherPid > 0 else { return nil }
        let path = scratch + "/run/state.json"
        func read() -> [String: Any]? {
            guard let data = FileManager.default.contents(atPath: path) else { return nil }
            return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        }
        let before = (read()?["sequence"] as? Int) ?? 0
        kill(watcherPid, SIGUSR1)
        let deadline = now() + 10_000_000_000
        while now() < deadline {
            if let dump = read(), (dump["sequence"] as? Int ?? 0) > before { return dump }
            usleep(20_000)
        }
        return nil
    }
}

private final class PeerLauncher {
    let settings: WatchBenchSettings
    let teardown: WatchTeardown

    init(settings: WatchBenchSettings, teardown: WatchTeardown) {
        self.settings = settings
        self.teardown = teardown
    }

    /// Starts the peer on `scratch/in` (which must exist) and returns once a probe file
    /// written there has been handled, so that its watches are in place.
    func start(_ kind: WatchPeer, scratch: String, recursive: Bool = false, readyTimeout: Duration = .seconds(60)) throws -> RunningPeer {
        let peer = RunningPeer(kind: kind, scratch: scratch)
        teardown.add { peer.stop() }
        peer.startedAt = now()
        switch kind {
        case .watchkeeper: try startWatchkeeper(peer, recursive: recursive, readyTimeout: readyTimeout)
        case .cLoop: try startCLoop(peer, recursive: recursive)
        case .inotifywait: try startInotifywait(peer, recursive: recursive)
        case .incron: try startIncron(peer, recursive: recursive)
        }
        try waitUntilHandling(peer, timeout: readyTimeout)
        return peer
    }

    private func startWatchkeeper(_ peer: RunningPeer, recursive: Bool, readyTimeout: Duration) throws {
        let config = peer.scratch + "/watchkeeper.toml"
        try """
        [daemon]
        max_jobs = 8

        [[watch]]
        name = "bench"
        path = "\(peer.directory)"
        recursive = \(recursive)
        command = ["\(settings.baseline)", "--record", "\(peer.records)", "{path}"]

        """.write(toFile: config, atomically: true, encoding: .utf8)
        // Closed once READY=1 has arrived: later notifications then fail at once instead of
        // filling a socket nobody reads.
        let notify = try NotifyEndpoint(directory: peer.scratch)
        let child = try BenchChild(
            name: "watchkeeper", arguments: [settings.daemonBinary, "run", "--config", config],
            environment: ["PATH=/usr/bin:/bin", "NOTIFY_SOCKET=\(notify.path)", "RUNTIME_DIRECTORY=\(peer.scratch)/run",
                          "STATE_DIRECTORY=\(peer.scratch)/state"],
            stderrPath: peer.scratch + "/stderr.log")
        peer.child = child
        peer.watcherPid = child.pid
        do {
            _ = try notify.wait(for: "READY=1", timeoutMilliseconds: Int32(readyTimeout.components.seconds * 1000))
        } catch {
            throw BenchFailure(description: "watchkeeper did not become ready: \(error); stderr: \(child.stderrTail())")
        }
    }

    private func startCLoop(_ peer: RunningPeer, recursive: Bool) throws {
        let child = try BenchChild(
            name: "c-loop",
            arguments: [settings.baseline, "--watch", peer.directory] + (recursive ? ["--recursive"] : [])
                + ["--run", settings.baseline, "--record", peer.records, "{path}"],
            environment: ["PATH=/usr/bin:/bin"], stderrPath: peer.scratch + "/stderr.log")
        peer.child = child
        peer.watcherPid = child.pid
    }

    private func startInotifywait(_ peer: RunningPeer, recursive: Bool) throws {
        guard let program = (["/usr/bin/inotifywait", "/bin/inotifywait"] as [String]).first(where: { access($0, X_OK) == 0 }) else {
            throw BenchFailure(description: "unable to find inotifywait: apt-get install -y inotify-tools")
        }
        let script = "\(program) -q -m \(recursive ? "-r " : "")-e close_write --format '%w%f' \"$1\" | "
            + "while IFS= read -r f; do \"$2\" --record \"$3\" \"$f\"; done"
        let child = try BenchChild(
            name: "inotifywait", arguments: ["/bin/sh", "-c", script, "sh", peer.directory, settings.baseline, peer.records],
            environment: ["PATH=/usr/bin:/bin"], stderrPath: peer.scratch + "/stderr.log")
        peer.child = child
        let deadline = now() + 5_000_000_000
        while peer.watcherPid == 0 && now() < deadline {
            peer.watcherPid = descendants(of: child.pid).first { processName($0) == "inotifywait" } ?? 0
            if peer.watcherPid == 0 { usleep(5_000) }
        }
        guard peer.watcherPid > 0 else { throw BenchFailure(description: "inotifywait did not start: \(child.stderrTail())") }
    }

    static let incronTable = "/etc/incron.d/watchkeeper-bench"

    private func startIncron(_ peer: RunningPeer, recursive: Bool) throws {
        guard !recursive else { throw BenchFailure(description: "incron has no recursive watches") }
        guard let program = (["/usr/sbin/incrond", "/usr/bin/incrond"] as [String]).first(where: { access($0, X_OK) == 0 }) else {
            throw BenchFailure(description: "unable to find incrond: apt-get install -y incron")
        }
        let running = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [])
            .compactMap { pid_t($0) }.filter { processName($0) == "incrond" && processAlive($0) }
        guard running.isEmpty else {
            throw BenchFailure(description: "unable to run incrond for the bench: incrond is already running (pid \(running.map(String.init).joined(separator: ", ")))")
        }
        // incrond's system tables are /etc/incron.d/*, run as root whatever incron.allow says.
        try "\(peer.directory) IN_CLOSE_WRITE \(settings.baseline) --record \(peer.records) $@/$#\n"
            .write(toFile: Self.incronTable, atomically: false, encoding: .utf8)
        peer.undo.append { unlink(Self.incronTable) }
        let child = try BenchChild(name: "incrond", arguments: [program, "-n"], environment: ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
                                   stderrPath: peer.scratch + "/stderr.log")
        peer.child = child
        peer.watcherPid = child.pid
    }

    /// Probe files until one is recorded: the only readiness signal all four peers share.
    private func waitUntilHandling(_ peer: RunningPeer, timeout: Duration) throws {
        let deadline = now() + UInt64(timeout.components.seconds) * 1_000_000_000
        var attempt = 0
        while now() < deadline {
            if let child = peer.child, child.hasExited {
                throw BenchFailure(description: "\(peer.kind.rawValue) exited before handling a file; stderr: \(child.stderrTail())")
            }
            try writeFile(peer.directory + "/.probe-\(attempt)")
            attempt += 1
            let retry = min(deadline, now() + 200_000_000)
            while now() < retry {
                if peer.tail.readNew().contains(where: { $0.path.contains("/.probe-") }) {
                    peer.handlingAfter = now() - peer.startedAt
                    peer.rememberResidentProcesses()
                    return
                }
                usleep(5_000)
            }
        }
        throw BenchFailure(description: "\(peer.kind.rawValue) handled no probe file within \(timeout); stderr: \(peer.child?.stderrTail() ?? "")")
    }
}

// MARK: Results

private struct LatencyResult {
    var samples: [Int64] = []
    var missing = 0
    var failure: String?

    func percentile(_ p: Double) -> Double? {
        guard !samples.isEmpty else { return nil }
        let sorted = samples.sorted()
        return Double(sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]) / 1e6
    }
}

private struct BurstResult {
    var handled = 0
    var duplicates = 0
    var writeSeconds = 0.0
    var firstWriteToLastRecord = 0.0
    var overflows: String = "n/a"
    /// Why waiting for records ended: every file handled, none for 15 s, or the time limit.
    var ending = "all handled"
    /// CPU of the peer's resident processes (not the jobs) from the first write to the end.
    var cpuSeconds = 0.0
    var detail: String = ""
    var failure: String?
}

private struct IdleResult {
    var cpuMilliseconds: Double = 0
    var memory: ProcessMemory?
    var watchingAfter: Double = 0
    var failure: String?
}

// MARK: The three measurements

private func makeScratch(_ root: String, _ name: String) throws -> String {
    let scratch = root + "/" + name
    try makeDirectory(scratch + "/in")
    return scratch
}

/// One file per peer in turn, `spacing` apart, so that machine noise hits every peer alike
/// and no job is still running when the next file arrives.
private func measureLatency(_ settings: WatchBenchSettings, launcher: PeerLauncher, root: String) -> [WatchPeer: LatencyResult] {
    var results: [WatchPeer: LatencyResult] = [:]
    var peers: [RunningPeer] = []
    for kind in settings.peers {
        do {
            peers.append(try launcher.start(kind, scratch: try makeScratch(root, "latency-\(kind.rawValue)")))
        } catch {
            results[kind] = LatencyResult(failure: "\(error)")
            report("  \(kind.label): not measured: \(error)")
        }
    }
    var closedAt: [String: UInt64] = [:]
    var recorded: [WatchPeer: [String: UInt64]] = [:]
    var next = now()
    do {
        for index in 0..<settings.latencyFiles {
            for peer in peers {
                let path = peer.directory + "/f-\(index)"
                closedAt[path] = try writeFile(path)
                next += settings.latencySpacingNanoseconds
                monotonicSleep(until: next)
            }
        }
    } catch {
        report("  latency: writer failed: \(error)")
    }
    let deadline = now() + 30_000_000_000
    while now() < deadline {
        for peer in peers {
            for record in peer.tail.readNew() where closedAt[record.path] != nil && recorded[peer.kind]?[record.path] == nil {
                recorded[peer.kind, default: [:]][record.path] = record.started
            }
        }
        if peers.allSatisfy({ (recorded[$0.kind]?.count ?? 0) >= settings.latencyFiles }) { break }
        usleep(20_000)
    }
    for peer in peers {
        let starts = recorded[peer.kind] ?? [:]
        var result = LatencyResult()
        for (path, started) in starts { result.samples.append(Int64(bitPattern: started) - Int64(bitPattern: closedAt[path] ?? 0)) }
        result.missing = settings.latencyFiles - starts.count
        results[peer.kind] = result
        peer.stop()
        printLatency(peer.kind.label, result)
    }
    return results
}

private func printLatency(_ label: String, _ result: LatencyResult) {
    let cells = [0.5, 0.9, 0.99, 1.0].map { result.percentile($0).map { String(format: "%7.2f", $0) } ?? "      -" }
    let least = result.samples.min().map { String(format: "%6.2f", Double($0) / 1e6) } ?? "     -"
    report("  \(label.padding(toLength: 24, withPad: " ", startingAt: 0)) p50 \(cells[0])  p90 \(cells[1])  p99 \(cells[2])  max \(cells[3])  min \(least) ms  (n=\(result.samples.count), missing \(result.missing))")
}

/// The job alone, posix_spawn'ed by the bench as often and as far apart as the peers' files:
/// the exec and start-up of the job that every peer's latency includes.
private func measureJobAlone(_ settings: WatchBenchSettings, root: String) -> LatencyResult {
    let records = root + "/job-alone.records"
    let tail = RecordTail(path: records)
    var result = LatencyResult()
    var spawnedAt: [String: UInt64] = [:]
    for index in 0..<settings.latencyFiles {
        let tag = "job-\(index)"
        let argv = [settings.baseline, "--record", records, tag].map(cString) + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let started = now()
        let spawned = posix_spawn(&pid, settings.baseline, nil, nil, argv, environ)
        guard spawned == 0, pid > 0 else {
            result.failure = "unable to run \(settings.baseline): \(String(cString: strerror(spawned)))"
            break
        }
        spawnedAt[tag] = started
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        monotonicSleep(until: started + settings.latencySpacingNanoseconds)
    }
    for record in tail.readNew() {
        if let started = spawnedAt.removeValue(forKey: record.path) {
            result.samples.append(Int64(bitPattern: record.started) - Int64(bitPattern: started))
        }
    }
    result.missing = settings.latencyFiles - result.samples.count
    printLatency("job alone (posix_spawn)", result)
    return result
}

private func measureBurst(_ kind: WatchPeer, _ settings: WatchBenchSettings, launcher: PeerLauncher, root: String) -> BurstResult {
    var result = BurstResult()
    let scratch = root + "/burst-\(kind.rawValue)"
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    do {
        let peer = try launcher.start(kind, scratch: try makeScratch(root, "burst-\(kind.rawValue)"))
        defer { peer.stop() }
        let prefix = peer.directory + "/b-"
        let ticksBefore = peer.cpuTicks
        let first = now()
        for index in 0..<settings.burstFiles { try writeFile(prefix + String(index)) }
        let written = now()
        result.writeSeconds = Double(written - first) / 1e9
        var seen = Set<String>()
        var lastStart: UInt64 = first
        var lastProgress = now()
        var records = 0
        let giveUp = first + settings.burstTimeoutNanoseconds
        while seen.count < settings.burstFiles {
            let fresh = peer.tail.readNew().filter { $0.path.hasPrefix(prefix) }
            if !fresh.isEmpty {
                lastProgress = now()
                records += fresh.count
                for record in fresh {
                    seen.insert(record.path)
                    lastStart = max(lastStart, record.started)
                }
            }
            if now() - lastProgress > settings.burstQuietNanoseconds {
                result.ending = "no record for \(settings.burstQuietNanoseconds / 1_000_000_000) s"
                break
            }
            if now() > giveUp {
                result.ending = "time limit (WATCHKEEPER_BENCH_BURST_TIMEOUT_S=\(settings.burstTimeoutNanoseconds / 1_000_000_000))"
                break
            }
            usleep(100_000)
        }
        result.handled = seen.count
        result.duplicates = records - seen.count
        result.firstWriteToLastRecord = Double(lastStart - first) / 1e9
        result.cpuSeconds = Double(peer.cpuTicks &- ticksBefore) / Double(sysconf(Int32(_SC_CLK_TCK)))
        switch kind {
        case .watchkeeper:
            let memory = ProcessMemory(pid: peer.watcherPid)
            if let dump = peer.stateDump(), let watches = dump["watches"] as? [String: Any],
               let rule = (watches["rules"] as? [[String: Any]])?.first {
                result.overflows = "\(watches["overflows"] ?? "?")"
                result.detail = ["events_seen", "matched", "jobs_started", "jobs_failed", "duplicates_dropped", "rescans", "jobs_running",
                                 "jobs_waiting", "pending_settle"]
                    .map { "\($0) \(rule[$0] ?? "?")" }.joined(separator: ", ")
            } else {
                result.overflows = "no dump"
            }
            result.detail += String(format: "; peak RSS %.1f MiB (VmHWM)", Double(memory.peak) / 1024)
        case .cLoop:
            peer.stop()
            if let line = peer.child?.stderrText.split(separator: "\n").last(where: { $0.hasPrefix("events ") }) {
                let words = line.split(separator: " ")
                result.overflows = words.count >= 6 ? String(words[5]) : "?"
                result.detail = String(line)
            }
        case .inotifywait:
            // inotifywait drops IN_Q_OVERFLOW without a line or a message: nothing to count.
            result.overflows = "n/r"
            result.detail = "inotifywait does not report overflows"
        case .incron:
            result.overflows = "n/r"
            result.detail = "incrond reports only to syslog"
        }
    } catch {
        result.failure = "\(error)"
    }
    return result
}

/// A tree of `count` directories below the root: sqrt(count) directories of sqrt(count) each.
private func makeTree(_ root: String, directories count: Int) throws {
    let width = max(1, Int(Double(count).squareRoot()))
    var made = 0
    var top = 0
    while made < count {
        let parent = root + "/d\(top)"
        try makeDirectory(parent)
        made += 1
        top += 1
        for child in 0..<(width - 1) where made < count {
            guard mkdir(parent + "/s\(child)", 0o755) == 0 else {
                throw BenchFailure(description: "unable to create \(parent)/s\(child): \(String(cString: strerror(errno)))")
            }
            made += 1
        }
    }
}

private func measureIdle(_ settings: WatchBenchSettings, launcher: PeerLauncher, teardown: WatchTeardown, root: String) -> [WatchPeer: IdleResult] {
    var results: [WatchPeer: IdleResult] = [:]
    let kinds = settings.peers.filter { $0 != .incron }
    if settings.peers.contains(.incron) { results[.incron] = IdleResult(failure: "n/a: incron has no recursive watches") }
    // Every peer watches its own copy of the tree at the same time: they are idle, so they
    // do not disturb each other, and the limit must cover all of them.
    let limitPath = "/proc/sys/fs/inotify/max_user_watches"
    let needed = kinds.count * (settings.idleDirectories + 1) + 8_192
    if let text = try? String(contentsOfFile: limitPath, encoding: .utf8), let limit = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)),
       limit < needed {
        do {
            try "\(needed)\n".write(toFile: limitPath, atomically: false, encoding: .utf8)
            teardown.add { try? "\(limit)\n".write(toFile: limitPath, atomically: false, encoding: .utf8) }
            report("  raised fs.inotify.max_user_watches from \(limit) to \(needed) for the run")
        } catch {
            report("  warning: fs.inotify.max_user_watches is \(limit), below the \(needed) needed, and unable to raise it: \(error)")
        }
    }
    var peers: [RunningPeer] = []
    for kind in kinds {
        do {
            let scratch = try makeScratch(root, "idle-\(kind.rawValue)")
            try makeTree(scratch + "/in", directories: settings.idleDirectories)
            let peer = try launcher.start(kind, scratch: scratch, recursive: true, readyTimeout: .seconds(180))
            peers.append(peer)
            results[kind] = IdleResult(watchingAfter: Double(peer.handlingAfter) / 1e9)
        } catch {
            results[kind] = IdleResult(failure: "\(error)")
            report("  \(kind.label): not measured: \(error)")
        }
    }
    // Let the probes' jobs finish and the start-up work settle before the idle minute.
    sleep(3)
    let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
    let before = peers.map { readProcessStat($0.watcherPid)?.cpuTicks ?? 0 }
    sleep(UInt32(settings.idleSeconds))
    for (index, peer) in peers.enumerated() {
        let after = readProcessStat(peer.watcherPid)?.cpuTicks ?? 0
        results[peer.kind]?.cpuMilliseconds = Double(after &- before[index]) / ticks * 1000
        results[peer.kind]?.memory = ProcessMemory(pid: peer.watcherPid)
        let memory = results[peer.kind]!.memory!
        report("  " + peer.kind.label.padding(toLength: 24, withPad: " ", startingAt: 0)
            + String(format: " watching %d dirs after %.2f s; CPU in %d s idle: %.0f ms; VmRSS %.1f MiB, RssAnon %.1f MiB",
                     settings.idleDirectories + 1, results[peer.kind]!.watchingAfter, settings.idleSeconds,
                     results[peer.kind]!.cpuMilliseconds, Double(memory.resident) / 1024, Double(memory.anonymous) / 1024))
        if peer.kind == .watchkeeper, let dump = peer.stateDump(), let watches = dump["watches"] as? [String: Any] {
            report("  watchkeeper dump: watches_in_use \(watches["watches_in_use"] ?? "?"), overflows \(watches["overflows"] ?? "?")")
        }
        peer.stop()
    }
    return results
}

// MARK: Entry point

func runWatchBenchmarks() {
    let settings = WatchBenchSettings()
    let teardown = WatchTeardown()
    var template = Array("/tmp/wk-watch-bench-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else {
        report("watch: failed: unable to create a scratch directory: \(String(cString: strerror(errno)))")
        return
    }
    let root = String(cString: made)
    teardown.add { try? FileManager.default.removeItem(atPath: root) }
    // Interrupted (Ctrl-C in `make bench`): the peers get the terminal's SIGINT too; what
    // would outlive us is incrond's system table, so it goes. The scratch directory stays.
    for signo in [SIGINT, SIGTERM] {
        signal(signo) { received in
            unlink("/etc/incron.d/watchkeeper-bench")
            _exit(128 + received)
        }
    }
    teardown.add {
        signal(SIGINT, SIG_DFL)
        signal(SIGTERM, SIG_DFL)
    }
    defer { teardown.run() }
    for program in [settings.daemonBinary, settings.baseline] where access(program, X_OK) != 0 {
        report("watch: failed: unable to run \(program): build it with swift build -c release --static-swift-stdlib")
        return
    }
    let launcher = PeerLauncher(settings: settings, teardown: teardown)
    func loadAverage() -> String {
        ((try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? "?").split(separator: " ").prefix(3).joined(separator: " ")
    }
    report("watch rules: \(settings.daemonBinary); every job is \(settings.baseline) --record")
    report("load average at start: \(loadAverage())")
    defer { report("load average at end: \(loadAverage())") }

    var latency: [WatchPeer: LatencyResult] = [:]
    var jobAlone: LatencyResult?
    if settings.parts.contains("latency") {
        report("latency: close(2) to the job running, \(settings.latencyFiles) files per peer, one every \(settings.latencySpacingNanoseconds / 1_000_000) ms, peers in turn")
        latency = measureLatency(settings, launcher: launcher, root: root)
        jobAlone = measureJobAlone(settings, root: root)
    }

    var burst: [WatchPeer: BurstResult] = [:]
    if settings.parts.contains("burst") {
        report("burst: \(settings.burstFiles) files written as fast as one thread can (WATCHKEEPER_BENCH_BURST); watchkeeper max_jobs = 8")
        for kind in settings.burstPeers {
            let result = measureBurst(kind, settings, launcher: launcher, root: root)
            burst[kind] = result
            if let failure = result.failure {
                report("  \(kind.label): failed: \(failure)")
            } else {
                report("  " + kind.label.padding(toLength: 24, withPad: " ", startingAt: 0)
                    + String(format: " handled %d of %d (%d duplicates) in %.1f s from the first write (writes took %.2f s); its CPU %.1f s",
                             result.handled, settings.burstFiles, result.duplicates, result.firstWriteToLastRecord, result.writeSeconds,
                             result.cpuSeconds)
                    + "; ended: \(result.ending)"
                    + "; overflows \(result.overflows)" + (result.detail.isEmpty ? "" : "; " + result.detail))
            }
        }
    }

    var idle: [WatchPeer: IdleResult] = [:]
    if settings.parts.contains("idle") {
        report("idle: a tree of \(settings.idleDirectories) directories below the root, watched recursively, \(settings.idleSeconds) s without events (WATCHKEEPER_BENCH_IDLE_S)")
        idle = measureIdle(settings, launcher: launcher, teardown: teardown, root: root)
    }

    func cell(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
    }
    report("")
    report("peer                     | latency p50 |  p99 ms | burst handled | missed | time s | CPU s | overflows | idle CPU ms | RSS MiB (anon)")
    for kind in settings.peers {
        var row = kind.label.padding(toLength: 24, withPad: " ", startingAt: 0)
        if let result = latency[kind], result.failure == nil {
            row += " | " + cell(String(format: "%.2f", result.percentile(0.5) ?? .nan), 11) + " | " + cell(String(format: "%.2f", result.percentile(0.99) ?? .nan), 7)
        } else {
            row += " | " + cell("-", 11) + " | " + cell("-", 7)
        }
        if let result = burst[kind], result.failure == nil {
            let time = String(format: "%.1f", result.firstWriteToLastRecord)
            row += " | " + cell("\(result.handled)", 13) + " | " + cell("\(settings.burstFiles - result.handled)", 6)
                + " | " + cell(result.ending.hasPrefix("time limit") ? ">" + time : time, 6)
                + " | " + cell(String(format: "%.1f", result.cpuSeconds), 5) + " | " + cell(result.overflows, 9)
        } else {
            row += " | " + cell("-", 13) + " | " + cell("-", 6) + " | " + cell("-", 6) + " | " + cell("-", 5) + " | " + cell("-", 9)
        }
        if let result = idle[kind], result.failure == nil, let memory = result.memory {
            row += " | " + cell(String(format: "%.0f", result.cpuMilliseconds), 11)
                + " | " + String(format: "%.1f (%.1f)", Double(memory.resident) / 1024, Double(memory.anonymous) / 1024)
        } else {
            row += " | " + cell("-", 11) + " | -"
        }
        report(row)
    }
    if let jobAlone, jobAlone.failure == nil {
        report("job alone (posix_spawn)".padding(toLength: 24, withPad: " ", startingAt: 0)
            + " | " + cell(String(format: "%.2f", jobAlone.percentile(0.5) ?? .nan), 11) + " | " + cell(String(format: "%.2f", jobAlone.percentile(0.99) ?? .nan), 7))
    }
    if let ours = latency[.watchkeeper]?.percentile(0.5), let floor = latency[.cLoop]?.percentile(0.5), floor > 0 {
        var line = String(format: "watchkeeper p50 / C loop p50 = %.2fx (target: within 1.5x)", ours / floor)
        if let job = jobAlone?.percentile(0.5) {
            line += String(format: "; above the job alone: watchkeeper +%.2f ms, C loop +%.2f ms", ours - job, floor - job)
        }
        report(line)
    }
    if !burst.isEmpty {
        report("missed: burst files without a record when waiting ended; watchkeeper still had them (waiting for a slot, or found")
        report("  by a later catch-up since they are not in its ledger), the other peers lost them to queue overflows.")
        report("CPU s: the peer's resident processes from the first write to the end, not its jobs.")
    }
}
