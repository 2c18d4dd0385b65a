// Polling (issue 24): a tree of 100,000 files in 1,000 directories polled every 10 s, on the
// release daemon, locally (method = "poll") and through sshfs over loopback (method = "auto",
// polled because it is fuse.sshfs), beside fswatch's poll monitor on the same tree. For each:
// CPU per pass and the average share of a core over a window, and the time from a file
// written into the server's directory ("another host") to its job's start.
//
// WATCHKEEPER_BENCH_POLL_FILES (100000), _POLL_DIRS (1000), _POLL_S (the window, 60),
// _POLL_INTERVAL_S (10), _POLL_SETTLE_S (5), _POLL_CASES (local,sshfs,fswatch).
// Results and the reading: docs/measurements/polling.md.

import Foundation
import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

private struct PollBenchSettings {
    let files, directories, windowSeconds, interval, settle: Int
    let cases: Set<String>

    init() {
        let environment = ProcessInfo.processInfo.environment
        files = Int(environment["WATCHKEEPER_BENCH_POLL_FILES"] ?? "") ?? 100_000
        directories = Int(environment["WATCHKEEPER_BENCH_POLL_DIRS"] ?? "") ?? 1_000
        windowSeconds = Int(environment["WATCHKEEPER_BENCH_POLL_S"] ?? "") ?? 60
        interval = Int(environment["WATCHKEEPER_BENCH_POLL_INTERVAL_S"] ?? "") ?? 10
        settle = Int(environment["WATCHKEEPER_BENCH_POLL_SETTLE_S"] ?? "") ?? 5
        cases = Set((environment["WATCHKEEPER_BENCH_POLL_CASES"] ?? "local,sshfs,fswatch").split(separator: ",").map(String.init))
    }
}

private func wallSeconds() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

private func cpuSeconds(of pid: pid_t) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return 0 }
    let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
    return ((Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

private func spawn(_ tool: String, _ arguments: [String], stdout: Int32? = nil) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    if let stdout { posix_spawn_file_actions_adddup2(&actions, stdout, 1) } else { posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0) }
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    let argv = ([tool] + arguments).map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var pid: pid_t = 0
    let result = posix_spawn(&pid, tool, &actions, nil, argv, environ)
    guard result == 0 else { throw BenchFailure(description: "unable to start \(tool): \(String(cString: strerror(result)))") }
    return pid
}

private func runToEnd(_ tool: String, _ arguments: [String]) throws {
    let pid = try spawn(tool, arguments)
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    guard status == 0 else { throw BenchFailure(description: "\(tool) \(arguments.joined(separator: " ")) failed (\(status))") }
}

private func end(_ pid: pid_t, _ signal: Int32 = SIGTERM) {
    kill(pid, signal)
    var status: Int32 = 0
    waitpid(pid, &status, 0)
}

/// sshd on a loopback port and sshfs (dir_cache=no, as docs/configuration.md advises).
private final class LoopbackShare {
    let root: String
    var sshd: pid_t = 0
    var sshfs: pid_t = 0

    init(root: String, server: String, mountPoint: String) throws {
        self.root = root
        try FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true)
        for key in ["host", "user"] { try runToEnd("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", root + "/\(key)_key"]) }
        try FileManager.default.copyItem(atPath: root + "/user_key.pub", toPath: root + "/authorized_keys")
        let port = 20_000 + Int(getpid() % 20_000)
        try """
            ListenAddress 127.0.0.1:\(port)
            HostKey \(root)/host_key
            AuthorizedKeysFile \(root)/authorized_keys
            PasswordAuthentication no
            PermitRootLogin prohibit-password
            StrictModes no
            UsePAM no
            Subsystem sftp internal-sftp
            PidFile none

            """.write(toFile: root + "/sshd_config", atomically: true, encoding: .utf8)
        sshd = try spawn("/usr/sbin/sshd", ["-D", "-e", "-f", root + "/sshd_config"])
        usleep(500_000)
        sshfs = try spawn("/usr/bin/sshfs", ["-f", "-p", "\(port)", "-o",
                                             "dir_cache=no,IdentityFile=\(root)/user_key,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes",
                                             "root@127.0.0.1:\(server)", mountPoint])
        for _ in 0..<100 {
            if let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8), table.contains(" \(mountPoint) ") { return }
            usleep(100_000)
        }
        throw BenchFailure(description: "sshfs did not mount \(mountPoint)")
    }

    func close(mountPoint: String) {
        _ = try? runToEnd("/usr/bin/fusermount3", ["-u", "-z", mountPoint])
        end(sshfs, SIGKILL)
        end(sshd)
    }
}

/// Latency probes: one file every `interval`/2 + a little, at phases across the interval.
private func writeProbes(into server: String, count: Int, spacing: Double, prefix: String) -> [String: Double] {
    var written: [String: Double] = [:]
    for index in 0..<count {
        // New names for each case: the cases share the tree, and a name written before would
        // be a rewrite in place, which a share's poll finds only in its directory's turn.
        let name = "\(prefix)-probe-\(index)"
        let path = server + "/d0/" + name
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        _ = "probe".withCString { Glibc.write(fd, $0, 5) }
        Glibc.close(fd)
        written[name] = wallSeconds()
        usleep(useconds_t(spacing * 1e6))
    }
    return written
}

func runPollBenchmark() {
    let settings = PollBenchSettings()
    print("poll: \(settings.files) files in \(settings.directories) directories, poll_interval \(settings.interval)s, poll_settle \(settings.settle)s, window \(settings.windowSeconds)s")
    var template = Array("/var/tmp/wk-poll-bench-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { return print("poll: mkdtemp failed") }
    let base = String(cString: made)
    defer { try? FileManager.default.removeItem(atPath: base) }
    let server = base + "/server"
    let mountPoint = base + "/mnt"
    do {
        try makePollTree(server: server, mountPoint: mountPoint, settings)
    } catch {
        return print("poll: unable to make the tree: \(error)")
    }
    // What changed in the 2 s before a poller starts counts as new without catch-up.
    sleep(3)
    let probes = max(3, settings.windowSeconds / settings.interval)
    let spacing = Double(settings.windowSeconds) / Double(probes) + 0.37

    if settings.cases.contains("local") {
        pollDaemonCase("local ext4, method = poll", path: server, method: "poll", share: nil, settings, server: server, probes: probes, spacing: spacing)
    }
    if settings.cases.contains("sshfs") {
        do {
            let share = try LoopbackShare(root: base, server: server, mountPoint: mountPoint)
            defer { share.close(mountPoint: mountPoint) }
            pollDaemonCase("sshfs over loopback, method = auto", path: mountPoint, method: "auto", share: share, settings, server: server,
                           probes: probes, spacing: spacing)
        } catch {
            print("poll sshfs: failed: \(error)")
        }
    }
    if settings.cases.contains("fswatch") { fswatchCase(settings, server: server, probes: probes, spacing: spacing) }
}

/// The tree the cases watch, `settings.files` files of 16 bytes, and the share's mount point.
private func makePollTree(server: String, mountPoint: String, _ settings: PollBenchSettings) throws {
    try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
    let perDirectory = settings.files / settings.directories
    for directory in 0..<settings.directories {
        let path = server + "/d\(directory)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        for file in 0..<perDirectory {
            let fd = open(path + "/f\(file)", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            _ = "0123456789abcdef".withCString { Glibc.write(fd, $0, 16) }
            Glibc.close(fd)
        }
    }
}

/// The daemon watching `path` with `method`: its CPU per pass once it has learnt the tree,
/// and the time from each probe written to its job's start.
private func pollDaemonCase(_ label: String, path: String, method: String, share: LoopbackShare?, _ settings: PollBenchSettings,
                            server: String, probes: Int, spacing: Double) {
    withBenchDaemon("poll \(label)", config: { directory in
        """
        [daemon]
        log_level = "info"
        [[watch]]
        name = "bench"
        path = "\(path)"
        recursive = true
        method = "\(method)"
        catch_up = false
        poll_interval = "\(settings.interval)s"
        poll_settle = "\(settings.settle)s"
        command = ["/bin/sh", "-c", "echo \\"$(date +%s.%N) $1\\" >> \(directory)/started", "sh", "{name}"]
        """
    }, measure: { daemon in
        // The first pass learns the tree (13 s over sshfs): measuring starts after the second.
        var dumps = 0
        let learnt = MonotonicInstant.now + .seconds(300)
        while MonotonicInstant.now < learnt {
            dumps += 1
            kill(daemon.pid, SIGUSR1)
            usleep(300_000)
            let dump = (try? String(contentsOfFile: daemon.directory + "/run/state.json", encoding: .utf8)) ?? ""
            if let range = dump.range(of: "\"passes\":"), let passes = Int(dump[range.upperBound...].prefix { $0.isNumber }), passes >= 2 { break }
            sleep(1)
        }
        let startedCPU = daemon.cpuSeconds
        let shareCPU = share.map { cpuSeconds(of: $0.sshfs) } ?? 0
        let startedAt = wallSeconds()
        let written = writeProbes(into: server, count: probes, spacing: spacing, prefix: method)
        let remaining = Double(settings.windowSeconds) - (wallSeconds() - startedAt)
        if remaining > 0 { usleep(useconds_t(remaining * 1e6)) }
        let window = wallSeconds() - startedAt
        let used = daemon.cpuSeconds - startedCPU
        let sshfsUsed = share.map { cpuSeconds(of: $0.sshfs) - shareCPU }
        sleep(UInt32(settings.interval + settings.settle + 2))
        let lines = (try? String(contentsOfFile: daemon.directory + "/started", encoding: .utf8)) ?? ""
        var latencies: [Double] = []
        for line in lines.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, let at = Double(parts[0]), let wrote = written[String(parts[1])] else { continue }
            latencies.append(at - wrote)
        }
        kill(daemon.pid, SIGUSR1)
        usleep(500_000)
        let dump = (try? String(contentsOfFile: daemon.directory + "/run/state.json", encoding: .utf8)) ?? ""
        let lastCPU = dump.range(of: "\"last_pass_cpu_ms\":").map { dump[$0.upperBound...].prefix { "0123456789.".contains($0) } } ?? "?"
        let lastWall = dump.range(of: "\"last_pass_ms\":").map { dump[$0.upperBound...].prefix { "0123456789.".contains($0) } } ?? "?"
        let passes = max(1.0, window / Double(settings.interval))
        var line = String(format: "poll %@: daemon CPU %.3f s per pass (%.0f passes in %.0f s), %.2f %% of a core on average; last pass %@ ms CPU, %@ ms wall; RSS %.1f MiB",
                          label, used / passes, passes, window, used / window * 100, String(lastCPU), String(lastWall), daemon.residentMiB)
        if let sshfsUsed { line += String(format: "; the sshfs client %.2f %% of a core", sshfsUsed / window * 100) }
        print(line)
        let sorted = latencies.sorted()
        print(String(format: "poll %@: write to job start: %d of %d probes, median %.1f s, max %.1f s (bound: interval + settle + 1 = %d s)",
                     label, sorted.count, probes, sorted.isEmpty ? -1 : sorted[sorted.count / 2], sorted.last ?? -1,
                     settings.interval + settings.settle + 1))
    })
}

/// fswatch's poll monitor (Debian's fswatch 1.17) on the same local tree: it stats every
/// file each `-l` seconds and prints what changed.
private func fswatchCase(_ settings: PollBenchSettings, server: String, probes: Int, spacing: Double) {
    var pipeEnds: [Int32] = [0, 0]
    guard pipe(&pipeEnds) == 0, let pid = try? spawn("/usr/bin/fswatch", ["-m", "poll_monitor", "-r", "-l", "\(settings.interval)", server], stdout: pipeEnds[1]) else {
        return print("poll fswatch: unable to start /usr/bin/fswatch (apt-get install fswatch)")
    }
    Glibc.close(pipeEnds[1])
    let seen = FirstSeenLines(reading: pipeEnds[0], key: { String($0.split(separator: "/").last ?? "") }, clock: wallSeconds)
    sleep(UInt32(settings.interval + 2))
    let startedCPU = cpuSeconds(of: pid)
    let startedAt = wallSeconds()
    let written = writeProbes(into: server, count: probes, spacing: spacing, prefix: "fswatch")
    let remaining = Double(settings.windowSeconds) - (wallSeconds() - startedAt)
    if remaining > 0 { usleep(useconds_t(remaining * 1e6)) }
    let window = wallSeconds() - startedAt
    let used = cpuSeconds(of: pid) - startedCPU
    sleep(UInt32(settings.interval + 2))
    let rss = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8))?.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
        .map { $0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Double($0) } ?? 0 } ?? 0
    end(pid)
    let latencies = written.compactMap { name, wrote in seen.firstSeen(name).map { $0 - wrote } }.sorted()
    let passes = max(1.0, window / Double(settings.interval))
    print(String(format: "poll fswatch -m poll_monitor -l %d: CPU %.3f s per pass, %.2f %% of a core on average; RSS %.1f MiB; probes seen %d of %d, median %.1f s, max %.1f s (no settle: a file still being written is reported as it is)",
                 settings.interval, used / passes, used / window * 100, rss / 1024, latencies.count, written.count,
                 latencies.isEmpty ? -1 : latencies[latencies.count / 2], latencies.last ?? -1))
}
