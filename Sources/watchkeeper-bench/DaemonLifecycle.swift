// The daemon's own costs, measured on the real release binary: exec to READY=1, SIGUSR1 to
// the dump being emitted, SIGTERM to exit, and idle RSS. Each run starts a fresh daemon with a
// real NOTIFY_SOCKET; the dump is timed where it is emitted (stderr here; under systemd the
// same code path calls sd_journal_sendv instead of write).

import Foundation

#if canImport(Glibc)
import Glibc
#endif

func now() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

struct BenchFailure: Error, CustomStringConvertible {
    let description: String
}

final class NotifyEndpoint {
    let path: String
    let fd: Int32

    init(directory: String) throws {
        path = directory + "/notify.sock"
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in path.utf8.enumerated() { buffer[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard fd >= 0, bound == 0 else { throw BenchFailure(description: "unable to bind \(path): \(String(cString: strerror(errno)))") }
    }

    deinit { close(fd) }

    /// Blocks until a datagram containing `needle` arrives; returns its arrival time.
    func wait(for needle: String, timeoutMilliseconds: Int32 = 10_000) throws -> UInt64 {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, timeoutMilliseconds) > 0 else { throw BenchFailure(description: "no \(needle) within \(timeoutMilliseconds) ms") }
            let count = recv(fd, &buffer, buffer.count, 0)
            let arrived = now()
            if count > 0, String(decoding: buffer[0..<count], as: UTF8.self).split(separator: "\n").contains(Substring(needle)) {
                return arrived
            }
        }
    }
}

private struct RunResult {
    var execToReady: UInt64
    var usr1ToDump: UInt64
    var termToExit: UInt64
    var idleRSS: Int64?
}

private func runOnce(binary: String, idleSeconds: Double) throws -> RunResult {
    var template = Array("/tmp/wk-bench-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { throw BenchFailure(description: "mkdtemp failed") }
    let directory = String(cString: made)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let config = directory + "/watchkeeper.toml"
    try "[daemon]\nlog_level = \"info\"\n".write(toFile: config, atomically: true, encoding: .utf8)
    let notify = try NotifyEndpoint(directory: directory)

    let (pid, stderrFD, started) = try spawnDaemon(binary, config: config, notifySocket: notify.path, directory: directory)
    var reaped = false
    defer {
        // Only our own child, and only while it is ours: kill(-1, ...) would signal every process.
        if !reaped && pid > 0 {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        close(stderrFD)
    }

    let ready = try notify.wait(for: "READY=1")
    var idleRSS: Int64?
    if idleSeconds > 0 {
        usleep(UInt32(idleSeconds * 1_000_000))
        idleRSS = residentBytes(of: pid)
    } else {
        usleep(100_000)
    }

    // Drain what the daemon printed so far, then time the dump.
    var buffer = [UInt8](repeating: 0, count: 65_536)
    var seen = ""
    func readStderr(until needle: String) throws -> UInt64 {
        while true {
            var poller = pollfd(fd: stderrFD, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 10_000) > 0 else { throw BenchFailure(description: "no \"\(needle)\" on stderr") }
            let count = read(stderrFD, &buffer, buffer.count)
            let arrived = now()
            guard count > 0 else { throw BenchFailure(description: "stderr closed before \"\(needle)\"") }
            seen += String(decoding: buffer[0..<count], as: UTF8.self)
            if seen.contains(needle) { return arrived }
        }
    }
    _ = try readStderr(until: "ready in")
    let signalled = now()
    kill(pid, SIGUSR1)
    let dumped = try readStderr(until: "watchkeeper state dump #1")

    let terminating = now()
    kill(pid, SIGTERM)
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    let exited = now()
    reaped = true
    guard status == 0 else { throw BenchFailure(description: "daemon exited with status \(status)") }
    return RunResult(execToReady: ready - started, usr1ToDump: dumped - signalled, termToExit: exited - terminating, idleRSS: idleRSS)
}

/// The daemon, stdin and stdout on /dev/null, stderr into a pipe whose read end comes back,
/// with the instant just before posix_spawn.
private func spawnDaemon(_ binary: String, config: String, notifySocket: String, directory: String) throws -> (pid: pid_t, stderr: Int32, started: UInt64) {
    var pipeEnds: [Int32] = [0, 0]
    guard pipe(&pipeEnds) == 0 else { throw BenchFailure(description: "pipe failed") }
    _ = fcntl(pipeEnds[0], F_SETFD, FD_CLOEXEC)
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 2)
    let argv: [UnsafeMutablePointer<CChar>?] = ([binary, "run", "--config", config] as [String]).map { strdup($0) } + [nil]
    let variables: [String] = ["PATH=/usr/bin:/bin", "NOTIFY_SOCKET=\(notifySocket)", "RUNTIME_DIRECTORY=\(directory)/run",
                               "STATE_DIRECTORY=\(directory)/state"]
    let environment: [UnsafeMutablePointer<CChar>?] = variables.map { strdup($0) } + [nil]
    var pid: pid_t = 0
    let started = now()
    let spawned = posix_spawn(&pid, binary, &actions, nil, argv, environment)
    posix_spawn_file_actions_destroy(&actions)
    argv.forEach { free($0) }
    environment.forEach { free($0) }
    close(pipeEnds[1])
    guard spawned == 0 else { throw BenchFailure(description: "unable to start \(binary): \(String(cString: strerror(spawned)))") }
    return (pid, pipeEnds[0], started)
}

/// VmRSS in bytes, from /proc.
private func residentBytes(of pid: pid_t) -> Int64? {
    let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
    guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return nil }
    return line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int64($0) }.map { $0 * 1024 }
}

func percentile(_ values: [UInt64], _ p: Double) -> Double {
    let sorted = values.sorted()
    let index = min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))
    return Double(sorted[index]) / 1e6
}

func runDaemonLifecycleBenchmark() {
    let environment = ProcessInfo.processInfo.environment
    let binary = environment["WATCHKEEPER_BIN"]
        ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("watchkeeper").path
    let runs = Int(environment["WATCHKEEPER_BENCH_RUNS"] ?? "") ?? 30
    let idle = Double(environment["WATCHKEEPER_BENCH_IDLE_S"] ?? "") ?? 10
    print("daemon lifecycle: \(binary), \(runs) runs; idle RSS after \(idle) s idle in the first run")
    var results: [RunResult] = []
    do {
        for run in 0..<runs {
            results.append(try runOnce(binary: binary, idleSeconds: run == 0 ? idle : 0))
        }
    } catch {
        print("daemon lifecycle: failed: \(error)")
        exit(1)
    }
    func row(_ name: String, _ values: [UInt64]) {
        let cells = [percentile(values, 0.5), percentile(values, 0.99), Double(values.max() ?? 0) / 1e6].map { String(format: "%8.2f", $0) }
        print("\(name.padding(toLength: 34, withPad: " ", startingAt: 0)) | \(cells.joined(separator: " | "))")
    }
    print("\("metric (ms)".padding(toLength: 34, withPad: " ", startingAt: 0)) |      p50 |      p99 |      max")
    row("exec to READY=1", results.map(\.execToReady))
    row("SIGUSR1 to dump emitted", results.map(\.usr1ToDump))
    row("SIGTERM to exit 0", results.map(\.termToExit))
    if let rss = results.first?.idleRSS {
        print("idle RSS after \(idle) s: \(String(format: "%.1f", Double(rss) / 1_048_576)) MiB (\(rss) bytes)")
    }
}
