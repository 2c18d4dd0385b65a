// The plumbing of the fleet benchmarks (FleetBenchmark.swift, FleetThroughputBenchmark.swift):
// a single-member etcd of our own, the CLI asked over a daemon's control socket, and the
// tiny C programs the benchmarks use as jobs.

import Foundation

#if canImport(Glibc)
import Glibc
#endif

// MARK: etcd

/// A single-member etcd of our own on free loopback ports, in a scratch directory on disk
/// (under /tmp) or on /dev/shm. Only this process is ever signalled.
final class BenchEtcd {
    let directory: String
    let clientPort: UInt16
    let pid: pid_t
    let storage: String
    private var stopped = false

    init(onTmpfs: Bool) throws {
        var template = Array((onTmpfs ? "/dev/shm/wk-bench-etcd-XXXXXX" : "/tmp/wk-bench-etcd-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw BenchFailure(description: "mkdtemp failed: \(String(cString: strerror(errno)))") }
        directory = String(cString: made)
        storage = (onTmpfs ? "on /dev/shm" : "on disk") + " (\(BenchEtcd.filesystem(of: directory)))"
        clientPort = try BenchEtcd.freePort()
        var peerPort = try BenchEtcd.freePort()
        while peerPort == clientPort { peerPort = try BenchEtcd.freePort() }
        let client = "http://127.0.0.1:\(clientPort)"
        let peer = "http://127.0.0.1:\(peerPort)"
        let arguments = ["/usr/bin/etcd", "--name", "bench", "--data-dir", directory + "/data",
                         "--listen-client-urls", client, "--advertise-client-urls", client,
                         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                         "--initial-cluster", "bench=\(peer)", "--initial-cluster-state", "new"]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, directory + "/etcd.log", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        let environment: [UnsafeMutablePointer<CChar>?] = (["PATH=/usr/bin:/bin"] as [String]).map { strdup($0) } + [nil]
        var child: pid_t = 0
        let result = posix_spawn(&child, "/usr/bin/etcd", &actions, nil, argv, environment)
        posix_spawn_file_actions_destroy(&actions)
        argv.forEach { free($0) }
        environment.forEach { free($0) }
        guard result == 0 else { throw BenchFailure(description: "unable to start /usr/bin/etcd: \(String(cString: strerror(result)))") }
        pid = child
    }

    var endpoint: String { "http://127.0.0.1:\(clientPort)" }

    func stop() {
        guard !stopped else { return }
        stopped = true
        kill(pid, SIGTERM)
        var status: Int32 = 0
        for _ in 0..<100 {
            if waitpid(pid, &status, WNOHANG) == pid { return cleanUp() }
            usleep(50_000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
        cleanUp()
    }

    private func cleanUp() { try? FileManager.default.removeItem(atPath: directory) }

    /// A port the kernel just gave out on 127.0.0.1, closed again for etcd to bind.
    static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchFailure(description: "socket failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw BenchFailure(description: "unable to find a free port") }
        return UInt16(bigEndian: address.sin_port)
    }

    /// The filesystem's type as stat(1) names it (statfs is not in Swift's Glibc module).
    static func filesystem(of path: String) -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/stat")
        process.arguments = ["-f", "-c", "%T", path]
        let pipe = Pipe()
        process.standardOutput = pipe
        guard (try? process.run()) != nil else { return "unknown filesystem" }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

// MARK: the CLI, and jobs in C

func cli(_ arguments: [String]) -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: releaseBinary())
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle(forWritingAtPath: "/dev/null")
    guard (try? process.run()) != nil else { return "" }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}

/// The value after `"key":` in JSON text: a number, or a string without its quotes.
func jsonValue(_ text: String, _ key: String) -> String {
    guard let range = text.range(of: "\"\(key)\":") else { return "-" }
    let rest = text[range.upperBound...]
    if rest.first == "\"" { return String(rest.dropFirst().prefix { $0 != "\"" }) }
    let value = rest.prefix { $0.isNumber || $0 == "." || $0 == "-" || $0 == "e" || $0 == "E" || $0 == "+" }
    return value.isEmpty ? String(rest.prefix(4)) : String(value)
}

/// Compiles `source` (C) with /usr/bin/cc -O2 into `directory`/`name`; returns the path.
func compileBenchProgram(_ source: String, named name: String, in directory: String) throws -> String {
    try source.write(toFile: directory + "/\(name).c", atomically: true, encoding: .utf8)
    let compiler = Process()
    compiler.executableURL = URL(fileURLWithPath: "/usr/bin/cc")
    compiler.arguments = ["-O2", "-o", directory + "/" + name, directory + "/\(name).c"]
    try compiler.run()
    compiler.waitUntilExit()
    guard compiler.terminationStatus == 0 else { throw BenchFailure(description: "cc failed on \(name).c") }
    return directory + "/" + name
}
