// The batch part of the watch bench (issue 10): many files per job. watchkeeper with a
// `batch = "stdin"` rule and a `settle` window against a watchman trigger with
// `"stdin": "NAME_PER_LINE"`, on the burst of WATCHKEEPER_BENCH_BURST files.
//
// Both run the same job, `inotify-spawn-baseline --record-stdin DIR`: it reads its stdin to
// the end, reads CLOCK_MONOTONIC, and leaves the list in DIR under that time. A name is
// delivered when the first list holding it has been read; the burst is delivered when every
// name is. Measured from the last file written (the bench's clock right after its close(2)).
// Results and the reading: docs/measurements/watch.md.

import Foundation

#if canImport(Glibc)
import Glibc
#endif

enum BatchPeer: String, CaseIterable {
    case watchkeeper
    case watchman

    var label: String {
        switch self {
        case .watchkeeper: "watchkeeper batch=stdin"
        case .watchman: "watchman trigger"
        }
    }
}

/// The watchman server while the batch part runs, for the SIGINT/SIGTERM handler: a server
/// in the foreground outlives an interrupted bench otherwise.
nonisolated(unsafe) var batchWatchmanPid: pid_t = 0

struct BatchSettings {
    let peers: [BatchPeer]
    /// Both peers' settle window: watchkeeper's `settle`, watchman's `settle` in .watchmanconfig.
    let settleMilliseconds: Int
    let watchman: String
    /// After every name is in, how long without a new list before the duplicates are counted.
    let graceNanoseconds: UInt64 = 3_000_000_000

    init() {
        let environment = ProcessInfo.processInfo.environment
        peers = (environment["WATCHKEEPER_BENCH_BATCH_PEERS"] ?? "watchkeeper,watchman")
            .split(separator: ",").compactMap { BatchPeer(rawValue: String($0)) }
        // Watchman's default settle: neither peer gets a window the other does not have.
        settleMilliseconds = Int(environment["WATCHKEEPER_BENCH_BATCH_SETTLE_MS"] ?? "") ?? 20
        watchman = environment["WATCHKEEPER_BENCH_WATCHMAN"] ?? "/usr/bin/watchman"
    }
}

struct BatchResult {
    var delivered = 0
    var names = 0
    var lists = 0
    var writeSeconds = 0.0
    /// From the last file written to the end of the read of the list that completed the burst.
    var lastWriteToComplete = 0.0
    var firstWriteToComplete = 0.0
    var ending = "all delivered"
    var cpuSeconds = 0.0
    var peakKiB = 0
    var detail = ""
    var failure: String?

    var complete: Bool { ending == "all delivered" }
}

/// The lists the jobs left in one directory, read as they appear.
final class BatchLists {
    let directory: String
    private var seen: Set<String> = []
    /// The earliest delivery of each name (its last path component: watchkeeper sends absolute
    /// paths, watchman paths relative to the root).
    private(set) var firstDelivery: [String: UInt64] = [:]
    private(set) var names = 0
    private(set) var lists = 0

    init(directory: String) { self.directory = directory }

    /// Forgets what was delivered (the probes), not which lists were read.
    func reset() {
        firstDelivery = [:]
        names = 0
        lists = 0
    }

    /// Reads the lists that appeared since the last call; returns how many there were.
    @discardableResult
    func scan(counting wanted: (Substring) -> Bool) -> Int {
        var fresh = 0
        for file in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where !file.hasPrefix(".") && !seen.contains(file) {
            seen.insert(file)
            guard let dash = file.firstIndex(of: "-"), let delivered = UInt64(file[..<dash]),
                  let data = FileManager.default.contents(atPath: directory + "/" + file) else { continue }
            fresh += 1
            lists += 1
            for entry in data.split(whereSeparator: { $0 == 0 || $0 == UInt8(ascii: "\n") }) {
                let path = String(decoding: entry, as: UTF8.self)
                let name = path.split(separator: "/").last ?? Substring(path)
                guard wanted(name) else { continue }
                names += 1
                let key = String(name)
                if let earlier = firstDelivery[key], earlier <= delivered { continue }
                firstDelivery[key] = delivered
            }
        }
        return fresh
    }
}

/// One peer with its batch job on `scratch/in`.
final class BatchPeerRun {
    let kind: BatchPeer
    let scratch, directory: String
    let lists: BatchLists
    var child: BenchChild?
    var watcherPid: pid_t = 0
    /// The watchkeeper peer, which knows how to stop the daemon and read its dump.
    var daemon: RunningPeer?
    var resident: [pid_t] = []

    init(kind: BatchPeer, scratch: String) {
        self.kind = kind
        self.scratch = scratch
        directory = scratch + "/in"
        lists = BatchLists(directory: scratch + "/lists")
    }

    var cpuTicks: UInt64 { resident.reduce(0) { $0 + (readProcessStat($1)?.cpuTicks ?? 0) } }

    func stop() {
        if let daemon { daemon.stop() } else { child?.stop() }
        if kind == .watchman { batchWatchmanPid = 0 }
    }
}

func startBatchPeer(_ kind: BatchPeer, _ settings: WatchBenchSettings, _ batch: BatchSettings, launcher: PeerLauncher,
                    teardown: WatchTeardown, scratch: String) throws -> BatchPeerRun {
    let run = BatchPeerRun(kind: kind, scratch: scratch)
    teardown.add { run.stop() }
    try makeDirectory(run.lists.directory)
    let job = [settings.baseline, "--record-stdin", run.lists.directory]
    switch kind {
    case .watchkeeper:
        let peer = RunningPeer(kind: .watchkeeper, scratch: scratch)
        run.daemon = peer
        try launcher.startWatchkeeper(peer, recursive: false, readyTimeout: .seconds(60), job: """
            batch = "stdin"
            settle = "\(batch.settleMilliseconds)ms"
            command = [\(job.map { "\"\($0)\"" }.joined(separator: ", "))]
            """)
        run.child = peer.child
        run.watcherPid = peer.watcherPid
    case .watchman:
        try startWatchman(run, batch, job: job)
    }
    // Probe files until one is in a list: the readiness signal both peers share.
    let deadline = now() + 60_000_000_000
    var attempt = 0
    while run.lists.firstDelivery.isEmpty {
        if let child = run.child, child.hasExited {
            throw BenchFailure(description: "\(kind.rawValue) exited before delivering a file; stderr: \(child.stderrTail())")
        }
        guard now() < deadline else {
            throw BenchFailure(description: "\(kind.rawValue) delivered no probe file in \(run.directory) within 60 s; stderr: \(run.child?.stderrTail() ?? "")")
        }
        try writeFile(run.directory + "/.probe-\(attempt)")
        attempt += 1
        // Watchman waits for the whole root to be quiet for its settle: a new probe sooner
        // would put it off for good.
        let retry = now() + 200_000_000 + 2 * UInt64(batch.settleMilliseconds) * 1_000_000
        while now() < retry && run.lists.scan(counting: { $0.hasPrefix(".probe-") }) == 0 { usleep(10_000) }
    }
    if let child = run.child {
        run.resident = ([child.pid] + descendants(of: child.pid)).filter { processName($0) != "inotify-spawn-b" }
    }
    return run
}

/// `watchman --foreground` with its socket, log and config in the scratch directory and no
/// saved state, a watch on the root and a trigger that gets the changed names on stdin.
private func startWatchman(_ run: BatchPeerRun, _ batch: BatchSettings, job: [String]) throws {
    guard access(batch.watchman, X_OK) == 0 else {
        throw BenchFailure(description: "unable to run \(batch.watchman): apt-get install -y watchman, or set WATCHKEEPER_BENCH_WATCHMAN")
    }
    let socket = run.scratch + "/watchman.sock"
    // An empty global config: /etc/watchman.json, if any, does not change what is measured.
    try "{}\n".write(toFile: run.scratch + "/watchman.json", atomically: true, encoding: .utf8)
    try "{\"settle\": \(batch.settleMilliseconds)}\n".write(toFile: run.directory + "/.watchmanconfig", atomically: true, encoding: .utf8)
    let child = try BenchChild(
        name: "watchman",
        arguments: [batch.watchman, "--foreground", "--no-save-state", "--sockname=\(socket)", "--logfile=\(run.scratch)/watchman.log",
                    "--pidfile=\(run.scratch)/watchman.pid", "--statefile=\(run.scratch)/watchman.state"],
        // TMPDIR: where watchman keeps the stdin files of its triggers.
        environment: ["PATH=/usr/bin:/bin", "HOME=\(run.scratch)", "TMPDIR=\(run.scratch)", "WATCHMAN_CONFIG_FILE=\(run.scratch)/watchman.json"],
        stderrPath: run.scratch + "/stderr.log")
    run.child = child
    run.watcherPid = child.pid
    batchWatchmanPid = child.pid
    func command(_ json: [Any]) throws -> [String: Any] {
        let data = try JSONSerialization.data(withJSONObject: json)
        let client = Process()
        client.executableURL = URL(fileURLWithPath: batch.watchman)
        client.arguments = ["--sockname=\(socket)", "--no-spawn", "--no-local", "--no-pretty", "-j"]
        let input = Pipe(), output = Pipe()
        client.standardInput = input
        client.standardOutput = output
        client.standardError = output
        try client.run()
        input.fileHandleForWriting.write(data)
        try input.fileHandleForWriting.close()
        let answer = output.fileHandleForReading.readDataToEndOfFile()
        client.waitUntilExit()
        let text = String(decoding: answer, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard client.terminationStatus == 0, let object = (try? JSONSerialization.jsonObject(with: answer)) as? [String: Any],
              object["error"] == nil else {
            throw BenchFailure(description: "watchman \(String(decoding: data, as: UTF8.self)) on \(socket) failed (exit \(client.terminationStatus)): \(text)")
        }
        return object
    }
    let deadline = now() + 10_000_000_000
    while true {
        if child.hasExited { throw BenchFailure(description: "watchman exited at start; stderr: \(child.stderrTail())") }
        do {
            _ = try command(["get-pid"])
            break
        } catch {
            if now() > deadline { throw BenchFailure(description: "watchman did not answer on \(socket) within 10 s: \(error)") }
            usleep(50_000)
        }
    }
    _ = try command(["watch", run.directory])
    _ = try command(["trigger", run.directory, [
        "name": "bench", "expression": ["type", "f"], "command": job, "stdin": "NAME_PER_LINE",
    ] as [String: Any]])
}

func measureBatch(_ kind: BatchPeer, _ settings: WatchBenchSettings, _ batch: BatchSettings, launcher: PeerLauncher,
                  teardown: WatchTeardown, root: String) -> BatchResult {
    var result = BatchResult()
    let scratch = root + "/batch-\(kind.rawValue)"
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    do {
        let run = try startBatchPeer(kind, settings, batch, launcher: launcher, teardown: teardown, scratch: try makeScratch(root, "batch-\(kind.rawValue)"))
        defer { run.stop() }
        // The probes' lists are in; what arrives from here on is the burst's.
        usleep(UInt32(batch.settleMilliseconds) * 1000 + 500_000)
        run.lists.scan { _ in false }
        run.lists.reset()
        let isBurst: (Substring) -> Bool = { $0.hasPrefix("b-") }
        let ticksBefore = run.cpuTicks
        let first = now()
        for index in 0..<settings.burstFiles { try writeFile(run.directory + "/b-" + String(index)) }
        let written = now()
        result.writeSeconds = Double(written - first) / 1e9
        var lastList = now()
        let giveUp = first + settings.burstTimeoutNanoseconds
        while true {
            if run.lists.scan(counting: isBurst) > 0 { lastList = now() }
            let all = run.lists.firstDelivery.count >= settings.burstFiles
            // Complete: wait a little longer for lists that deliver names again.
            if all && now() - lastList > batch.graceNanoseconds { break }
            if !all && now() - lastList > settings.burstQuietNanoseconds {
                result.ending = "no list for \(settings.burstQuietNanoseconds / 1_000_000_000) s"
                break
            }
            if now() > giveUp {
                result.ending = all ? "all delivered" : "time limit (WATCHKEEPER_BENCH_BURST_TIMEOUT_S=\(settings.burstTimeoutNanoseconds / 1_000_000_000))"
                break
            }
            usleep(50_000)
        }
        result.cpuSeconds = Double(run.cpuTicks &- ticksBefore) / Double(sysconf(Int32(_SC_CLK_TCK)))
        result.peakKiB = ProcessMemory(pid: run.watcherPid).peak
        result.delivered = run.lists.firstDelivery.count
        result.names = run.lists.names
        result.lists = run.lists.lists
        if let last = run.lists.firstDelivery.values.max() {
            result.lastWriteToComplete = Double(Int64(bitPattern: last) - Int64(bitPattern: written)) / 1e9
            result.firstWriteToComplete = Double(last - first) / 1e9
        }
        switch kind {
        case .watchkeeper:
            if let dump = run.daemon?.stateDump(), let watches = dump["watches"] as? [String: Any] {
                let jobs = dump["jobs"] as? [String: Any]
                result.detail = "overflows \(watches["overflows"] ?? "?"), jobs started \(jobs?["started_since_start"] ?? "?")"
            }
        case .watchman:
            // After the kernel's queue overflowed watchman crawls the root again; each crawl's
            // PERF line in its log carries the root's recrawl_count so far.
            let log = (try? String(contentsOfFile: scratch + "/watchman.log", encoding: .utf8)) ?? ""
            let recrawls = log.components(separatedBy: "\"recrawl_count\": ").dropFirst().compactMap { Int($0.prefix { $0.isNumber }) }.max() ?? 0
            result.detail = "recrawls \(recrawls) (its log's recrawl_count)"
        }
    } catch {
        result.failure = "\(error)"
    }
    return result
}

func runBatchBenchmark(_ settings: WatchBenchSettings, launcher: PeerLauncher, teardown: WatchTeardown, root: String) {
    let batch = BatchSettings()
    report("batch: \(settings.burstFiles) files (WATCHKEEPER_BENCH_BURST), settle \(batch.settleMilliseconds) ms for both (WATCHKEEPER_BENCH_BATCH_SETTLE_MS); "
        + "every job is \(settings.baseline) --record-stdin; watchkeeper max_jobs = 8\(settings.output.map { ", output = \($0)" } ?? "")")
    var results: [BatchPeer: BatchResult] = [:]
    for kind in batch.peers {
        let result = measureBatch(kind, settings, batch, launcher: launcher, teardown: teardown, root: root)
        results[kind] = result
        if let failure = result.failure {
            report("  \(kind.label): failed: \(failure)")
            continue
        }
        report("  " + kind.label.padding(toLength: 24, withPad: " ", startingAt: 0)
            + String(format: " delivered %d of %d in %d lists (%d names, %d duplicates); last write to complete %.2f s (first write %.2f s, writes took %.2f s); its CPU %.1f s; peak RSS %.1f MiB (VmHWM)",
                     result.delivered, settings.burstFiles, result.lists, result.names, result.names - result.delivered,
                     result.lastWriteToComplete, result.firstWriteToComplete, result.writeSeconds, result.cpuSeconds, Double(result.peakKiB) / 1024)
            + "; ended: \(result.ending)" + (result.detail.isEmpty ? "" : "; " + result.detail))
    }
    if let ours = results[.watchkeeper], let theirs = results[.watchman], ours.failure == nil, theirs.failure == nil {
        guard ours.complete && theirs.complete else {
            report("batch ratio: not computed, a peer did not deliver every file")
            return
        }
        report(String(format: "watchkeeper batch / watchman, last write to complete delivery = %.2f s / %.2f s = %.2fx (target: no slower, <= 1.00x); CPU %.1f s / %.1f s",
                      ours.lastWriteToComplete, theirs.lastWriteToComplete, ours.lastWriteToComplete / theirs.lastWriteToComplete,
                      ours.cpuSeconds, theirs.cpuSeconds))
    }
}
