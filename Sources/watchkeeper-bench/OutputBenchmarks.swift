// A job's output through the daemon: one task writes N MiB to stdout (80-byte lines, or
// no newline at all), the daemon journals it, and its stderr is a pipe this bench drains
// as a log collector would. Reports the daemon's CPU per GiB, the throughput, and the
// daemon's peak RSS. With WATCHKEEPER_BENCH_OUTPUT_READ_MIBS the collector reads at that
// rate only: the job must slow down (backpressure) and the daemon's memory stay bounded.

import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Reads the daemon's stderr pipe on its own thread, like journald or a terminal would:
/// counts bytes and newlines and watches for one line (the run record).
// @unchecked Sendable: its counts are read after the reading thread's join.
private final class StderrCollector: @unchecked Sendable {
    let readFD: Int32
    let writeFD: Int32
    private let lock = NSLock()
    private var bytes: UInt64 = 0
    private var newlines: UInt64 = 0
    private var tail: [UInt8] = []
    private var seenAt: UInt64?
    private let needle: [UInt8]
    private let bytesPerSecond: Double?

    init(needle: String, bytesPerSecond: Double?) throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0, fcntl(fds[0], F_SETFD, FD_CLOEXEC) == 0, fcntl(fds[1], F_SETFD, FD_CLOEXEC) == 0 else { throw BenchFailure(description: "pipe2: \(String(cString: strerror(errno)))") }
        readFD = fds[0]
        writeFD = fds[1]
        self.needle = Array(needle.utf8)
        self.bytesPerSecond = bytesPerSecond
        let thread = Thread { [self] in run() }
        thread.start()
    }

    private func run() {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        let started = now()
        var total: UInt64 = 0
        while true {
            let want = bytesPerSecond == nil ? buffer.count : 65_536
            let count = buffer.withUnsafeMutableBytes { read(readFD, $0.baseAddress, want) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            total += UInt64(count)
            var lines: UInt64 = 0
            for byte in buffer[0..<count] where byte == 10 { lines += 1 }
            lock.lock()
            bytes = total
            newlines += lines
            tail = Array((tail + buffer[0..<count]).suffix(4_096))
            if seenAt == nil, tail.count >= needle.count, contains(tail, needle) { seenAt = now() }
            lock.unlock()
            if let rate = bytesPerSecond {
                // Sleep until the bytes read so far are due at `rate`.
                let due = started + UInt64(Double(total) / rate * 1e9)
                let current = now()
                if due > current { usleep(UInt32((due - current) / 1_000)) }
            }
        }
        close(readFD)
    }

    private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard haystack.count >= needle.count else { return false }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }

    var snapshot: (bytes: UInt64, newlines: UInt64, seenAt: UInt64?) {
        lock.lock()
        defer { lock.unlock() }
        return (bytes, newlines, seenAt)
    }
}

struct OutputCase {
    let title: String
    let command: String
}

/// The two outputs a job makes: 80-byte lines and one long line, `bytes` each.
func outputCases(bytes: Int, environment: [String: String]) -> [OutputCase] {
    // `yes` prints 79 characters and a newline: 80-byte lines.
    let line = String(repeating: "0123456789", count: 8).dropLast()
    return [
        OutputCase(title: "80-byte lines", command: "yes \(line) | head -c \(bytes)"),
        OutputCase(title: "no newline", command: "head -c \(bytes) /dev/zero | tr '\\\\000' x"),
    ].filter { outputCase in
        let wanted = environment["WATCHKEEPER_BENCH_OUTPUT_CASES"] ?? "lines,flat"
        return wanted.contains(outputCase.title.hasPrefix("80") ? "lines" : "flat")
    }
}

/// `output` routes to measure (WATCHKEEPER_BENCH_OUTPUT_ROUTES, default both).
func outputRoutes(_ environment: [String: String]) -> [String] {
    (environment["WATCHKEEPER_BENCH_OUTPUT_ROUTES"] ?? "daemon,direct").split(separator: ",").map(String.init)
}

/// The flood task's configuration.
func floodConfig(_ outputCase: OutputCase, route: String) -> String {
    ["[daemon]", "[[task]]", "name = \"flood\"", "every = \"1h\"", "run_on_start = true", "budget = \"1h\"", "output = \"\(route)\"",
     "command = [\"/bin/sh\", \"-c\", \"\(outputCase.command)\"]"].joined(separator: "\n") + "\n"
}

func runOutputBenchmark() {
    let environment = ProcessInfo.processInfo.environment
    let mebibytes = Int(environment["WATCHKEEPER_BENCH_OUTPUT_MIB"] ?? "") ?? 1_024
    let readRate = Double(environment["WATCHKEEPER_BENCH_OUTPUT_READ_MIBS"] ?? "").map { $0 * 1_048_576 }
    let bytes = mebibytes * 1_048_576
    let sinks = environment["WATCHKEEPER_BENCH_OUTPUT_SINKS"] ?? "stderr,journal"
    if environment[journalChildVariable] != nil {
        runJournalOutputBenchmark(bytes: bytes, environment: environment)
        return
    }
    guard sinks.contains("stderr") else {
        runJournalOutputBenchmarkInNamespace()
        return
    }
    let cases = outputCases(bytes: bytes, environment: environment)
    print("job output through the daemon: \(mebibytes) MiB to stdout, the daemon's stderr a pipe read by the bench"
          + (readRate.map { String(format: " at %.1f MiB/s", $0 / 1_048_576) } ?? " as fast as it comes"))
    print("| route | output | wall | MiB/s | daemon CPU | CPU per GiB | lines seen | daemon peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    for route in outputRoutes(environment) {
    for outputCase in cases {
        do {
            let collector = try StderrCollector(needle: "(task=flood, run_id=", bytesPerSecond: readRate)
            let daemon = try BenchDaemon(binary: releaseBinary(), config: { _ in floodConfig(outputCase, route: route) }, stderr: collector.writeFD)
            close(collector.writeFD)
            defer { daemon.stop() }
            let cpuBefore = daemon.cpuSeconds
            let started = now()
            var finishedAt: UInt64?
            while finishedAt == nil {
                usleep(20_000)
                finishedAt = collector.snapshot.seenAt
                guard kill(daemon.pid, 0) == 0 else { throw BenchFailure(description: "the daemon exited") }
            }
            let cpu = daemon.cpuSeconds - cpuBefore
            let peak = daemonPeakMiB(daemon.pid)
            let seen = collector.snapshot
            let wall = Double(finishedAt! - started) / 1e9
            let gib = Double(bytes) / Double(1 << 30)
            print(String(format: "| %@ | %@ | %.1f s | %.1f | %.2f s | %.2f s | %llu | %.1f MiB |",
                         route, outputCase.title, wall, Double(bytes) / 1_048_576 / wall, cpu, cpu / gib, seen.newlines, peak))
        } catch {
            print("| \(route) | \(outputCase.title) | failed: \(error) |")
        }
    }
    }
    if sinks.contains("journal") { runJournalOutputBenchmarkInNamespace() }
}

/// VmHWM: the most RSS the process has had.
func daemonPeakMiB(_ pid: pid_t) -> Double {
    let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
    let kb = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }?
        .split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Double($0) } ?? 0
    return kb / 1024
}
