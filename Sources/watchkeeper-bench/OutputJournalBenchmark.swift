// The output benchmark with the journal as the sink: the daemon's stderr is a journald
// stream (JOURNAL_STREAM set, as systemd does for a service), so it sends every output
// line with sd_journal_sendv. A private systemd-journald runs in a mount namespace of its
// own (tmpfs on /run and /var/log/journal, rate limiting off), so the bench touches
// neither the machine's journal nor its logs.

import Foundation

#if canImport(Glibc)
import Glibc
#endif

let journalChildVariable = "WATCHKEEPER_BENCH_OUTPUT_JOURNAL_CHILD"

/// Runs this bench again under `unshare --mount`, where it can mount and start journald.
func runJournalOutputBenchmarkInNamespace() {
    guard getuid() == 0 else {
        print("job output to the journal: skipped (needs root for a private journald)")
        return
    }
    // A network namespace too: net.unix.max_dgram_qlen is per namespace, and set there
    // to what systemd sets at boot (512; the kernel's default is 10).
    let arguments = ["/usr/bin/unshare", "--mount", "--net", "--propagation", "private", "--fork", CommandLine.arguments[0], "output"]
    let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    let variables = ProcessInfo.processInfo.environment.map { "\($0.key)=\($0.value)" } + ["\(journalChildVariable)=1",
        "WATCHKEEPER_BIN=\(releaseBinary())"]
    let environment: [UnsafeMutablePointer<CChar>?] = variables.map { strdup($0) } + [nil]
    defer {
        argv.forEach { free($0) }
        environment.forEach { free($0) }
    }
    fflush(nil)
    var child: pid_t = 0
    guard posix_spawn(&child, arguments[0], nil, nil, argv, environment) == 0 else {
        print("job output to the journal: failed: unable to run unshare")
        return
    }
    var status: Int32 = 0
    waitpid(child, &status, 0)
}

/// In the namespace: a private journald, then each case with the daemon's stderr a stream to it.
func runJournalOutputBenchmark(bytes: Int, environment: [String: String]) {
    do {
        let journald = try PrivateJournald()
        defer { journald.stop() }
        print("job output to the journal: \(bytes / 1_048_576) MiB to stdout, the daemon's stderr a stream to a private journald")
        print("| route | output | wall | MiB/s | daemon CPU | CPU per GiB | journald CPU | entries | daemon peak RSS |")
        print("|---|---|---|---|---|---|---|---|---|")
        for route in outputRoutes(environment) {
        for outputCase in outputCases(bytes: bytes, environment: environment) {
            let caseStartedWall = time(nil)
            let stream = try journalStream(identifier: "watchkeeper")
            var info = stat()
            fstat(stream, &info)
            let daemon = try BenchDaemon(binary: releaseBinary(), config: { _ in floodConfig(outputCase, route: route) }, stderr: stream,
                                         environment: ["JOURNAL_STREAM=\(info.st_dev):\(info.st_ino)"])
            close(stream)
            defer { daemon.stop() }
            let cpuBefore = daemon.cpuSeconds
            let journaldBefore = journald.cpuSeconds
            let started = now()
            // The run record is the last entry the run makes: poll the journal for it.
            while try !journald.contains(["MESSAGE_ID=b665bf3c2f6c4766ab20db516c7d25dd", "_PID=\(daemon.pid)"]) {
                guard kill(daemon.pid, 0) == 0 else { throw BenchFailure(description: "the daemon exited") }
                usleep(200_000)
            }
            let wall = Double(now() - started) / 1e9
            let cpu = daemon.cpuSeconds - cpuBefore
            let journaldCPU = journald.cpuSeconds - journaldBefore
            // Direct lines come on the job's own stream, not as the daemon's entries: counted
            // by name since this case began.
            let entries = try journald.count(route == "direct" ? ["--since=@\(caseStartedWall)", "SYSLOG_IDENTIFIER=flood"]
                                                               : ["_PID=\(daemon.pid)", "WATCHKEEPER_STREAM=stdout"])
            let gib = Double(bytes) / Double(1 << 30)
            print(String(format: "| %@ | %@ | %.1f s | %.1f | %.2f s | %.2f s | %.2f s | %d | %.1f MiB |", route, outputCase.title, wall,
                         Double(bytes) / 1_048_576 / wall, cpu, cpu / gib, journaldCPU, entries, daemonPeakMiB(daemon.pid)))
        }
        }
    } catch {
        print("job output to the journal: failed: \(error)")
    }
}

/// What sd_journal_stream_fd(3) does, without linking libsystemd into the bench: a stream
/// connection to journald's stdout socket and its header (identifier, unit, priority
/// info, no level prefix, no forwarding).
private func journalStream(identifier: String) throws -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { buffer in
        for (index, byte) in "/run/systemd/journal/stdout".utf8.enumerated() { buffer[index] = byte }
    }
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard fd >= 0, connected == 0 else { throw BenchFailure(description: "unable to connect to journald: \(String(cString: strerror(errno)))") }
    shutdown(fd, Int32(SHUT_RD))
    let header = Array("\(identifier)\n\n6\n0\n0\n0\n0\n".utf8)
    guard write(fd, header, header.count) == header.count else { throw BenchFailure(description: "unable to write the stream header") }
    return fd
}

/// systemd-journald started by hand in this mount namespace, with its files on tmpfs.
private final class PrivateJournald {
    let pid: pid_t

    init() throws {
        for path in ["/run", "/var/log/journal"] {
            mkdir(path, 0o755)
            guard mount("tmpfs", path, "tmpfs", 0, "mode=0755") == 0 else {
                throw BenchFailure(description: "mount tmpfs on \(path): \(String(cString: strerror(errno)))")
            }
        }
        try "512\n".write(toFile: "/proc/sys/net/unix/max_dgram_qlen", atomically: false, encoding: .utf8)
        // No rate limit (it would drop lines after 10,000 per 30 s: journald's cost, not
        // the daemon's), room for a gigabyte, and nothing forwarded to syslog or the console.
        let config = "/run/wk-journald.conf"
        try "[Journal]\nStorage=volatile\nRateLimitIntervalSec=0\nRuntimeMaxUse=4G\nRuntimeMaxFileSize=512M\nForwardToSyslog=no\nForwardToWall=no\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        guard mount(config, "/etc/systemd/journald.conf", nil, UInt(MS_BIND), nil) == 0 else {
            throw BenchFailure(description: "bind journald.conf: \(String(cString: strerror(errno)))")
        }
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/lib/systemd/systemd-journald"), nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        guard posix_spawn(&child, "/lib/systemd/systemd-journald", nil, nil, argv, environ) == 0 else {
            throw BenchFailure(description: "unable to start /lib/systemd/systemd-journald")
        }
        pid = child
        let deadline = now() + 10_000_000_000
        while access("/run/systemd/journal/stdout", F_OK) != 0 {
            guard now() < deadline else { throw BenchFailure(description: "journald did not create its sockets") }
            usleep(20_000)
        }
    }

    var cpuSeconds: Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
        return ((Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    func contains(_ matches: [String]) throws -> Bool {
        try count(matches, limit: 1) > 0
    }

    /// Entries matching all `matches`, by journalctl reading the private journal's files.
    /// (popen, not Foundation's Process: its CFSocket needs loopback, down in a new
    /// network namespace.)
    func count(_ matches: [String], limit: Int? = nil) throws -> Int {
        let command = (["/usr/bin/journalctl", "-D", "/run/log/journal", "-q", "-o", "cat", "--output-fields=SYSLOG_IDENTIFIER"]
            + (limit.map { ["-n", String($0)] } ?? []) + matches).joined(separator: " ") + " | wc -l"
        guard let stream = popen(command, "r") else { throw BenchFailure(description: "unable to run journalctl") }
        var buffer = [CChar](repeating: 0, count: 64)
        let line = fgets(&buffer, Int32(buffer.count), stream).map { String(cString: $0) } ?? ""
        pclose(stream)
        return Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }

    func stop() {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }
}
