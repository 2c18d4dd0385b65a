// The task engine's costs on the release daemon: timer start jitter of a 1 s task, the
// CPU a progress flood costs, and RSS with 100 tasks configured.

import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A release daemon on a generated configuration, stderr to a file, READY awaited.
final class BenchDaemon {
    let directory: String
    let pid: pid_t
    let stderrPath: String
    private var stopped = false

    /// `stderr`: an open descriptor to give the daemon as its stderr (a pipe the bench
    /// reads), instead of the file `stderrPath`.
    init(binary: String, config: (String) -> String, stderr: Int32? = nil, environment extra: [String] = []) throws {
        var template = Array("/tmp/wk-bench-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw BenchFailure(description: "mkdtemp failed") }
        directory = String(cString: made)
        try config(directory).write(toFile: directory + "/watchkeeper.toml", atomically: true, encoding: .utf8)
        let notify = try NotifyEndpoint(directory: directory)
        stderrPath = directory + "/stderr.log"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        if let stderr {
            posix_spawn_file_actions_adddup2(&actions, stderr, 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        }
        let argv: [UnsafeMutablePointer<CChar>?] = ([binary, "run", "--config", directory + "/watchkeeper.toml"] as [String]).map { strdup($0) } + [nil]
        let variables: [String] = ["PATH=/usr/bin:/bin", "NOTIFY_SOCKET=\(notify.path)", "RUNTIME_DIRECTORY=\(directory)/run",
                                   "STATE_DIRECTORY=\(directory)/state"] + extra
        let environment: [UnsafeMutablePointer<CChar>?] = variables.map { strdup($0) } + [nil]
        var child: pid_t = 0
        let result = posix_spawn(&child, binary, &actions, nil, argv, environment)
        posix_spawn_file_actions_destroy(&actions)
        argv.forEach { free($0) }
        environment.forEach { free($0) }
        guard result == 0 else { throw BenchFailure(description: "unable to start \(binary): \(String(cString: strerror(result)))") }
        pid = child
        _ = try notify.wait(for: "READY=1")
    }

    /// user + system CPU seconds so far, from /proc/PID/stat.
    var cpuSeconds: Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        return ((Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)) / ticks
    }

    var residentMiB: Double { statusMiB("VmRSS:") }

    /// Anonymous resident memory (heap, stacks): what the daemon allocated, without the
    /// binary's and libraries' file-backed pages.
    var anonymousMiB: Double { statusMiB("RssAnon:") }

    private func statusMiB(_ field: String) -> Double {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let kb = status.split(separator: "\n").first { $0.hasPrefix(field) }?
            .split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Double($0) } ?? 0
        return kb / 1024
    }

    func stop() {
        guard !stopped else { return }
        stopped = true
        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Runs `measure` on a release daemon started on the configuration `config` writes for its
/// scratch directory, and stops the daemon after; a failure is printed after `title`.
func withBenchDaemon(_ title: String, config: (String) -> String, measure: (BenchDaemon) throws -> Void) {
    do {
        let daemon = try BenchDaemon(binary: releaseBinary(), config: config)
        defer { daemon.stop() }
        try measure(daemon)
    } catch {
        print("\(title): failed: \(error)")
    }
}

/// A configuration of one task: its name, then its other `key = value` lines.
private func oneTask(_ name: String, _ lines: [String]) -> String {
    (["[daemon]", "[[task]]", "name = \"\(name)\""] + lines).joined(separator: "\n") + "\n"
}

func releaseBinary() -> String {
    ProcessInfo.processInfo.environment["WATCHKEEPER_BIN"]
        ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("watchkeeper").path
}

func milliseconds(_ values: [Double]) -> String {
    let sorted = values.sorted()
    func at(_ p: Double) -> Double { sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))] }
    return String(format: "p50 %.2f ms, p99 %.2f ms, max %.2f ms (n=%d)", at(0.5) * 1e3, at(0.99) * 1e3, (sorted.last ?? 0) * 1e3, sorted.count)
}

/// A 1 s `every` task for N seconds (WATCHKEEPER_BENCH_TIMER_S, default 60). Reports the
/// scheduler's lateness (actual start minus the scheduled instant on the anchor grid, from
/// the run records) and when the job itself observed its start against the ideal grid.
func runTimerJitterBenchmark() {
    let seconds = Int(ProcessInfo.processInfo.environment["WATCHKEEPER_BENCH_TIMER_S"] ?? "") ?? 60
    print("timer jitter: a 1 s task for \(seconds) s on \(releaseBinary())")
    withBenchDaemon("timer jitter", config: { directory in
        oneTask("tick", ["every = \"1s\"", "budget = \"900ms\"", "command = [\"/bin/sh\", \"-c\", \"date +%s%N >> \(directory)/starts\"]"])
    }) { daemon in
        sleep(UInt32(seconds) + 1)
        let records = (try? String(contentsOfFile: daemon.stderrPath, encoding: .utf8)) ?? ""
        let lateness = records.split(separator: "\n").compactMap { line -> Double? in
            guard let range = line.range(of: "lateness_ms=") else { return nil }
            return Double(line[range.upperBound...].prefix { $0.isNumber || $0 == "-" || $0 == "." }).map { $0 / 1e3 }
        }
        let starts = ((try? String(contentsOfFile: daemon.directory + "/starts", encoding: .utf8)) ?? "")
            .split(separator: "\n").compactMap { Double($0) }.map { $0 / 1e9 }
        daemon.stop()
        guard let first = starts.first, starts.count > 2 else {
            print("timer jitter: failed: only \(starts.count) runs recorded")
            return
        }
        // Deviation of each observed start from first + k seconds (the grid is drift-free).
        let deviations = starts.enumerated().map { $0.element - (first + Double($0.offset)) }
        let floor = deviations.min() ?? 0
        let spread = deviations.map { $0 - floor }
        let drift = (deviations.last ?? 0) - (deviations.first ?? 0)
        print("  scheduler lateness (run records: start minus due):  \(milliseconds(lateness))")
        print("  job-observed start jitter vs the 1 s grid:      \(milliseconds(spread))")
        print(String(format: "  drift over %d runs: %.2f ms", starts.count, drift * 1e3))
    }
}

/// A job writing PROGRESS= lines as fast as it can for 10 s; reports the updates the daemon
/// saw, its CPU time meanwhile, and the cost per update.
func runProgressCostBenchmark() {
    print("progress flood: one job writing PROGRESS= lines as fast as it can for 10 s")
    withBenchDaemon("progress flood", config: { _ in
        oneTask("chatty", ["every = \"1h\"", "run_on_start = true", "budget = \"1m\"",
                           "command = [\"/usr/bin/python3\", \"-c\", \"import os,time\\nf=os.fdopen(int(os.environ['WATCHKEEPER_PROGRESS_FD']),'w',buffering=1<<16)\\nend=time.time()+10\\ni=0\\nwhile time.time()<end:\\n  for _ in range(1000): f.write('PROGRESS=%d\\\\n' % (i % 100)); i+=1\\nf.flush()\\nprint('sent', i, flush=True)\\ntime.sleep(2)\"]"])
    }) { daemon in
        let cpuBefore = daemon.cpuSeconds
        sleep(11)
        let cpuAfter = daemon.cpuSeconds
        kill(daemon.pid, SIGUSR1)
        sleep(1)
        let state = (try? String(contentsOfFile: daemon.directory + "/run/state.json", encoding: .utf8)) ?? ""
        let updates = state.range(of: "\"progress_updates\":").map { Int(state[$0.upperBound...].prefix { $0.isNumber }) ?? 0 } ?? 0
        let log = (try? String(contentsOfFile: daemon.stderrPath, encoding: .utf8)) ?? ""
        let sent = log.range(of: "stdout: sent ").map { Int(log[$0.upperBound...].prefix { $0.isNumber }) ?? 0 } ?? 0
        let wakeups = state.range(of: "\"target\":\"progress of chatty").flatMap { range in
            state[range.upperBound...].range(of: "\"events\":").map { Int(state[$0.upperBound...].prefix { $0.isNumber }) ?? 0 }
        } ?? 0
        daemon.stop()
        let cpu = cpuAfter - cpuBefore
        print("  updates sent by the job:        \(sent) (\(sent / 10)/s)")
        print("  updates counted by the daemon:  \(updates)")
        print("  progress source wake-ups:       \(wakeups)")
        print(String(format: "  daemon CPU during the flood:    %.3f s of 10 s (%.1f%% of one core)", cpu, cpu * 10))
        if updates > 0 { print(String(format: "  daemon CPU per update:          %.1f ns", cpu / Double(updates) * 1e9)) }
    }
}

/// RSS of an idle daemon with 100 tasks configured (scheduled hourly, none running).
func runManyTasksBenchmark() {
    let count = Int(ProcessInfo.processInfo.environment["WATCHKEEPER_BENCH_TASKS"] ?? "") ?? 100
    withBenchDaemon("many tasks", config: { _ in
        "[daemon]\n" + (0..<count).map { index in
            """

            [[task]]
            name = "task-\(index)"
            \(index % 2 == 0 ? "every = \"1h\"" : "cron = \"\(index % 60) 3 * * *\"")
            command = ["/bin/true", "{task}", "{run_id}"]
            budget = "5m"
            """
        }.joined(separator: "\n")
    }) { daemon in
        sleep(5)
        print(String(format: "%d tasks configured: idle RSS %.1f MiB after 5 s", count, daemon.residentMiB))
    }
}
