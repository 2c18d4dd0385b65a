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

enum WatchPeer: String, CaseIterable {
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

struct WatchBenchSettings {
    let daemonBinary, baseline: String
    let latencyFiles, burstFiles, idleSeconds, idleDirectories: Int
    /// How long the burst's daemon is left alone after its last job before its RSS is read.
    let burstSettleSeconds: Int
    let latencySpacingNanoseconds, burstQuietNanoseconds, burstTimeoutNanoseconds: UInt64
    let peers, burstPeers: [WatchPeer]
    let parts: Set<String>
    /// The watchkeeper rule's `output` key (WATCHKEEPER_BENCH_WATCH_OUTPUT), absent if nil.
    let output: String?

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
        burstSettleSeconds = Int(environment["WATCHKEEPER_BENCH_BURST_SETTLE_S"] ?? "") ?? 60
        idleDirectories = Int(environment["WATCHKEEPER_BENCH_IDLE_DIRS"] ?? "") ?? 10_000
        func peerList(_ variable: String, default fallback: [WatchPeer]) -> [WatchPeer] {
            guard let text = environment[variable] else { return fallback }
            return text.split(separator: ",").compactMap { WatchPeer(rawValue: String($0)) }
        }
        peers = peerList("WATCHKEEPER_BENCH_WATCH_PEERS", default: WatchPeer.allCases)
        burstPeers = peerList("WATCHKEEPER_BENCH_BURST_PEERS", default: WatchPeer.allCases).filter(peers.contains)
        parts = Set((environment["WATCHKEEPER_BENCH_WATCH_PARTS"] ?? "latency,burst,idle,batch").split(separator: ",").map(String.init))
        output = environment["WATCHKEEPER_BENCH_WATCH_OUTPUT"]
    }
}

// MARK: Clean-up

/// Everything the benchmark starts, creates or changes outside its scratch directory is
/// undone here, in reverse order, whether the benchmark finished or threw.
final class WatchTeardown {
    private var steps: [() -> Void] = []

    func add(_ step: @escaping () -> Void) { steps.append(step) }

    func run() {
        while let step = steps.popLast() { step() }
    }
}

// MARK: Files and records

func monotonicSleep(until deadline: UInt64) {
    var target = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &target, nil) == EINTR {}
}

let fileContents = Array("watchkeeper bench\n".utf8)

/// Creates the file, writes a line, closes it; returns CLOCK_MONOTONIC right after close(2).
@discardableResult
func writeFile(_ path: String) throws -> UInt64 {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw BenchFailure(description: "unable to create \(path): \(String(cString: strerror(errno)))") }
    _ = fileContents.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    // Read just before close(2), as ../shared/bench-peers' writer does: the event is made
    // inside close, and a clock read after it also counted against the peer the time this
    // process waited for a CPU once close returned (it gave negative latencies on a loaded
    // machine, docs/measurements/latency-path.md).
    let closing = now()
    close(fd)
    return closing
}

func makeDirectory(_ path: String) throws {
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
}

/// Reads the lines the jobs appended to a records file since the last call.
final class RecordTail {
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

/// What a peer prints on a pipe, one event a line, read on a thread of its own until the
/// peer closes it: when each key (what `key` makes of a line, a path or a name) was first
/// printed, by `clock`. The descriptor is this reader's and is closed at the end.
final class FirstSeenLines: @unchecked Sendable {  // `firstSeen` is only touched under `lock`.
    private let lock = NSLock()
    private var firstSeen: [String: Double] = [:]

    init(reading fd: Int32, key: @escaping @Sendable (Substring) -> String, clock: @escaping @Sendable () -> Double) {
        Thread { [self] in
            var pending = [UInt8]()
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                pending += buffer[..<count]
                let at = clock()
                guard let lastNewline = pending.lastIndex(of: 10) else { continue }
                let lines = String(decoding: pending[..<lastNewline], as: UTF8.self).split(separator: "\n")
                pending.removeSubrange(...lastNewline)
                lock.lock()
                for line in lines where firstSeen[key(line)] == nil { firstSeen[key(line)] = at }
                lock.unlock()
            }
            close(fd)
        }.start()
    }

    func firstSeen(_ key: String) -> Double? {
        lock.lock()
        defer { lock.unlock() }
        return firstSeen[key]
    }
}

// MARK: Peers

/// One peer watching one directory and running the recording job for each file.
final class RunningPeer {
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

    /// `directory`: the watched directory, by default `scratch/in`.
    init(kind: WatchPeer, scratch: String, directory: String? = nil) {
        self.kind = kind
        self.scratch = scratch
        self.directory = directory ?? scratch + "/in"
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
        // The C loop is itself inotify-spawn-baseline, like every peer's job: only its
        // descendants are jobs (the name filter once hid the loop's own CPU, reported as 0).
        resident = [child.pid] + descendants(of: child.pid).filter { processName($0) != "inotify-spawn-b" }
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

final class PeerLauncher {
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

    /// `job`: the rule's keys that say what runs (the batch part's); by default one
    /// recording job per file. `ruleKeys`: more of the rule's `key = value` lines.
    func startWatchkeeper(_ peer: RunningPeer, recursive: Bool, readyTimeout: Duration, job: String? = nil, ruleKeys: [String] = []) throws {
        let config = peer.scratch + "/watchkeeper.toml"
        // Left out unless asked for: `direct` takes the jobs' output off the daemon's CPU.
        var output = ""
        if let value = settings.output {
            guard value == "daemon" || value == "direct" else {
                throw BenchFailure(description: "WATCHKEEPER_BENCH_WATCH_OUTPUT=\(value): expected daemon or direct")
            }
            output = "output = \"\(value)\"\n"
        }
        let command = job ?? "command = [\"\(settings.baseline)\", \"--record\", \"\(peer.records)\", \"{path}\"]"
        try """
        [daemon]
        max_jobs = 8

        [[watch]]
        name = "bench"
        path = "\(peer.directory)"
        recursive = \(recursive)
        \(ruleKeys.joined(separator: "\n"))
        \(command)
        \(output)
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
        // In slices, so that a daemon that exits (a configuration it refuses) ends the wait.
        let deadline = now() + UInt64(readyTimeout.components.seconds) * 1_000_000_000
        while true {
            do {
                _ = try notify.wait(for: "READY=1", timeoutMilliseconds: 500)
                break
            } catch where !child.hasExited && now() < deadline {
                continue
            } catch {
                let why = child.hasExited ? "it exited" : "no READY=1 within \(readyTimeout)"
                throw BenchFailure(description: "watchkeeper did not become ready: \(why); stderr: \(child.stderrTail())")
            }
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
