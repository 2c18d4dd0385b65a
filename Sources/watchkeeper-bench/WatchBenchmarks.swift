// The three watch measurements (latency, burst, idle) and their report; the peers and
// the processes they run are in WatchBenchPeers.swift.

import Foundation
#if canImport(Glibc)
import Glibc
#endif

// MARK: Results

struct LatencyResult {
    var samples: [Int64] = []
    var missing = 0
    var failure: String?

    func percentile(_ p: Double) -> Double? {
        guard !samples.isEmpty else { return nil }
        let sorted = samples.sorted()
        return Double(sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]) / 1e6
    }
}

struct BurstResult {
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

struct IdleResult {
    var cpuMilliseconds: Double = 0
    var memory: ProcessMemory?
    var watchingAfter: Double = 0
    var failure: String?
}

// MARK: The three measurements

func makeScratch(_ root: String, _ name: String) throws -> String {
    let scratch = root + "/" + name
    try makeDirectory(scratch + "/in")
    return scratch
}

/// One file per peer in turn, `spacing` apart, so that machine noise hits every peer alike
/// and no job is still running when the next file arrives.
func measureLatency(_ settings: WatchBenchSettings, launcher: PeerLauncher, root: String) -> [WatchPeer: LatencyResult] {
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

func printLatency(_ label: String, _ result: LatencyResult) {
    let cells = [0.5, 0.9, 0.99, 1.0].map { result.percentile($0).map { String(format: "%7.2f", $0) } ?? "      -" }
    let least = result.samples.min().map { String(format: "%6.2f", Double($0) / 1e6) } ?? "     -"
    report("  \(label.padding(toLength: 24, withPad: " ", startingAt: 0)) p50 \(cells[0])  p90 \(cells[1])  p99 \(cells[2])  max \(cells[3])  min \(least) ms  (n=\(result.samples.count), missing \(result.missing))")
}

/// The job alone, posix_spawn'ed by the bench as often and as far apart as the peers' files:
/// the exec and start-up of the job that every peer's latency includes.
func measureJobAlone(_ settings: WatchBenchSettings, root: String) -> LatencyResult {
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

func measureBurst(_ kind: WatchPeer, _ settings: WatchBenchSettings, launcher: PeerLauncher, root: String) -> BurstResult {
    var result = BurstResult()
    let scratch = root + "/burst-\(kind.rawValue)"
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    do {
        let peer = try launcher.start(kind, scratch: try makeScratch(root, "burst-\(kind.rawValue)"))
        defer { peer.stop() }
        let prefix = peer.directory + "/b-"
        let ticksBefore = peer.cpuTicks
        // The same daemon before the burst: what "idle + 2 MiB" after it is measured against.
        let before = kind == .watchkeeper ? ProcessMemory(pid: peer.watcherPid) : nil
        let first = now()
        for index in 0..<settings.burstFiles { try writeFile(prefix + String(index)) }
        let written = now()
        result.writeSeconds = Double(written - first) / 1e9
        let (seen, records, lastStart) = collectBurstRecords(peer, prefix: prefix, settings, since: first, into: &result)
        result.handled = seen.count
        result.duplicates = records - seen.count
        result.firstWriteToLastRecord = Double(lastStart - first) / 1e9
        result.cpuSeconds = Double(peer.cpuTicks &- ticksBefore) / Double(sysconf(Int32(_SC_CLK_TCK)))
        switch kind {
        case .watchkeeper:
            daemonBurstFigures(peer, settings, before: before, into: &result)
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

/// The peer's records of the burst's files, until every file has one, none comes for
/// `burstQuietNanoseconds`, or the time limit: the files seen, the records (a file may have
/// more than one) and the last job's start.
private func collectBurstRecords(_ peer: RunningPeer, prefix: String, _ settings: WatchBenchSettings, since first: UInt64,
                                 into result: inout BurstResult) -> (seen: Set<String>, records: Int, lastStart: UInt64) {
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
    return (seen, records, lastStart)
}

/// The daemon's own figures after the burst (its state dump) and its memory: peak, and
/// settled against before the burst.
private func daemonBurstFigures(_ peer: RunningPeer, _ settings: WatchBenchSettings, before: ProcessMemory?, into result: inout BurstResult) {
    let memory = ProcessMemory(pid: peer.watcherPid)
    if let dump = peer.stateDump(), let watches = dump["watches"] as? [String: Any],
       let rule = (watches["rules"] as? [[String: Any]])?.first {
        result.overflows = "\(watches["overflows"] ?? "?")"
        // Since the one job engine (issue 8) the job counts are the engine's;
        // a daemon from before keeps them in the rule.
        var figures = rule
        if let jobs = dump["jobs"] as? [String: Any] {
            let group = (jobs["groups"] as? [[String: Any]])?.first { $0["watch"] as? String != nil }
            figures["jobs_started"] = jobs["started_since_start"]
            figures["jobs_failed"] = (group?["outcomes"] as? [String: Any])?["failed"] ?? 0
            figures["jobs_running"] = jobs["running_total"]
            figures["jobs_waiting"] = jobs["waiting_total"]
        }
        result.detail = ["events_seen", "matched", "jobs_started", "jobs_failed", "duplicates_dropped", "rescans", "jobs_running",
                         "jobs_waiting", "pending_settle", "files_remembered"]
            .map { "\($0) \(figures[$0] ?? "?")" }.joined(separator: ", ")
    } else {
        result.overflows = "no dump"
    }
    result.detail += String(format: "; peak RSS %.1f MiB (VmHWM)", Double(memory.peak) / 1024)
    // Memory given back: what the daemon keeps once the burst is over.
    sleep(UInt32(settings.burstSettleSeconds))
    let settled = ProcessMemory(pid: peer.watcherPid)
    result.detail += String(format: "; %d s later VmRSS %.1f MiB, RssAnon %.1f MiB (WATCHKEEPER_BENCH_BURST_SETTLE_S)",
                            settings.burstSettleSeconds, Double(settled.resident) / 1024, Double(settled.anonymous) / 1024)
    if let before {
        result.detail += String(format: "; before the burst VmRSS %.1f MiB, RssAnon %.1f MiB: %+.1f MiB",
                                Double(before.resident) / 1024, Double(before.anonymous) / 1024,
                                Double(settled.resident - before.resident) / 1024)
    }
}

/// A tree of `count` directories below the root: sqrt(count) directories of sqrt(count) each,
/// `d<i>/s<j>`. Made with mkdirat from each top directory's descriptor (no path walk per
/// directory) on every core at once: a million directories on tmpfs in seconds.
func makeTree(_ root: String, directories count: Int) throws {
    let width = max(1, Int(Double(count).squareRoot()))
    try makeDirectory(root)
    final class FirstFailure: @unchecked Sendable {  // `message` is only touched under `lock`.
        private let lock = NSLock()
        private(set) var message: String?

        func record(_ problem: String) {
            lock.lock()
            if message == nil { message = problem }
            lock.unlock()
        }
    }
    let failure = FirstFailure()
    DispatchQueue.concurrentPerform(iterations: (count + width - 1) / width) { top in
        if let problem = makeTopDirectory(root + "/d\(top)", children: min(width - 1, count - top * width - 1)) { failure.record(problem) }
    }
    if let message = failure.message { throw BenchFailure(description: message) }
}

/// `parent` and its `children` directories `s<j>`; what went wrong, or nil.
private func makeTopDirectory(_ parent: String, children: Int) -> String? {
    guard mkdir(parent, 0o755) == 0 || errno == EEXIST else { return "unable to create \(parent): \(String(cString: strerror(errno)))" }
    let fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard fd >= 0 else { return "unable to open \(parent): \(String(cString: strerror(errno)))" }
    defer { close(fd) }
    for child in 0..<children where mkdirat(fd, "s\(child)", 0o755) != 0 {
        return "unable to create \(parent)/s\(child): \(String(cString: strerror(errno)))"
    }
    return nil
}

/// Raises the kernel limit at `path` (a file under /proc/sys) to `needed` if it is lower, and
/// puts the old value back at teardown; says what it did, or why it could not.
func raiseKernelLimit(_ path: String, to needed: Int, teardown: WatchTeardown) {
    let name = path.dropFirst("/proc/sys/".count).replacingOccurrences(of: "/", with: ".")
    guard let text = try? String(contentsOfFile: path, encoding: .utf8), let limit = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)),
          limit < needed else { return }
    do {
        try "\(needed)\n".write(toFile: path, atomically: false, encoding: .utf8)
        teardown.add { try? "\(limit)\n".write(toFile: path, atomically: false, encoding: .utf8) }
        report("  raised \(name) from \(limit) to \(needed) for the run")
    } catch {
        report("  warning: \(name) is \(limit), below the \(needed) needed, and unable to raise it: \(error)")
    }
}

func measureIdle(_ settings: WatchBenchSettings, launcher: PeerLauncher, teardown: WatchTeardown, root: String) -> [WatchPeer: IdleResult] {
    var results: [WatchPeer: IdleResult] = [:]
    let kinds = settings.peers.filter { $0 != .incron }
    if settings.peers.contains(.incron) { results[.incron] = IdleResult(failure: "n/a: incron has no recursive watches") }
    // Every peer watches its own copy of the tree at the same time: they are idle, so they
    // do not disturb each other, and the limit must cover all of them.
    raiseKernelLimit("/proc/sys/fs/inotify/max_user_watches", to: kinds.count * (settings.idleDirectories + 1) + 8_192, teardown: teardown)
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
    // would outlive us is incrond's system table and a watchman server (when not on the
    // terminal), so they go. The scratch directory stays.
    for signo in [SIGINT, SIGTERM] {
        signal(signo) { received in
            unlink("/etc/incron.d/watchkeeper-bench")
            if batchWatchmanPid > 0 { kill(batchWatchmanPid, SIGTERM) }
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

    let burst = settings.parts.contains("burst") ? runBurstPart(settings, launcher: launcher, root: root) : [:]

    var idle: [WatchPeer: IdleResult] = [:]
    if settings.parts.contains("idle") {
        report("idle: a tree of \(settings.idleDirectories) directories below the root, watched recursively, \(settings.idleSeconds) s without events (WATCHKEEPER_BENCH_IDLE_S)")
        idle = measureIdle(settings, launcher: launcher, teardown: teardown, root: root)
    }

    if settings.parts.contains("batch") {
        runBatchBenchmark(settings, launcher: launcher, teardown: teardown, root: root)
    }
    // The table is the three per-file parts'; the batch part printed its own lines.
    guard !settings.parts.isDisjoint(with: ["latency", "burst", "idle"]) else { return }

    reportWatchTable(settings, latency: latency, jobAlone: jobAlone, burst: burst, idle: idle)
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

/// Each burst peer in turn, a line each as it ends.
private func runBurstPart(_ settings: WatchBenchSettings, launcher: PeerLauncher, root: String) -> [WatchPeer: BurstResult] {
    var burst: [WatchPeer: BurstResult] = [:]
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
    return burst
}

/// The table of the three per-file parts, a row per peer.
private func reportWatchTable(_ settings: WatchBenchSettings, latency: [WatchPeer: LatencyResult], jobAlone: LatencyResult?,
                              burst: [WatchPeer: BurstResult], idle: [WatchPeer: IdleResult]) {
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
}
