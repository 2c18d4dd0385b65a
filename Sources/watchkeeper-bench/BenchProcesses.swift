// The processes the benchmarks start and read: /proc's figures for a pid and its
// descendants (state, CPU, memory), `BenchChild` (a program the bench started, its stderr
// to a file), and `report` (a line printed and flushed).

import Foundation

#if canImport(Glibc)
import Glibc
#endif

struct ProcessStat {
    let state: Character
    let parent: pid_t
    let cpuTicks: UInt64
}

func readProcessStat(_ pid: pid_t) -> ProcessStat? {
    guard pid > 0, let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = text.lastIndex(of: ")") else { return nil }
    // After "pid (comm) ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    let fields = text[text.index(close, offsetBy: 2)...].split(separator: " ")
    guard fields.count > 12, let state = fields[0].first, let parent = pid_t(fields[1]) else { return nil }
    return ProcessStat(state: state, parent: parent, cpuTicks: (UInt64(fields[11]) ?? 0) + (UInt64(fields[12]) ?? 0))
}

func processAlive(_ pid: pid_t) -> Bool {
    guard let stat = readProcessStat(pid) else { return false }
    return stat.state != "Z" && stat.state != "X"
}

func processName(_ pid: pid_t) -> String {
    ((try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Every live process below `root`, from /proc's parent links.
func descendants(of root: pid_t) -> [pid_t] {
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
struct ProcessMemory {
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

func cString(_ text: String) -> UnsafeMutablePointer<CChar>? { strdup(text) }

/// A process this benchmark started: stdin on /dev/null, stdout on /dev/null or the write
/// end `stdout` of a pipe the bench reads, stderr to a file.
final class BenchChild {
    let name: String
    let pid: pid_t
    let stderrPath: String
    private var reaped = false

    init(name: String, arguments: [String], environment: [String], stderrPath: String, stdout: Int32? = nil) throws {
        self.name = name
        self.stderrPath = stderrPath
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if let stdout {
            posix_spawn_file_actions_adddup2(&actions, stdout, 1)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
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
func report(_ line: String) {
    print(line)
    fflush(nil)
}
