// Starting job processes: PATH search, credentials, and the call into the C spawn shim
// (Sources/CWatchkeeperSpawn/spawn.c, which documents what the child gets and why).
//
// The caller watches the child through its pidfd (a dispatch read source) and reaps it
// with `reap(pid:pidfd:)`; nothing here uses SIGCHLD or waitpid(-1), so other code that
// starts processes cannot steal our children's exit statuses or we theirs.

import CWatchkeeperSpawn
import CWatchkeeperSystem
#if canImport(Glibc)
import Glibc
#endif

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
    /// Give the CPU back once the child has exec'd: for a job nothing else waits behind (a
    /// file now and then), whose exec the spawning thread's work after the clone would delay
    /// on the same CPU. Not in a burst, where the spawning thread's next job should go on.
    public var yieldAfterExec = false
    /// Fork even without credentials, instead of the cheaper shared-memory clone; for
    /// tests that compare the two and for the spawn benchmark.
    public var forceFork = false
    /// Return once the child is cloned, without waiting for its exec (nowait.c), when the
    /// job runs as the daemon's user and a block is free: a step that fails in the child is
    /// then not thrown but left in `SpawnedProcess.pendingReport`, to be collected once the
    /// child has exited. For a caller that watches the exit and collects it (JobRun).
    public var reportsLater = false
    /// The job's cgroup.procs, open for writing: the child moves itself there first.
    /// nil: the child stays in the daemon's cgroup (process-group containment).
    public var cgroupProcsDescriptor: Int32?
    /// For the error message when joining fails.
    public var cgroupPath: String?
    /// A prepared child for this spawn (JobPipeReserve.takePrepared), or 0. Spent by the
    /// spawn whatever happens: used if it fits, discarded otherwise.
    var preparedTicket: UInt64 = 0
    /// The child does not exec from this instant on (checked just before its execve): a
    /// start decided under a fleet lease is not made late by a daemon stopped or starved in
    /// between. It fails at step `.execDeadline` instead, nothing of the program run.
    public var execDeadline: MonotonicInstant?
    /// argv and envp already written as C strings (the jobs queue's, JobRun); when set,
    /// `arguments` and `environment` are empty and not read.
    var strings: SpawnStrings?

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

    init(strings: SpawnStrings, workingDirectory: String?, credentials: Credentials?, standardOutput: Int32, standardError: Int32,
         progressDescriptor: Int32?, niceness: Int32) {
        self.init(arguments: [], environment: [], workingDirectory: workingDirectory, credentials: credentials, standardOutput: standardOutput,
                  standardError: standardError, progressDescriptor: progressDescriptor, niceness: niceness)
        self.strings = strings
    }
}

/// A started process and its pidfd, which closes with it (or with the read source it is
/// handed to): reap through it first.
public struct SpawnedProcess: ~Copyable, Sendable {
    public let pid: pid_t
    public let pidfd: OwnedFileDescriptor
    /// From the call into the shim until the child's execve succeeded; until it was
    /// cloned when the spawn did not wait (`pendingReport` is set).
    public let spawnToExecNanoseconds: UInt64
    /// Set when the spawn did not wait for the exec: collect it after reaping the child.
    public let pendingReport: PendingSpawnReport?
}

/// Where the report of a child spawned without waiting for its exec is kept (nowait.c)
/// until the child has exited: the step and errno of a setup step or execve that failed.
public struct PendingSpawnReport: Sendable {
    let ticket: UInt64
    /// What the message names besides the shim's own copies of the path and directory.
    let niceness: Int32
    let cgroupPath: String?

    /// Once the child has been reaped (never before: its report may still be on its way):
    /// the error the spawn would have thrown had it waited, or nil if the child exec'd
    /// (or was killed before it could report). Call once.
    public func collect() -> SpawnError? {
        var result = wk_spawn_result()
        var path: UnsafePointer<CChar>?, program: UnsafePointer<CChar>?, cwd: UnsafePointer<CChar>?
        guard wk_spawn_collect(ticket, &result, &path, &program, &cwd) == 1 else { return nil }
        defer { wk_spawn_release(ticket) }
        func bytes(_ string: UnsafePointer<CChar>?) -> [UInt8] {
            string.map { Array(UnsafeRawBufferPointer(start: $0, count: strlen($0))) } ?? []
        }
        let about = ProcessSpawner.FailedRequest(workingDirectory: cwd.map { String(cString: $0) }, credentials: nil,
                                                 niceness: niceness, cgroupPath: cgroupPath)
        return ProcessSpawner.childFailure(result, name: String(decoding: bytes(program), as: UTF8.self), path: bytes(path), request: about)
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
        // For PRIO_PROCESS and 0 (this thread) getpriority cannot fail, and 0 is the
        // kernel's default if it ever did.
        (try? niceValueOfThisThread().get()) ?? 0
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
    /// the clone (fork with credentials) and the child's setup (docs/measurements/spawn.md),
    /// unless `reportsLater` lets it return at the clone with the report still to come.
    public static func spawn(_ request: SpawnRequest) throws(SpawnError) -> SpawnedProcess {
        // A failure before the shim has it must not leave the prepared child waiting.
        var unspentTicket = request.preparedTicket
        defer { if unspentTicket != 0 { wk_prepared_discard(unspentTicket) } }
        let strings = request.strings ?? SpawnStrings(arguments: request.arguments, environment: request.environment)
        guard let program = strings.program else {
            throw SpawnError(step: .request, errorNumber: 0, description: "unable to run a job: no arguments")
        }
        // For error messages only: no String on the way to a job's exec.
        var name: String { String(decoding: program, as: UTF8.self) }
        func requestFailure(_ text: String) -> SpawnError {
            SpawnError(step: .request, errorNumber: 0, description: "unable to run \"\(name)\": \(text)")
        }
        if let index = strings.argumentWithNUL {
            throw requestFailure("argument \(index) contains a NUL byte")
        }
        if let index = strings.entryWithNUL {
            throw requestFailure("environment entry \(index) contains a NUL byte")
        }
        if let directory = request.workingDirectory, directory.utf8.contains(0) {
            throw requestFailure("the working directory contains a NUL byte")
        }

        // argv[0] with a '/' is the path as it is: nothing to search or copy.
        let searched = program.contains(UInt8(ascii: "/")) ? nil : try resolveExecutable(Array(program), name: name, searchPath: strings.searchPath)
        let cwd = request.workingDirectory.map { CStringArray([Array($0.utf8)]) }
        let groups = request.credentials?.groups ?? []
        let groupBuffer = request.credentials == nil ? nil : UnsafeMutablePointer<gid_t>.allocate(capacity: max(groups.count, 1))
        groupBuffer?.initialize(from: groups, count: groups.count)
        defer {
            cwd?.deallocate()
            groupBuffer?.deallocate()
        }

        var spec = wk_spawn_request()
        spec.cwd = cwd.map { UnsafePointer($0.pointers[0]!) }
        spec.niceness = request.niceness
        if let credentials = request.credentials {
            spec.set_credentials = 1
            spec.uid = credentials.uid
            spec.gid = credentials.gid
            spec.groups = groupBuffer.map { UnsafePointer($0) }
            spec.group_count = groups.count
        }
        spec.stdin_fd = request.standardInput ?? -1  // never left 0 by the zeroing init: that would be fd 0
        spec.stdout_fd = request.standardOutput
        spec.stderr_fd = request.standardError
        spec.extra_fd = request.progressDescriptor ?? -1
        spec.force_fork = request.forceFork ? 1 : 0
        spec.cgroup_procs_fd = request.cgroupProcsDescriptor ?? -1
        spec.yield_after_exec = request.yieldAfterExec ? 1 : 0
        spec.report_later = request.reportsLater ? 1 : 0
        spec.prepared_ticket = request.preparedTicket
        spec.exec_deadline_ns = request.execDeadline.map { max($0.nanoseconds, 1) } ?? 0
        unspentTicket = 0

        var result = wk_spawn_result()
        let start = monotonicNanoseconds()
        let rc = strings.withCStrings(path: searched) { path, argv, envp in
            spec.path = path
            spec.argv = argv
            spec.envp = envp
            return wk_spawn(&spec, &result)
        }
        let end = monotonicNanoseconds()
        guard rc == 0 else {
            let about = FailedRequest(workingDirectory: request.workingDirectory, credentials: request.credentials, niceness: request.niceness,
                                      cgroupPath: request.cgroupPath)
            throw childFailure(result, name: name, path: searched ?? Array(program), request: about)
        }
        let pending = result.report_ticket == 0 ? nil : PendingSpawnReport(ticket: result.report_ticket, niceness: request.niceness, cgroupPath: request.cgroupPath)
        return SpawnedProcess(pid: result.pid, pidfd: OwnedFileDescriptor(adopting: result.pidfd), spawnToExecNanoseconds: end &- start,
                              pendingReport: pending)
    }

    /// argv[0] with a '/' is used as given. Otherwise the first regular, executable file
    /// in the PATH wins; failing that, the first regular file, so that execve reports
    /// EACCES on it rather than a less useful "not found". Relative PATH entries are
    /// skipped: they would search the daemon's own working directory.
    static func resolveExecutable(_ program: [UInt8], name: String, searchPath: [UInt8]?) throws(SpawnError) -> [UInt8] {
        let slash = UInt8(ascii: "/")
        if program.contains(slash) { return program }

        let searchPath = searchPath ?? Array(defaultSearchPath.utf8)
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

    /// What a failure's message names of the request.
    struct FailedRequest {
        let workingDirectory: String?
        let credentials: Credentials?
        let niceness: Int32
        let cgroupPath: String?
    }

    static func childFailure(_ result: wk_spawn_result, name: String, path: [UInt8], request: FailedRequest) -> SpawnError {
        let code = result.error
        let stepValue = UInt32(bitPattern: result.failed_step)
        let call = String(cString: wk_spawn_step_name(result.failed_step))
        let step: SpawnError.Step
        var object: String?
        switch stepValue {
        case WK_STEP_PIPE.rawValue: step = .pipe
        case WK_STEP_FORK.rawValue: step = .fork
        case WK_STEP_PIDFD.rawValue: step = .pidfd
        case WK_STEP_CGROUP.rawValue:
            step = .cgroup
            object = request.cgroupPath.map { "\($0)/cgroup.procs" }
        case WK_STEP_SIGNALS.rawValue, WK_STEP_SIGMASK.rawValue: step = .signals
        case WK_STEP_SETSID.rawValue: step = .setsid
        case WK_STEP_STDIN.rawValue: step = .stdin
        case WK_STEP_DUP.rawValue: step = .dup
        case WK_STEP_CLOSE_FDS.rawValue: step = .closeDescriptors
        case WK_STEP_NICE.rawValue:
            step = .setpriority
            object = String(request.niceness)
        case WK_STEP_NICE_LIMIT.rawValue: step = .setpriority
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
        case WK_STEP_DEADLINE.rawValue:
            return SpawnError(step: .execDeadline, errorNumber: code,
                              description: "not started: \"\(name)\" was still to exec when its start deadline passed (the daemon was stopped or starved in between)")
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

// MARK: - Exit

/// How a process ended, exactly as waitid reported it.
public enum ProcessExit: Sendable, Equatable, CustomStringConvertible {
    case exited(Int32)
    case signaled(Int32, coreDumped: Bool)

    public var description: String {
        switch self {
        case .exited(let status): "exited with status \(status)"
        case .signaled(let signal, let coreDumped): "killed by signal \(signal)" + (coreDumped ? " (core dumped)" : "")
        }
    }
}

/// Reaps a child whose pidfd became readable; nil while it still runs (or if it was
/// already reaped). Does not close the pidfd.
public func reap(pid: pid_t, pidfd: Int32) -> ProcessExit? {
    // P_PIDFD (Linux 5.4): the pidfd names this exact process even if its pid were reused.
    let idTypePIDFD = idtype_t(rawValue: UInt32(WK_P_PIDFD))
    var info = siginfo_t()
    switch nothingOrErrno({ waitid(idTypePIDFD, id_t(pidfd), &info, WEXITED | WNOHANG) }) {
    case .success: break
    case .failure(.invalidArgument): return reapByPID(pid)  // kernel without P_PIDFD
    case .failure: return nil
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
    guard case .success(pid) = valueOrErrno({ waitpid(pid, &status, WNOHANG) }) else { return nil }
    if wk_wifsignaled(status) != 0 { return .signaled(wk_wtermsig(status), coreDumped: wk_wcoredump(status) != 0) }
    return .exited(wk_wexitstatus(status))
}
