#if canImport(XCTest)
import Foundation
import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// What a short command run by a test said and how it ended.
public struct CommandResult: CustomStringConvertible {
    /// The exit code, 128+signal if it was killed, or nil if it was still running at its
    /// deadline (it was killed then).
    public let status: Int32?
    public let stdout: String
    public let stderr: String

    public var succeeded: Bool { status == 0 }
    public var timedOut: Bool { status == nil }

    public var description: String {
        "\(status.map { "exit status \($0)" } ?? "killed at its deadline"); stdout: \(stdout); stderr: \(stderr)"
    }
}

/// Runs `arguments` (the first one a path, not looked up in PATH) with `environment`,
/// reading its stdout and stderr through pipes as it writes them, and kills it if it has not
/// ended after `timeout` seconds (times `testDeadlineScale`).
///
/// posix_spawn rather than Foundation's Process: Process reaps on a thread of its own that
/// waits for one child at a time, so a long-lived child (an etcd member) started with it held
/// up the reaping of every short one after it.
public func runCommand(
    _ arguments: [String], environment: [String: String] = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"],
    timeout: TimeInterval
) -> CommandResult {
    // pipe2 with O_CLOEXEC is not in Glibc's module map; set right after, another thread's
    // child may inherit a write end, which is why the loop below stops at the exit, not EOF.
    var outPipe: [Int32] = [-1, -1]
    var errPipe: [Int32] = [-1, -1]
    guard pipe(&outPipe) == 0, pipe(&errPipe) == 0 else {
        return CommandResult(status: 127, stdout: "", stderr: "unable to create a pipe: \(String(cString: strerror(errno)))")
    }
    for descriptor in outPipe + errPipe { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
    let pid: pid_t
    do {
        pid = try spawnChild(arguments, environment: environment, stdout: .descriptor(outPipe[1]), stderr: .descriptor(errPipe[1]))
    } catch {
        [outPipe[0], outPipe[1], errPipe[0], errPipe[1]].forEach { close($0) }
        return CommandResult(status: 127, stdout: "", stderr: "\(error)")
    }
    close(outPipe[1])
    close(errPipe[1])
    defer { close(outPipe[0]); close(errPipe[0]) }

    var output: [Int32: [UInt8]] = [outPipe[0]: [], errPipe[0]: []]
    var open = [outPipe[0], errPipe[0]]
    let deadline = MonotonicInstant.now + .seconds(timeout * testDeadlineScale)
    var status: Int32?
    var exited = false  // and reaped
    var buffer = [UInt8](repeating: 0, count: 65_536)
    // Until the child has exited and its pipes are empty (or closed), or the deadline.
    while !open.isEmpty {
        if !exited, let code = reapIfEnded(pid) {
            status = code
            exited = true
        }
        let now = MonotonicInstant.now
        if now >= deadline && !exited {
            kill(pid, SIGKILL)
            var ignored: Int32 = 0
            while waitpid(pid, &ignored, 0) < 0 && errno == EINTR {}
            status = nil
            exited = true
            break
        }
        var descriptors = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        let wait = exited ? 0 : min(50, max(1, Int32(clamping: (deadline.nanoseconds - now.nanoseconds) / 1_000_000)))
        let ready = poll(&descriptors, nfds_t(descriptors.count), wait)
        if ready < 0 && errno != EINTR { break }
        if ready == 0 && exited { break }
        for descriptor in descriptors where descriptor.revents != 0 {
            let count = read(descriptor.fd, &buffer, buffer.count)
            if count > 0 {
                output[descriptor.fd]!.append(contentsOf: buffer[0..<count])
            } else if count == 0 || (errno != EINTR && errno != EAGAIN) {
                open.removeAll { $0 == descriptor.fd }
            }
        }
    }
    if !exited {
        // Both pipes closed before the exit was seen.
        var code: Int32?
        while code == nil && MonotonicInstant.now < deadline {
            code = reapIfEnded(pid)
            if code == nil { usleep(2_000) }
        }
        if let code { status = code } else {
            kill(pid, SIGKILL)
            var ignored: Int32 = 0
            while waitpid(pid, &ignored, 0) < 0 && errno == EINTR {}
        }
    }
    return CommandResult(
        status: status,
        stdout: String(decoding: output[outPipe[0]]!, as: UTF8.self),
        stderr: String(decoding: output[errPipe[0]]!, as: UTF8.self)
    )
}

/// Why a harness could not set up what a test asked for: a sentence in the form
/// "unable to <action> <object>: <reason>".
public struct HarnessError: Error, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Where a spawned child's stdout or stderr goes.
public enum ChildOutput {
    case descriptor(Int32)
    /// Opened with O_APPEND, so a member restarted on the same log adds to it.
    case appending(String)
    case discarded
}

/// Starts `arguments` with stdin on /dev/null, an empty signal mask and default dispositions
/// (the test runner's blocked signals must not reach a server it starts).
public func spawnChild(_ arguments: [String], environment: [String: String], stdout: ChildOutput, stderr: ChildOutput) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    for (target, output) in [(Int32(1), stdout), (Int32(2), stderr)] {
        switch output {
        case .descriptor(let descriptor): posix_spawn_file_actions_adddup2(&actions, descriptor, target)
        case .appending(let path): posix_spawn_file_actions_addopen(&actions, target, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        case .discarded: posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_WRONLY, 0)
        }
    }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var empty = sigset_t()
    sigemptyset(&empty)
    var defaults = sigset_t()
    sigfillset(&defaults)
    posix_spawnattr_setsigmask(&attributes, &empty)
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    let argv = arguments.map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        argv.forEach { free($0) }
        envp.forEach { free($0) }
    }
    var pid: pid_t = 0
    let result = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, envp)
    guard result == 0 else {
        throw HarnessError("unable to start \(arguments[0]): \(String(cString: strerror(result)))")
    }
    return pid
}

/// The exit code (128+signal if killed) if `pid` has ended, collecting it; nil if it runs.
func reapIfEnded(_ pid: pid_t) -> Int32? {
    var status: Int32 = 0
    var result: pid_t
    repeat { result = waitpid(pid, &status, WNOHANG) } while result < 0 && errno == EINTR
    guard result == pid else { return result < 0 ? -1 : nil }
    return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
}
#endif
