import Foundation
// A ThreadSanitizer build (make sanitize) brings its own Mutex from WatchkeeperCore.
#if WATCHKEEPER_TSAN
import struct Synchronization.Atomic
#else
import Synchronization
#endif
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Credentials, exit statuses and the pidfd, process groups, descriptor hygiene, the two
/// ways of spawning, and stdin: the spawned process as the daemon later sees it.
extension ProcessSpawnerTests {
    // MARK: credentials

    func testCredentials_runTheChildAsNobody() throws {
        try XCTSkipUnless(getuid() == 0, "changing credentials needs root")
        let nobody = try Credentials.lookup(user: "nobody", group: nil)
        let finished = try run(
            [bytes("/bin/sh"), bytes("-c"), bytes("id -u; id -g; id -G")], environment: [Self.searchPath],
            workingDirectory: "/", credentials: nobody
        )
        XCTAssertEqual(finished.exit, .exited(0), text(finished.errorOutput))
        XCTAssertEqual(text(finished.output), "65534\n\(nobody.gid)\n\(nobody.groups.map(String.init).joined(separator: " "))\n")
        XCTAssertEqual(nobody.uid, 65534)
    }

    /// The reason for fork over a raw clone: glibc's setuid/setgid must not wait for the
    /// parent's other threads, which a thread that keeps creating threads would expose.
    func testCredentials_applyWhileAnotherThreadKeepsCreatingThreads() throws {
        try XCTSkipUnless(getuid() == 0, "changing credentials needs root")
        let nobody = try Credentials.lookup(user: "nobody", group: nil)
        let stop = Atomic<Bool>(false)
        let stopped = DispatchSemaphore(value: 0)
        let churn = Thread {
            while !stop.load(ordering: .relaxed) {
                var thread = pthread_t()
                if pthread_create(&thread, nil, { _ in nil }, nil) == 0 { pthread_join(thread, nil) }
            }
            stopped.signal()
        }
        churn.start()
        defer {
            stop.store(true, ordering: .relaxed)
            stopped.wait()
        }
        // On a thread of its own, so that a child stuck in setuid fails the test instead of
        // hanging it (spawn waits for the child's execve).
        nonisolated(unsafe) let test = self
        nonisolated(unsafe) var outcomes: [Result<Finished, any Error>] = []
        let spawned = DispatchSemaphore(value: 0)
        Thread {
            for _ in 0..<200 {
                outcomes.append(Result {
                    try test.run([test.bytes("/usr/bin/id"), test.bytes("-u")], workingDirectory: "/", credentials: nobody)
                })
            }
            spawned.signal()
        }.start()
        guard spawned.wait(timeout: .now() + 60) == .success else {
            return XCTFail("a spawn with credentials did not return within 60 s")
        }
        XCTAssertEqual(outcomes.count, 200)
        for outcome in outcomes {
            let finished = try outcome.get()
            XCTAssertEqual(finished.exit, .exited(0))
            XCTAssertEqual(text(finished.output), "65534\n")
        }
    }

    func testCredentialsLookup_resolvesNamesAndNumbers() throws {
        let byName = try Credentials.lookup(user: "nobody", group: nil)
        XCTAssertEqual(byName.uid, 65534)
        XCTAssertEqual(byName.userName, "nobody")
        XCTAssertTrue(byName.groups.contains(byName.gid))
        XCTAssertEqual(try Credentials.lookup(user: "65534", group: nil), byName)
        let withGroup = try Credentials.lookup(user: "nobody", group: "0")
        XCTAssertEqual(withGroup.gid, 0)
        XCTAssertEqual(try Credentials.lookup(user: "4242", group: "4343"), Credentials(uid: 4242, gid: 4343, groups: [4343]))
        XCTAssertEqual(try Credentials.lookup(user: nil, group: "root").gid, 0)
    }

    func testCredentialsLookup_rejectsUnknownUserAndGroup() {
        XCTAssertThrowsError(try Credentials.lookup(user: "wk-no-such-user", group: nil)) { error in
            XCTAssertEqual("\(error)", "unknown user \"wk-no-such-user\"")
        }
        XCTAssertThrowsError(try Credentials.lookup(user: "nobody", group: "wk-no-such-group")) { error in
            XCTAssertEqual("\(error)", "unknown group \"wk-no-such-group\"")
        }
        XCTAssertThrowsError(try Credentials.lookup(user: "4242", group: nil)) { error in
            XCTAssertEqual("\(error)", "unknown user \"4242\" (no passwd entry, so a group must be given too)")
        }
    }

    // MARK: exit, pidfd, process group

    func testReap_reportsExitStatusExactly() throws {
        for status: Int32 in [0, 3, 255] {
            let finished = try run([bytes("/bin/sh"), bytes("-c"), bytes("exit \(status)")])
            XCTAssertEqual(finished.exit, .exited(status))
        }
    }

    func testReap_reportsTheKillingSignalExactly() throws {
        let finished = try run([bytes("/bin/sh"), bytes("-c"), bytes("kill -KILL $$")])
        XCTAssertEqual(finished.exit, .signaled(SIGKILL, coreDumped: false))
    }

    func testPidfd_becomesReadableWhenTheChildExits_andReapIsNilBefore() throws {
        let output = try OwnedPipe().releaseEnds()
        defer { close(output.readEnd); close(output.writeEnd) }
        let spawned = try ProcessSpawner.spawn(SpawnRequest(
            arguments: [bytes("/bin/sleep"), bytes("0.3")], environment: [],
            standardOutput: output.writeEnd, standardError: output.writeEnd
        ))
        XCTAssertFalse(waitReadable(spawned.pidfd.rawValue, milliseconds: 0))
        XCTAssertNil(reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue))
        XCTAssertTrue(waitReadable(spawned.pidfd.rawValue, milliseconds: 10_000))
        XCTAssertEqual(reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue), .exited(0))
    }

    /// A job's exit wakes no other thread of the daemon: its SIGCHLD goes to the thread that
    /// spawned it, which now leaves SIGCHLD unblocked, so the kernel discards it as it is sent
    /// (blocked there, as in every libdispatch worker, it was queued for the process and woke
    /// the main thread, parked in sigsuspend, once per job). Both ways of spawning.
    func testSpawningThread_leavesSIGCHLDUnblocked_soAJobsExitIsNotQueuedForTheProcess() throws {
        for forceFork in [false, true] {
            var chld = sigset_t(), before = sigset_t(), pending = sigset_t()
            sigemptyset(&chld)
            sigaddset(&chld, SIGCHLD)
            pthread_sigmask(SIG_BLOCK, &chld, &before)
            defer { pthread_sigmask(SIG_SETMASK, &before, nil) }
            let finished = try run([bytes("/bin/sh"), bytes("-c"), bytes("exit 7")], forceFork: forceFork)
            XCTAssertEqual(finished.exit, .exited(7))
            var now = sigset_t()
            pthread_sigmask(SIG_BLOCK, nil, &now)
            XCTAssertEqual(sigismember(&now, SIGCHLD), 0, "SIGCHLD blocked after a spawn, forceFork \(forceFork)")
            sigpending(&pending)
            XCTAssertEqual(sigismember(&pending, SIGCHLD), 0, "a job's SIGCHLD pending, forceFork \(forceFork)")
        }
    }

    func testSignalToTheProcessGroup_killsGrandchildrenToo() throws {
        let output = try OwnedPipe().releaseEnds()
        defer { close(output.readEnd) }
        let spawned = try ProcessSpawner.spawn(SpawnRequest(
            arguments: [bytes("/bin/sh"), bytes("-c"), bytes("sleep 30 & echo $!; wait")], environment: [Self.searchPath],
            standardOutput: output.writeEnd, standardError: output.writeEnd
        ))
        close(output.writeEnd)
        let grandchild = try XCTUnwrap(pid_t(try readLine(output.readEnd)))

        XCTAssertEqual(kill(-spawned.pid, SIGTERM), 0)
        // EOF means every holder of the pipe's write end, sleep included, is gone.
        XCTAssertEqual(try readToEnd(output.readEnd, milliseconds: 10_000), [])
        XCTAssertTrue(waitReadable(spawned.pidfd.rawValue, milliseconds: 10_000))
        XCTAssertEqual(reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue), .signaled(SIGTERM, coreDumped: false))
        // Reparented away from us: soon gone, or a zombie until its new parent reaps it (it
        // may still be in exit, past closing its files, when the EOF arrives).
        var state: Substring?
        for _ in 0..<500 {
            guard let stat = try? String(contentsOfFile: "/proc/\(grandchild)/stat", encoding: .utf8),
                  let afterName = stat.range(of: ")", options: .backwards) else { state = nil; break }
            state = stat[afterName.upperBound...].split(separator: " ").first
            if state == "Z" { break }
            usleep(10_000)
        }
        XCTAssertTrue(state == nil || state == "Z", "grandchild \(grandchild) still alive: \(state ?? "")")
    }

    // MARK: descriptor hygiene in the daemon

    func testSpawning_leaksNoDescriptorsInTheSpawningProcess() throws {
        func count() throws -> Int { try openDescriptors(of: getpid()).count }
        // The first spawn opens the /dev/null every job's fd 0 shares, kept for the process's
        // lifetime (spawn.c, kept_null_fd): one descriptor in all, not one per spawn.
        XCTAssertEqual(try run([bytes("/bin/true")], withProgress: false).exit, .exited(0))
        let before = try count()
        for index in 0..<200 {
            let finished = try run([bytes("/bin/true")], withProgress: index % 2 == 0)
            XCTAssertEqual(finished.exit, .exited(0))
        }
        for _ in 0..<20 {
            XCTAssertThrowsError(try run([bytes("/bin/true")], workingDirectory: "/wk-missing"))
            XCTAssertThrowsError(try run([bytes("/wk-missing")]))
        }
        XCTAssertEqual(try count(), before)
    }

    // MARK: the two ways of spawning

    /// Jobs without credentials get the shared-memory clone, jobs with them fork: what the
    /// job sees must not depend on which.
    func testSharedMemoryCloneAndFork_giveTheSameChild() throws {
        let previousPipeHandler = signal(SIGPIPE, SIG_IGN)
        defer { signal(SIGPIPE, previousPipeHandler) }
        let script = "cat /proc/self/status | grep -E '^(SigBlk|SigIgn|SigCgt):'; ls /proc/self/fd | sort -n | tr '\\n' ' '; echo; " +
            "ps -o pid=,pgid=,sid= -p $$ | awk '{ print ($1 == $2 && $2 == $3) }'; pwd"
        var outputs: [String] = []
        for forceFork in [false, true] {
            let finished = try run([bytes("/bin/sh"), bytes("-c"), bytes(script)], workingDirectory: "/", withProgress: true,
                                   forceFork: forceFork)
            XCTAssertEqual(finished.exit, .exited(0), text(finished.errorOutput))
            outputs.append(text(finished.output))
        }
        XCTAssertEqual(outputs[0], outputs[1])
        // cat inherits sh's nothing-blocked, nothing-ignored; fds 0..3 plus the one ls reads
        // /proc/self/fd through; sh leads its own session; the working directory is applied.
        XCTAssertEqual(outputs[0], "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\n0 1 2 3 4 \n1\n/\n",
                       outputs[0])
    }

    /// The shared-memory children run on stacks the shim keeps for reuse: spawns from many
    /// threads at once must never get the same one (they would corrupt each other's setup).
    func testConcurrentSpawns_fromManyThreads_eachRunTheirOwnChild() throws {
        nonisolated(unsafe) let test = self
        let outputs = Mutex<[String]>([])
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for index in 0..<40 {
                do {
                    let finished = try test.run([test.bytes("/bin/echo"), test.bytes("\(thread)-\(index)")],
                                                workingDirectory: index % 2 == 0 ? "/" : nil, withProgress: index % 3 == 0)
                    outputs.withLock { $0.append(test.text(finished.output)) }
                } catch {
                    failures.withLock { $0.append("\(thread)-\(index): \(error)") }
                }
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, [])
        let expected = (0..<8).flatMap { thread in (0..<40).map { "\(thread)-\($0)\n" } }
        XCTAssertEqual(outputs.withLock { $0 }.sorted(), expected.sorted())
    }

    /// A setup step that fails in the shared-memory child reaches the caller as it does
    /// from a forked one, and the child is reaped either way.
    func testFailedSetup_isReportedAndReaped_byBothWaysOfSpawning() throws {
        for forceFork in [false, true] {
            XCTAssertThrowsError(try run([bytes("/bin/true")], workingDirectory: "/srv/wk-missing-directory", forceFork: forceFork)) { error in
                XCTAssertEqual((error as? SpawnError)?.step, .chdir, "forceFork \(forceFork)")
                XCTAssertEqual((error as? SpawnError)?.errorNumber, ENOENT)
            }
            XCTAssertThrowsError(try run([bytes("/wk-missing")], forceFork: forceFork)) { error in
                XCTAssertEqual((error as? SpawnError)?.step, .execve, "forceFork \(forceFork)")
            }
        }
        // No zombie: every child of this process that exited has been waited for.
        var info = siginfo_t()
        let rc = waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT)
        XCTAssertTrue(rc != 0 || info._sifields._sigchld.si_pid == 0, "an unreaped child is left: pid \(info._sifields._sigchld.si_pid)")
    }

    // MARK: stdin

    /// `batch = "stdin"`: the whole input is in the pipe before the child starts, larger
    /// than a default pipe (64 KiB) and byte-exact, and ends in EOF.
    func testFilledPipe_isTheChildsWholeStdin_byteExact() throws {
        let input = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let readEnd = try OwnedPipe.filled(with: input).release().rawValue
        let output = try OwnedPipe().releaseEnds()
        defer { close(output.readEnd) }
        var request = SpawnRequest(arguments: [bytes("/bin/cat")], environment: [],
                                   standardOutput: output.writeEnd, standardError: output.writeEnd)
        request.standardInput = readEnd
        let spawned = try ProcessSpawner.spawn(request)
        close(readEnd)
        close(output.writeEnd)
        XCTAssertEqual(try readToEnd(output.readEnd), input)
        XCTAssertTrue(waitReadable(spawned.pidfd.rawValue, milliseconds: 10_000))
        XCTAssertEqual(reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue), .exited(0))
    }

    func testFilledPipe_refusesMoreThanAPipeHolds_namingTheSysctl() {
        XCTAssertThrowsError(try OwnedPipe.filled(with: [UInt8](repeating: 1, count: 64 << 20)).rawValue) { error in
            XCTAssertEqual((error as? SpawnError)?.step, .stdin)
            XCTAssertTrue("\(error)".contains("fs.pipe-max-size"), "\(error)")
        }
    }
}
