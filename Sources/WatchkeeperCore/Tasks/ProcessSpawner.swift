// Starting job processes: PATH search, credentials, and the call into the C spawn shim
// (Sources/CWatchkeeperSpawn/spawn.c, which documents what the child gets and why).
//
// The caller watches the child through its pidfd (a dispatch read source) and reaps it
// with `reap(pid:pidfd:)`; nothing here uses SIGCHLD or waitpid(-1), so other code that
// starts processes cannot steal our children's exit statuses or we theirs.

import CWatchkeeperSpawn
#if canImport(Glibc)
import Glibc
#endif

/// Why a process could not be started, or credentials could not be resolved.
public struct SpawnError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What failed. Child-side steps happen between clone/fork and execve.
    public enum Step: Sendable, Equatable {
        /// The request itself: no arguments, or a NUL byte in an argument.
        case request
        /// PATH search for a program name without a '/'.
        case search
        /// User or group lookup.
        case lookup
        case pipe, fork, pidfd, report
        case signals, setsid, stdin, dup, closeDescriptors
        case setpriority
        case setgroups, setgid, setuid, chdir, execve
    }

    public let step: Step
    /// The errno of the failed call; 0 when no system call failed (unknown user, no arguments).
    public let errorNumber: Int32
    public let description: String

    public init(step: Step, errorNumber: Int32, description: String) {
        self.step = step
        self.errorNumber = errorNumber
        self.description = description
    }
}

private func errorText(_ code: Int32) -> String {
    String(cString: strerror(code))
}

// MARK: - Credentials

/// Who a job runs as: applied in the child with setgroups, setgid, setuid (in that order).
public struct Credentials: Sendable, Equatable {
    public var uid: uid_t
    public var gid: gid_t
    /// Supplementary groups, replacing the daemon's (root's) entirely.
    public var groups: [gid_t]
    /// The passwd name, when the user has one.
    public var userName: String?

    public init(uid: uid_t, gid: gid_t, groups: [gid_t], userName: String? = nil) {
        self.uid = uid
        self.gid = gid
        self.groups = groups
        self.userName = userName
    }

    /// Resolves user and/or group names or numeric ids.
    ///
    /// - The group defaults to the user's primary group; supplementary groups are the
    ///   user's memberships (getgrouplist) with the chosen group as the base.
    /// - A numeric user without a passwd entry is accepted only with a group, since there
    ///   is no primary group to take.
    /// - With only a group, the uid stays the daemon's and the supplementary groups are
    ///   just that group.
    public static func lookup(user: String?, group: String?) throws(SpawnError) -> Credentials {
        if user == nil && group == nil {
            throw lookupFailure("unable to look up credentials: neither a user nor a group was given")
        }

        var uid = getuid()
        var primaryGroup: gid_t?
        var userName: String?
        if let user {
            if let entry = try passwdEntry(for: user) {
                uid = entry.uid
                primaryGroup = entry.gid
                userName = entry.name
            } else if let number = numericID(user), group != nil {
                uid = number
            } else if numericID(user) != nil {
                throw lookupFailure("unknown user \"\(user)\" (no passwd entry, so a group must be given too)")
            } else {
                throw lookupFailure("unknown user \"\(user)\"")
            }
        }

        let gid: gid_t
        if let group {
            gid = try groupID(for: group)
        } else if let primaryGroup {
            gid = primaryGroup
        } else {
            // Unreachable: a user without an entry needs a group (checked above).
            throw lookupFailure("unable to look up credentials: no group for user \"\(user ?? "")\"")
        }

        let groups = try userName.map { name throws(SpawnError) in try groupList(user: name, base: gid) } ?? [gid]
        return Credentials(uid: uid, gid: gid, groups: groups, userName: userName)
    }

    private static func lookupFailure(_ text: String, errorNumber: Int32 = 0) -> SpawnError {
        SpawnError(step: .lookup, errorNumber: errorNumber, description: text)
    }

    private static func numericID(_ text: String) -> UInt32? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return UInt32(text)
    }

    /// Errors other than "not found" (which getpwnam_r reports as 0, ENOENT or ESRCH
    /// depending on the NSS module) are real failures: the NSS backend is unreachable.
    private static func isNotFound(_ code: Int32) -> Bool {
        code == 0 || code == ENOENT || code == ESRCH
    }

    private static func passwdEntry(for user: String) throws(SpawnError) -> (name: String, uid: uid_t, gid: gid_t)? {
        var size = 1024
        while true {
            var entry = passwd()
            var found: UnsafeMutablePointer<passwd>?
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            let code: Int32
            if let number = numericID(user) {
                code = getpwuid_r(number, &entry, buffer, size, &found)
            } else {
                code = getpwnam_r(user, &entry, buffer, size, &found)
            }
            if code == ERANGE && size < 1 << 20 {
                size *= 2
                continue
            }
            if let found {
                return (String(cString: found.pointee.pw_name), found.pointee.pw_uid, found.pointee.pw_gid)
            }
            if isNotFound(code) { return nil }
            throw lookupFailure("unable to look up user \"\(user)\": \(errorText(code))", errorNumber: code)
        }
    }

    private static func groupID(for group: String) throws(SpawnError) -> gid_t {
        if let number = numericID(group) { return number }
        var size = 1024
        while true {
            var entry = Glibc.group()
            var found: UnsafeMutablePointer<Glibc.group>?
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            let code = getgrnam_r(group, &entry, buffer, size, &found)
            if code == ERANGE && size < 1 << 20 {
                size *= 2
                continue
            }
            if let found { return found.pointee.gr_gid }
            if isNotFound(code) { throw lookupFailure("unknown group \"\(group)\"") }
            throw lookupFailure("unable to look up group \"\(group)\": \(errorText(code))", errorNumber: code)
        }
    }

    private static func groupList(user: String, base: gid_t) throws(SpawnError) -> [gid_t] {
        var count: Int32 = 32
        while true {
            var groups = [gid_t](repeating: 0, count: Int(count))
            var found = count
            if getgrouplist(user, base, &groups, &found) >= 0 {
                return Array(groups.prefix(Int(found)))
            }
            // -1 with `found` set to the number needed (glibc); guard against a libc that
            // does not update it.
            if found <= count {
                if count >= 65536 {
                    throw lookupFailure("unable to look up the groups of user \"\(user)\": more than 65536")
                }
                count *= 2
            } else {
                count = found
            }
        }
    }
}

// MARK: - Request and result

public struct SpawnRequest: Sendable {
    /// argv, byte-exact (any bytes but NUL). argv[0] without a '/' is searched in the PATH
    /// of `environment`, or in `defaultSearchPath`; with a '/' but relative, it is relative
    /// to `workingDirectory`.
    public var arguments: [[UInt8]]
    /// The child's whole environment ("KEY=value"); nothing is inherited from the daemon.
    public var environment: [[UInt8]]
    /// nil: the daemon's working directory.
    public var workingDirectory: String?
    /// nil: the daemon's own (root's) credentials.
    public var credentials: Credentials?
    /// Installed as fd 0 in the child; nil: /dev/null. The caller keeps (and closes) its copy.
    public var standardInput: Int32?
    /// Installed as fd 1 and 2 in the child; the caller keeps (and closes) its copies.
    public var standardOutput: Int32
    public var standardError: Int32
    /// Installed as fd 3 in the child.
    public var progressDescriptor: Int32?
    /// The child's nice value, set in the child before exec (and before the credentials
    /// change). Absolute, not relative to the spawning thread's: see `ProcessSpawner.baseNiceness`.
    public var niceness: Int32
    /// Fork even without credentials, instead of the cheaper shared-memory clone; for
    /// tests that compare the two and for the spawn benchmark.
    public var forceFork = false

    public init(
        arguments: [[UInt8]], environment: [[UInt8]], workingDirectory: String? = nil,
        credentials: Credentials? = nil, standardOutput: Int32, standardError: Int32,
        progressDescriptor: Int32? = nil, niceness: Int32 = ProcessSpawner.baseNiceness
    ) {
        self.arguments = arguments
        self.environment = environment
        self.workingDirectory = workingDirectory
        self.credentials = credentials
        self.standardOutput = standardOutput
        self.standardError = standardError
        self.progressDescriptor = progressDescriptor
        self.niceness = niceness
    }
}

/// A started process. The caller owns `pidfd` and closes it after reaping.
public struct SpawnedProcess: Sendable {
    public let pid: pid_t
    public let pidfd: Int32
    /// From the call into the shim until the child's execve succeeded.
    public let spawnToExecNanoseconds: UInt64

    public init(pid: pid_t, pidfd: Int32, spawnToExecNanoseconds: UInt64) {
        self.pid = pid
        self.pidfd = pidfd
        self.spawnToExecNanoseconds = spawnToExecNanoseconds
    }
}

// MARK: - Spawning

public enum ProcessSpawner {
    /// Used when the request's environment has no PATH (the same as systemd's default).
    public static let defaultSearchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    /// The daemon's nice value as it started: what every job gets unless it asks for less
    /// CPU. Read once, on first use, from the calling thread, because on Linux the nice
    /// value is per thread and libdispatch's workers need not share the main thread's.
    /// The daemon must therefore read it on its main thread before any worker thread
    /// exists, by calling `captureBaseNiceness()` first thing in main.
    public static let baseNiceness: Int32 = {
        // getpriority returns the nice value itself, so -1 is a valid answer; only errno
        // tells a failure apart. For PRIO_PROCESS and 0 (this thread) it cannot fail, and
        // 0 is the kernel's default if it ever did.
        errno = 0
        let value = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        return errno == 0 ? value : 0
    }()

    /// Fixes `baseNiceness` now, on this thread; returns it. Call at the top of main,
    /// before anything starts a thread or a dispatch queue.
    @discardableResult
    public static func captureBaseNiceness() -> Int32 {
        baseNiceness
    }

    /// The nice value for a job of this priority: `baseNiceness`, or 10 more (at most 19,
    /// the kernel's limit) for a low-priority job, as for a batch job.
    public static func niceness(for priority: JobPriority) -> Int32 {
        priority == .low ? min(baseNiceness + 10, 19) : baseNiceness
    }

    /// Starts the process and returns once it has exec'd, or throws naming the step that
    /// failed (`unable to run "x": chdir /srv/x: No such file or directory`). Blocks for
    /// the clone (fork with credentials) and the child's setup (docs/measurements/spawn.md).
    public static func spawn(_ request: SpawnRequest) throws(SpawnError) -> SpawnedProcess {
        guard let program = request.arguments.first else {
            throw SpawnError(step: .request, errorNumber: 0, description: "unable to run a job: no arguments")
        }
        let name = String(decoding: program, as: UTF8.self)
        func requestFailure(_ text: String) -> SpawnError {
            SpawnError(step: .request, errorNumber: 0, description: "unable to run \"\(name)\": \(text)")
        }
        if let index = request.arguments.firstIndex(where: { $0.contains(0) }) {
            throw requestFailure("argument \(index) contains a NUL byte")
        }
        if let index = request.environment.firstIndex(where: { $0.contains(0) }) {
            throw requestFailure("environment entry \(index) contains a NUL byte")
        }
        if let directory = request.workingDirectory, directory.utf8.contains(0) {
            throw requestFailure("the working directory contains a NUL byte")
        }

        let path = try resolveExecutable(program, name: name, environment: request.environment)

        let pathString = CStringArray([path])
        let argv = CStringArray(request.arguments)
        let envp = CStringArray(request.environment)
        let cwd = request.workingDirectory.map { CStringArray([Array($0.utf8)]) }
        let groups = request.credentials?.groups ?? []
        let groupBuffer = UnsafeMutablePointer<gid_t>.allocate(capacity: max(groups.count, 1))
        groupBuffer.initialize(from: groups, count: groups.count)
        defer {
            pathString.deallocate()
            argv.deallocate()
            envp.deallocate()
            cwd?.deallocate()
            groupBuffer.deallocate()
        }

        var spec = wk_spawn_request()
        spec.path = UnsafePointer(pathString.pointers[0])
        spec.argv = UnsafePointer(argv.pointers)
        spec.envp = UnsafePointer(envp.pointers)
        spec.cwd = cwd.map { UnsafePointer($0.pointers[0]!) }
        spec.niceness = request.niceness
        if let credentials = request.credentials {
            spec.set_credentials = 1
            spec.uid = credentials.uid
            spec.gid = credentials.gid
            spec.groups = UnsafePointer(groupBuffer)
            spec.group_count = groups.count
        }
        spec.stdin_fd = request.standardInput ?? -1  // never left 0 by the zeroing init: that would be fd 0
        spec.stdout_fd = request.standardOutput
        spec.stderr_fd = request.standardError
        spec.extra_fd = request.progressDescriptor ?? -1
        spec.force_fork = request.forceFork ? 1 : 0

        var result = wk_spawn_result()
        let start = monotonicNanoseconds()
        let rc = wk_spawn(&spec, &result)
        let end = monotonicNanoseconds()
        guard rc == 0 else {
            throw childFailure(result, name: name, path: path, request: request)
        }
        return SpawnedProcess(pid: result.pid, pidfd: result.pidfd, spawnToExecNanoseconds: end &- start)
    }

    /// argv[0] with a '/' is used as given. Otherwise the first regular, executable file
    /// in the PATH wins; failing that, the first regular file, so that execve reports
    /// EACCES on it rather than a less useful "not found". Relative PATH entries are
    /// skipped: they would search the daemon's own working directory.
    static func resolveExecutable(_ program: [UInt8], name: String, environment: [[UInt8]]) throws(SpawnError) -> [UInt8] {
        let slash = UInt8(ascii: "/")
        if program.contains(slash) { return program }

        let prefix = Array("PATH=".utf8)
        let searchPath = environment.first(where: { $0.starts(with: prefix) }).map { Array($0.dropFirst(prefix.count)) }
            ?? Array(defaultSearchPath.utf8)
        var firstNonExecutable: [UInt8]?
        if !program.isEmpty {
            for directory in searchPath.split(separator: UInt8(ascii: ":")) where directory.first == slash {
                let candidate = Array(directory) + [slash] + program
                let nulTerminated = candidate + [0]
                let isRegular = nulTerminated.withUnsafeBufferPointer { buffer -> Bool in
                    buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { path in
                        var status = stat()
                        return stat(path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFREG
                    }
                }
                guard isRegular else { continue }
                let isExecutable = nulTerminated.withUnsafeBufferPointer { buffer -> Bool in
                    buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { access($0, X_OK) == 0 }
                }
                if isExecutable { return candidate }
                if firstNonExecutable == nil { firstNonExecutable = candidate }
            }
        }
        if let firstNonExecutable { return firstNonExecutable }
        throw SpawnError(
            step: .search, errorNumber: ENOENT,
            description: "unable to find \"\(name)\" in PATH (\(String(decoding: searchPath, as: UTF8.self)))"
        )
    }

    private static func childFailure(_ result: wk_spawn_result, name: String, path: [UInt8], request: SpawnRequest) -> SpawnError {
        let code = result.error
        let stepValue = UInt32(bitPattern: result.failed_step)
        let call = String(cString: wk_spawn_step_name(result.failed_step))
        let step: SpawnError.Step
        var object: String?
        switch stepValue {
        case WK_STEP_PIPE.rawValue: step = .pipe
        case WK_STEP_FORK.rawValue: step = .fork
        case WK_STEP_PIDFD.rawValue: step = .pidfd
        case WK_STEP_SIGNALS.rawValue, WK_STEP_SIGMASK.rawValue: step = .signals
        case WK_STEP_SETSID.rawValue: step = .setsid
        case WK_STEP_STDIN.rawValue: step = .stdin
        case WK_STEP_DUP.rawValue: step = .dup
        case WK_STEP_CLOSE_FDS.rawValue: step = .closeDescriptors
        case WK_STEP_NICE.rawValue:
            step = .setpriority
            object = String(request.niceness)
        case WK_STEP_SETGROUPS.rawValue:
            step = .setgroups
            object = request.credentials.map { $0.groups.map(String.init).joined(separator: ",") }
        case WK_STEP_SETGID.rawValue:
            step = .setgid
            object = request.credentials.map { String($0.gid) }
        case WK_STEP_SETUID.rawValue:
            step = .setuid
            object = request.credentials.map { String($0.uid) }
        case WK_STEP_CHDIR.rawValue:
            step = .chdir
            object = request.workingDirectory
        case WK_STEP_EXEC.rawValue:
            step = .execve
            object = String(decoding: path, as: UTF8.self)
        default: step = .report
        }
        let callText = object.map { "\(call) \($0)" } ?? call
        return SpawnError(
            step: step, errorNumber: code,
            description: "unable to run \"\(name)\": \(callText): \(errorText(code))"
        )
    }
}

/// NUL-terminated copies of byte strings in one allocation, plus a NULL-terminated array
/// of pointers into it (argv/envp layout). Freed explicitly after the spawn returns.
private struct CStringArray {
    let pointers: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
    private let storage: UnsafeMutablePointer<CChar>

    init(_ items: [[UInt8]]) {
        let total = items.reduce(0) { $0 + $1.count + 1 }
        storage = .allocate(capacity: max(total, 1))
        pointers = .allocate(capacity: items.count + 1)
        var offset = 0
        for (index, item) in items.enumerated() {
            let start = storage + offset
            item.withUnsafeBytes { bytes in
                UnsafeMutableRawPointer(start).copyMemory(from: bytes.baseAddress ?? UnsafeRawPointer(start), byteCount: bytes.count)
            }
            start[item.count] = 0
            pointers[index] = start
            offset += item.count + 1
        }
        pointers[items.count] = nil
    }

    func deallocate() {
        storage.deallocate()
        pointers.deallocate()
    }
}

private func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
}

// MARK: - Pipes

/// A pipe whose both ends are O_CLOEXEC: a child gets a copy only through the shim's dup2,
/// so a job started concurrently never holds another job's pipe open.
public struct PipePair: Sendable {
    public let readEnd: Int32
    public let writeEnd: Int32

    /// `nonBlockingRead`: for a dispatch read source on the read end.
    public static func make(nonBlockingRead: Bool) throws(SpawnError) -> PipePair {
        var ends: [Int32] = [-1, -1]
        guard wk_pipe_cloexec(&ends) == 0 else {
            let code = errno
            throw SpawnError(step: .pipe, errorNumber: code, description: "unable to create pipe: \(errorText(code))")
        }
        if nonBlockingRead {
            let flags = fcntl(ends[0], F_GETFL)
            if flags < 0 || fcntl(ends[0], F_SETFL, flags | O_NONBLOCK) < 0 {
                let code = errno
                close(ends[0])
                close(ends[1])
                throw SpawnError(
                    step: .pipe, errorNumber: code,
                    description: "unable to make pipe non-blocking: \(errorText(code))"
                )
            }
        }
        return PipePair(readEnd: ends[0], writeEnd: ends[1])
    }
}

extension PipePair {
    /// fcntl's F_SETPIPE_SZ, which Swift's Glibc module does not import.
    static let setSizeCommand: Int32 = 1031

    /// The most a pipe can hold without CAP_SYS_RESOURCE: 1 MiB, or less where
    /// fs.pipe-max-size is lower. Read once: F_SETPIPE_SZ still checks the current limit.
    public static let largestCapacity: Int = {
        let limit = (try? readSmallFile("/proc/sys/fs/pipe-max-size"))?.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) }
        return min(1 << 20, limit ?? 1 << 20)
    }()

    /// A pipe that already holds all of `data`, its write end closed: the read end is a
    /// child's whole stdin, ending in EOF. Written before the child starts, so nothing
    /// has to feed it later; the pipe is enlarged to fit (at most `largestCapacity`).
    public static func filled(with data: [UInt8]) throws(SpawnError) -> Int32 {
        // Root could enlarge a pipe past fs.pipe-max-size; the batch budget never asks it to.
        let capacity = largestCapacity
        guard data.count <= capacity else {
            throw SpawnError(step: .stdin, errorNumber: E2BIG,
                             description: "unable to hand \(data.count) bytes to the job's stdin: a pipe holds at most \(capacity) (fs.pipe-max-size)")
        }
        let pipe = try make(nonBlockingRead: false)
        func failure(_ text: String, _ code: Int32) -> SpawnError {
            close(pipe.readEnd)
            close(pipe.writeEnd)
            return SpawnError(step: .stdin, errorNumber: code, description: text)
        }
        let flags = fcntl(pipe.writeEnd, F_GETFL)
        // Non-blocking, so that a pipe smaller than believed fails the job instead of
        // hanging the tasks queue.
        guard flags >= 0, fcntl(pipe.writeEnd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            let code = errno
            throw failure("unable to make the stdin pipe non-blocking: \(errorText(code))", code)
        }
        if data.count > 65_536 {
            let size = fcntl(pipe.writeEnd, setSizeCommand, Int32(clamping: data.count))
            guard size >= data.count else {
                let code = size < 0 ? errno : ENOSPC
                throw failure("unable to hand \(data.count) bytes to the job's stdin: a pipe holds at most \(capacity) (fs.pipe-max-size): \(errorText(code))", code)
            }
        }
        var written = 0
        while written < data.count {
            let count = data.withUnsafeBytes { write(pipe.writeEnd, $0.baseAddress! + written, data.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                let code = count < 0 ? errno : EIO
                throw failure("unable to write the job's stdin (\(written) of \(data.count) bytes written): \(errorText(code))", code)
            }
            written += count
        }
        close(pipe.writeEnd)
        return pipe.readEnd
    }
}

// MARK: - Exit

/// How a process ended, exactly as waitid reported it.
public enum ProcessExit: Sendable, Equatable, CustomStringConvertible {
    case exited(Int32)
    case signaled(Int32, coreDumped: Bool)

    public var description: String {
        switch self {
        case .exited(let status): return "exited with status \(status)"
        case .signaled(let signal, let coreDumped):
            return "killed by signal \(signal)" + (coreDumped ? " (core dumped)" : "")
        }
    }
}

/// Reaps a child whose pidfd became readable; nil while it still runs (or if it was
/// already reaped). Does not close the pidfd.
public func reap(pid: pid_t, pidfd: Int32) -> ProcessExit? {
    // P_PIDFD (Linux 5.4): the pidfd names this exact process even if its pid were reused.
    let idTypePIDFD = idtype_t(rawValue: 3)
    var info = siginfo_t()
    while waitid(idTypePIDFD, id_t(pidfd), &info, WEXITED | WNOHANG) != 0 {
        switch errno {
        case EINTR: continue
        case EINVAL: return reapByPID(pid)  // kernel without P_PIDFD
        default: return nil
        }
    }
    guard info._sifields._sigchld.si_pid != 0 else { return nil }
    let status = info._sifields._sigchld.si_status
    switch Int(info.si_code) {
    case Int(CLD_EXITED): return .exited(status)
    case Int(CLD_KILLED): return .signaled(status, coreDumped: false)
    case Int(CLD_DUMPED): return .signaled(status, coreDumped: true)
    default: return nil  // stopped/continued: not requested (no WSTOPPED/WCONTINUED)
    }
}

private func reapByPID(_ pid: pid_t) -> ProcessExit? {
    var status: Int32 = 0
    while true {
        let rc = waitpid(pid, &status, WNOHANG)
        if rc == pid { break }
        if rc < 0 && errno == EINTR { continue }
        return nil
    }
    // The W* macros are not imported into Swift; this is their glibc definition.
    let signal = status & 0x7f
    if signal == 0 { return .exited((status >> 8) & 0xff) }
    return .signaled(signal, coreDumped: status & 0x80 != 0)
}
