import Foundation
import Synchronization
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Spawns real processes and checks what they report about themselves through their
/// stdout pipe, or what /proc says about them from this side.
final class ProcessSpawnerTests: XCTestCase {
    struct Finished {
        var output: [UInt8]
        var errorOutput: [UInt8]
        var progress: [UInt8]
        var exit: ProcessExit?
    }

    static let searchPath = Array("PATH=/usr/bin:/bin".utf8)

    func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    func text(_ data: [UInt8]) -> String { String(decoding: data, as: UTF8.self) }

    /// Spawns, collects stdout/stderr/progress until EOF, waits for the pidfd and reaps.
    func run(
        _ arguments: [[UInt8]], environment: [[UInt8]] = [searchPath], workingDirectory: String? = nil,
        credentials: Credentials? = nil, withProgress: Bool = false, forceFork: Bool = false, execDeadline: MonotonicInstant? = nil
    ) throws -> Finished {
        let output = try OwnedPipe().releaseEnds()
        let errorOutput = try OwnedPipe().releaseEnds()
        let progress = withProgress ? try OwnedPipe().releaseEnds() : nil
        defer {
            close(output.readEnd)
            close(errorOutput.readEnd)
            if let progress { close(progress.readEnd) }
        }
        var request = SpawnRequest(
            arguments: arguments, environment: environment, workingDirectory: workingDirectory,
            credentials: credentials, standardOutput: output.writeEnd, standardError: errorOutput.writeEnd,
            progressDescriptor: progress?.writeEnd
        )
        request.forceFork = forceFork
        request.execDeadline = execDeadline
        // The child has its copies of the write ends once spawned; ours close either way.
        func spawnThenCloseWriteEnds() throws -> SpawnedProcess {
            defer {
                close(output.writeEnd)
                close(errorOutput.writeEnd)
                if let progress { close(progress.writeEnd) }
            }
            return try ProcessSpawner.spawn(request)
        }
        let spawned = try spawnThenCloseWriteEnds()

        var finished = Finished(output: [], errorOutput: [], progress: [], exit: nil)
        finished.output = try readToEnd(output.readEnd)
        finished.errorOutput = try readToEnd(errorOutput.readEnd)
        if let progress { finished.progress = try readToEnd(progress.readEnd) }
        XCTAssertTrue(waitReadable(spawned.pidfd.rawValue, milliseconds: 10_000), "child did not exit")
        finished.exit = reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue)
        return finished
    }

    struct Timeout: Error {}

    func readToEnd(_ fd: Int32, milliseconds: Int32 = 10_000) throws -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            guard waitReadable(fd, milliseconds: milliseconds) else { throw Timeout() }
            let count = read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            XCTAssertGreaterThanOrEqual(count, 0, "read: \(String(cString: strerror(errno)))")
            if count <= 0 { return result }
            result += buffer[0..<count]
        }
    }

    func readLine(_ fd: Int32) throws -> String {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            guard waitReadable(fd, milliseconds: 10_000) else { throw Timeout() }
            let count = read(fd, &byte, 1)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 || byte == UInt8(ascii: "\n") { return text(line) }
            line.append(byte)
        }
    }

    func waitReadable(_ fd: Int32, milliseconds: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while true {
            let ready = poll(&entry, 1, milliseconds)
            if ready < 0 && errno == EINTR { continue }
            return ready > 0
        }
    }

    func openDescriptors(of pid: pid_t) throws -> [Int32] {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").compactMap { Int32($0) }.sorted()
    }

    /// The child's descriptors once they match `expected`, or after 5 s whatever they are:
    /// right after execve the dynamic loader still opens and closes ld.so.cache and
    /// libraries, while an inherited descriptor would stay for good.
    func settledDescriptors(of pid: pid_t, expected: [Int32]) throws -> [Int32] {
        var descriptors = try openDescriptors(of: pid)
        for _ in 0..<500 where descriptors != expected {
            usleep(10_000)
            descriptors = try openDescriptors(of: pid)
        }
        return descriptors
    }

    func link(_ path: String) -> String? {
        try? FileManager.default.destinationOfSymbolicLink(atPath: path)
    }

    func statusField(_ name: String, in status: String) -> UInt64? {
        for line in status.split(separator: "\n") where line.hasPrefix(name + ":") {
            return UInt64(line.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces), radix: 16)
        }
        return nil
    }

    // MARK: argv and environment

    func testArguments_reachTheChildByteExact() throws {
        let arguments: [[UInt8]] = [
            bytes("with spaces"), bytes("\"double\" 'single'"), bytes("$(echo no) `echo no` $HOME"),
            bytes("*"), bytes("line one\nline two"), bytes("--leading-dashes"), bytes("-"),
            [0xff, 0xfe, 0x41], [],
        ]
        let finished = try run([bytes("/bin/sh"), bytes("-c"), bytes("printf '%s\\0' \"$@\""), bytes("sh")] + arguments)
        XCTAssertEqual(finished.exit, .exited(0))
        XCTAssertEqual(finished.output, arguments.flatMap { $0 + [0] })
    }

    func testArguments_reachPythonByteExact() throws {
        let python = "/usr/bin/python3"
        try XCTSkipUnless(access(python, X_OK) == 0, "\(python) is not installed")
        let arguments: [[UInt8]] = [bytes("a b"), bytes("\n"), bytes("--x"), [0xff, 0xfe], [], bytes("`*`")]
        let script = "import sys,os; sys.stdout.buffer.write(b'\\0'.join(os.fsencode(a) for a in sys.argv[1:]))"
        let finished = try run([bytes(python), bytes("-c"), bytes(script)] + arguments)
        XCTAssertEqual(finished.exit, .exited(0), text(finished.errorOutput))
        XCTAssertEqual(finished.output, Array(arguments.map { $0 }.joined(separator: [0])))
    }

    func testArgumentWithNulByte_isRejectedBeforeSpawning() {
        XCTAssertThrowsError(try run([bytes("/bin/true"), [0x61, 0, 0x62]])) { error in
            XCTAssertEqual((error as? SpawnError)?.step, .request)
            XCTAssertEqual("\(error)", "unable to run \"/bin/true\": argument 1 contains a NUL byte")
        }
    }

    func testEnvironment_isExactlyTheGivenOneWithNothingInherited() throws {
        setenv("WATCHKEEPER_TEST_MUST_NOT_LEAK", "1", 1)
        defer { unsetenv("WATCHKEEPER_TEST_MUST_NOT_LEAK") }
        let environment: [[UInt8]] = [bytes("B=two words"), bytes("A=1"), bytes("EMPTY="), bytes("RAW=") + [0xff, 0x0a]]
        let finished = try run([bytes("/usr/bin/env")], environment: environment)
        XCTAssertEqual(finished.exit, .exited(0))
        XCTAssertEqual(finished.output, environment.flatMap { $0 + [0x0a] })
    }

    // MARK: signals, session, descriptors

    func testChild_hasEmptyMaskAndDefaultDispositions_evenWhenTheSpawningThreadBlocksAndIgnores() throws {
        var blocked = sigset_t()
        sigemptyset(&blocked)
        for signal in [SIGUSR1, SIGHUP, SIGTERM, SIGINT] { sigaddset(&blocked, signal) }
        var previousMask = sigset_t()
        XCTAssertEqual(pthread_sigmask(SIG_BLOCK, &blocked, &previousMask), 0)
        let previousPipeHandler = signal(SIGPIPE, SIG_IGN)
        defer {
            pthread_sigmask(SIG_SETMASK, &previousMask, nil)
            signal(SIGPIPE, previousPipeHandler)
        }
        // The premise: this thread really has them blocked and SIGPIPE ignored.
        let own = try String(contentsOfFile: "/proc/thread-self/status", encoding: .utf8)
        let ownBlocked = try XCTUnwrap(statusField("SigBlk", in: own))
        let ownIgnored = try XCTUnwrap(statusField("SigIgn", in: own))
        for signal in [SIGUSR1, SIGHUP, SIGTERM, SIGINT] {
            XCTAssertNotEqual(ownBlocked & (1 << UInt64(signal - 1)), 0, "signal \(signal) not blocked here")
        }
        XCTAssertNotEqual(ownIgnored & (1 << UInt64(SIGPIPE - 1)), 0)

        // cat is the exec'd child, so /proc/self/status is the child's own.
        let finished = try run([bytes("/bin/cat"), bytes("/proc/self/status")])
        XCTAssertEqual(finished.exit, .exited(0))
        let status = text(finished.output)
        XCTAssertEqual(statusField("SigBlk", in: status), 0, status)
        XCTAssertEqual(statusField("SigIgn", in: status), 0, status)
        XCTAssertEqual(statusField("SigPnd", in: status), 0, status)
    }

    func testChild_isSessionLeaderOfItsOwnProcessGroup() throws {
        let output = try OwnedPipe().releaseEnds()
        defer { close(output.readEnd) }
        let spawned = try ProcessSpawner.spawn(SpawnRequest(
            arguments: [bytes("/bin/cat"), bytes("/proc/self/stat")], environment: [],
            standardOutput: output.writeEnd, standardError: output.writeEnd
        ))
        close(output.writeEnd)
        let stat = text(try readToEnd(output.readEnd))
        XCTAssertTrue(waitReadable(spawned.pidfd.rawValue, milliseconds: 10_000))
        XCTAssertEqual(reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue), .exited(0))

        // pid (comm) state ppid pgrp session ...
        let afterName = try XCTUnwrap(stat.range(of: ")", options: .backwards)).upperBound
        let fields = stat[afterName...].split(separator: " ")
        XCTAssertEqual(Int32(fields[1]), getpid(), "parent")
        XCTAssertEqual(Int32(fields[2]), spawned.pid, "process group")
        XCTAssertEqual(Int32(fields[3]), spawned.pid, "session")
    }

    /// A job nothing else waits behind is spawned with a yield once it has exec'd: the spawn
    /// still returns only after the exec (the process is the new program), with its pidfd.
    func testASpawnThatYieldsAfterTheExec_returnsOnceTheChildIsTheNewProgram() throws {
        let output = try OwnedPipe().releaseEnds()
        defer { close(output.readEnd); close(output.writeEnd) }
        var request = SpawnRequest(arguments: [bytes("/bin/sleep"), bytes("30")], environment: [],
                                   standardOutput: output.writeEnd, standardError: output.writeEnd)
        request.yieldAfterExec = true
        let spawned = try ProcessSpawner.spawn(request)
        defer {
            kill(spawned.pid, SIGKILL)
            _ = waitReadable(spawned.pidfd.rawValue, milliseconds: 10_000)
            _ = reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue)
        }
        XCTAssertEqual(link("/proc/\(spawned.pid)/exe")?.split(separator: "/").last, "sleep")
        XCTAssertGreaterThanOrEqual(spawned.pidfd.rawValue, 0)
    }

    func testChild_hasOnlyDescriptors0To2_andStdinIsDevNull() throws {
        // Not close-on-exec in this process, so only the child's close_range removes it.
        let inheritable = open("/dev/null", O_RDONLY)
        XCTAssertGreaterThanOrEqual(inheritable, 0)
        defer { close(inheritable) }
        let output = try OwnedPipe().releaseEnds()
        defer { close(output.readEnd); close(output.writeEnd) }

        let spawned = try ProcessSpawner.spawn(SpawnRequest(
            arguments: [bytes("/bin/sleep"), bytes("30")], environment: [],
            standardOutput: output.writeEnd, standardError: output.writeEnd
        ))
        defer {
            kill(spawned.pid, SIGKILL)
            _ = waitReadable(spawned.pidfd.rawValue, milliseconds: 10_000)
            _ = reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue)
        }
        // spawn returns after execve, so this is sleep's own table.
        XCTAssertEqual(try settledDescriptors(of: spawned.pid, expected: [0, 1, 2]), [0, 1, 2])
        XCTAssertEqual(link("/proc/\(spawned.pid)/fd/0"), "/dev/null")
        // Read-only, as every job's fd 0 has been: the /dev/null the daemon keeps for all
        // jobs (spawn.c) is opened O_RDONLY, so no job can write through it.
        let flags = try String(contentsOfFile: "/proc/\(spawned.pid)/fdinfo/0", encoding: .utf8)
            .split(separator: "\n").first { $0.hasPrefix("flags:") }
            .flatMap { Int($0.dropFirst("flags:".count).trimmingCharacters(in: .whitespaces), radix: 8) }
        XCTAssertEqual(flags.map { $0 & Int(O_ACCMODE) }, Int(O_RDONLY))
        XCTAssertEqual(link("/proc/\(spawned.pid)/fd/1"), link("/proc/self/fd/\(output.writeEnd)"))
        XCTAssertEqual(link("/proc/\(spawned.pid)/fd/2"), link("/proc/self/fd/\(output.writeEnd)"))
    }

    func testProgressDescriptor_becomesDescriptor3AndNothingElseIsAdded() throws {
        let output = try OwnedPipe().releaseEnds()
        let progress = try OwnedPipe.forJobOutput().releaseEnds()
        defer { close(output.readEnd); close(output.writeEnd); close(progress.readEnd); close(progress.writeEnd) }
        let spawned = try ProcessSpawner.spawn(SpawnRequest(
            arguments: [bytes("/bin/sleep"), bytes("30")], environment: [],
            standardOutput: output.writeEnd, standardError: output.writeEnd, progressDescriptor: progress.writeEnd
        ))
        defer {
            kill(spawned.pid, SIGKILL)
            _ = waitReadable(spawned.pidfd.rawValue, milliseconds: 10_000)
            _ = reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue)
        }
        XCTAssertEqual(try settledDescriptors(of: spawned.pid, expected: [0, 1, 2, 3]), [0, 1, 2, 3])
        XCTAssertEqual(link("/proc/\(spawned.pid)/fd/3"), link("/proc/self/fd/\(progress.writeEnd)"))
    }

    func testProgressDescriptor_carriesWhatTheChildWritesToFd3() throws {
        let finished = try run(
            [bytes("/bin/sh"), bytes("-c"), bytes("echo out; echo err >&2; echo '50%' >&3")], withProgress: true
        )
        XCTAssertEqual(finished.exit, .exited(0))
        XCTAssertEqual(text(finished.output), "out\n")
        XCTAssertEqual(text(finished.errorOutput), "err\n")
        XCTAssertEqual(text(finished.progress), "50%\n")
    }

    func testStandardStreams_goToTheirPipes_evenWhenTheSourcesAreDescriptors1And2Swapped() throws {
        let output = try OwnedPipe().releaseEnds()
        let errorOutput = try OwnedPipe().releaseEnds()
        defer { close(output.readEnd); close(errorOutput.readEnd) }

        // Our fd 2 becomes the output pipe and fd 1 the error pipe, then the child is asked
        // for stdout = 2 and stderr = 1: a naive dup2(2, 1); dup2(1, 2) sends both to one pipe.
        let savedOut = dup(1)
        let savedErr = dup(2)
        dup2(output.writeEnd, 2)
        dup2(errorOutput.writeEnd, 1)
        let spawned = Result<SpawnedProcess, SpawnError>(catching: { () throws(SpawnError) -> SpawnedProcess in
            try ProcessSpawner.spawn(SpawnRequest(
                arguments: [bytes("/bin/sh"), bytes("-c"), bytes("echo out; echo err >&2")], environment: [],
                standardOutput: 2, standardError: 1
            ))
        })
        dup2(savedOut, 1)
        dup2(savedErr, 2)
        close(savedOut)
        close(savedErr)
        close(output.writeEnd)
        close(errorOutput.writeEnd)

        let process = try spawned.get()
        XCTAssertEqual(text(try readToEnd(output.readEnd)), "out\n")
        XCTAssertEqual(text(try readToEnd(errorOutput.readEnd)), "err\n")
        XCTAssertTrue(waitReadable(process.pidfd.rawValue, milliseconds: 10_000))
        XCTAssertEqual(reap(pid: process.pid, pidfd: process.pidfd.rawValue), .exited(0))
    }

    // MARK: working directory, program search, exec errors

    func testWorkingDirectory_isApplied() throws {
        let directory = try makeScratchDirectory()
        let expected = try XCTUnwrap(realpath(directory, nil).map { pointer in
            defer { free(pointer) }
            return String(cString: pointer)
        })
        let finished = try run([bytes("/bin/pwd"), bytes("-P")], workingDirectory: directory)
        XCTAssertEqual(finished.exit, .exited(0))
        XCTAssertEqual(text(finished.output), expected + "\n")
    }

    func testMissingWorkingDirectory_failsNamingChdirAndThePath() {
        XCTAssertThrowsError(try run([bytes("/bin/true")], workingDirectory: "/srv/wk-missing-directory")) { error in
            let spawnError = error as? SpawnError
            XCTAssertEqual(spawnError?.step, .chdir)
            XCTAssertEqual(spawnError?.errorNumber, ENOENT)
            XCTAssertEqual(
                "\(error)", "unable to run \"/bin/true\": chdir /srv/wk-missing-directory: No such file or directory"
            )
        }
    }

    func testMissingProgram_failsWithUnableToFindInPath() {
        XCTAssertThrowsError(try run([bytes("wk-no-such-program")], environment: [bytes("PATH=/usr/bin:/bin")])) { error in
            XCTAssertEqual((error as? SpawnError)?.step, .search)
            XCTAssertEqual("\(error)", "unable to find \"wk-no-such-program\" in PATH (/usr/bin:/bin)")
        }
    }

    func testProgramName_isSearchedInTheRequestsPath_orTheDefaultPath() throws {
        let viaPath = try run([bytes("sh"), bytes("-c"), bytes("echo found")], environment: [bytes("PATH=/wk-nowhere:/usr/bin")])
        XCTAssertEqual(text(viaPath.output), "found\n")
        let viaDefault = try run([bytes("sh"), bytes("-c"), bytes("echo found")], environment: [])
        XCTAssertEqual(text(viaDefault.output), "found\n")
    }

    func testNonExecutableFile_failsWithPermissionDeniedAtExecve() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("wk-not-executable-\(getpid())").path
        XCTAssertTrue(FileManager.default.createFile(
            atPath: path, contents: Data("#!/bin/sh\n".utf8), attributes: [.posixPermissions: 0o644]
        ))
        defer { try? FileManager.default.removeItem(atPath: path) }
        XCTAssertThrowsError(try run([bytes(path)])) { error in
            XCTAssertEqual((error as? SpawnError)?.step, .execve)
            XCTAssertEqual((error as? SpawnError)?.errorNumber, EACCES)
            XCTAssertEqual("\(error)", "unable to run \"\(path)\": execve \(path): Permission denied")
        }
    }

    // MARK: exec deadline

    /// A fleet job's start decided before a stop of the daemon must not happen after it: the
    /// child checks the deadline itself, just before its execve, whichever way it was made.
    func testAnExecDeadlineThatHasPassed_runsNothingOfTheProgram_andNamesTheDeadline() throws {
        let marks = try makeScratchDirectory() + "/ran"
        let passed = MonotonicInstant.now - .milliseconds(1)
        for forceFork in [false, true] {
            XCTAssertThrowsError(try run([bytes("/bin/sh"), bytes("-c"), bytes("echo ran >> \(marks)")], forceFork: forceFork, execDeadline: passed)) { error in
                XCTAssertEqual((error as? SpawnError)?.step, .execDeadline, "fork: \(forceFork)")
                XCTAssertEqual((error as? SpawnError)?.errorNumber, ETIME)
                XCTAssertEqual("\(error)", "not started: \"/bin/sh\" was still to exec when its start deadline passed (the daemon was stopped or starved in between)")
            }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: marks), "the program ran past its deadline")
    }

    func testAnExecDeadlineStillAhead_letsTheProgramRun() throws {
        for forceFork in [false, true] {
            let finished = try run([bytes("/bin/sh"), bytes("-c"), bytes("echo ran")], forceFork: forceFork, execDeadline: .now + .seconds(30))
            XCTAssertEqual(finished.exit, .exited(0))
            XCTAssertEqual(text(finished.output), "ran\n")
        }
    }
}
