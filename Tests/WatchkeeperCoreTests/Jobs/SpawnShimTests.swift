import CWatchkeeperSpawn
import Foundation
import XCTest

@testable import WatchkeeperCore

/// The C shim itself (Sources/CWatchkeeperSpawn), called as ProcessSpawner calls it: what
/// its children may and may not touch of the spawning thread.
final class SpawnShimTests: XCTestCase {
    /// A request for `/bin/true` with /dev/null as stdout and stderr; `body` gets it with
    /// every pointer valid.
    private func withRequest<T>(workingDirectory: String?, environment: [String] = [], _ body: (inout wk_spawn_request) -> T) -> T {
        let devNull = open("/dev/null", O_WRONLY | O_CLOEXEC)
        defer { close(devNull) }
        let path = strdup("/bin/true")
        let directory = workingDirectory.map { strdup($0) }
        defer {
            free(path)
            directory.map { free($0) }
        }
        var argv: [UnsafeMutablePointer<CChar>?] = [path, nil]
        var envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0) } + [nil]
        defer { envp.forEach { free($0) } }
        return argv.withUnsafeMutableBufferPointer { argv in
            envp.withUnsafeMutableBufferPointer { envp in
                var request = wk_spawn_request()
                request.path = UnsafePointer(path)
                request.argv = UnsafePointer(argv.baseAddress)
                request.envp = UnsafePointer(envp.baseAddress)
                request.cwd = directory.map { UnsafePointer($0!) } ?? nil
                request.niceness = ProcessSpawner.baseNiceness
                request.stdin_fd = -1
                request.stdout_fd = devNull
                request.stderr_fd = devNull
                request.extra_fd = -1
                request.cgroup_procs_fd = -1
                return body(&request)
            }
        }
    }

    /// The shared-memory child runs on the spawning thread's TLS, so a glibc wrapper's errno
    /// there was the parent's: before the child made its system calls itself, a chdir that
    /// failed in it left ENOENT in the errno of the thread that called wk_spawn.
    func testAStepThatFailsInTheChild_leavesTheSpawningThreadsErrnoAlone() {
        for forceFork in [0, 1] {
            let (rc, step, error, errnoAfter) = withRequest(workingDirectory: "/srv/wk-missing-directory") { request in
                request.force_fork = Int32(forceFork)
                var result = wk_spawn_result()
                errno = EDOM
                let rc = wk_spawn(&request, &result)
                let after = errno
                return (rc, result.failed_step, result.error, after)
            }
            XCTAssertEqual(rc, -1, "force_fork \(forceFork)")
            XCTAssertEqual(UInt32(bitPattern: step), WK_STEP_CHDIR.rawValue, "force_fork \(forceFork)")
            XCTAssertEqual(error, ENOENT, "force_fork \(forceFork)")
            XCTAssertEqual(errnoAfter, EDOM, "force_fork \(forceFork): the child's failed chdir wrote the spawning thread's errno")
        }
    }

    /// Reaps a child of a ticketed spawn and collects its report: (exit, step, errno, path, cwd).
    private func reapAndCollect(_ result: wk_spawn_result) -> (ProcessExit?, UInt32, Int32, String?, String?) {
        defer { close(result.pidfd) }
        var poll = pollfd(fd: result.pidfd, events: Int16(POLLIN), revents: 0)
        XCTAssertEqual(Glibc.poll(&poll, 1, 10_000), 1, "the child did not exit")
        let exit = reap(pid: result.pid, pidfd: result.pidfd)
        var report = wk_spawn_result()
        var path: UnsafePointer<CChar>?, program: UnsafePointer<CChar>?, cwd: UnsafePointer<CChar>?
        guard wk_spawn_collect(result.report_ticket, &report, &path, &program, &cwd) == 1 else { return (exit, WK_STEP_NONE.rawValue, 0, nil, nil) }
        defer { wk_spawn_release(result.report_ticket) }
        return (exit, UInt32(bitPattern: report.failed_step), report.error, path.map { String(cString: $0) }, cwd.map { String(cString: $0) })
    }

    /// report_later: wk_spawn returns with a ticket once the child is cloned; a step that
    /// fails in the child is collected after its exit, with the step, errno and the child's
    /// copies of the strings a message names, and the errno of the spawning thread is not
    /// touched there either. A child that exec'd has nothing to collect.
    func testReportLater_returnsATicket_andTheFailedStepIsCollectedAfterTheExit() throws {
        let failed = withRequest(workingDirectory: "/srv/wk-missing-directory") { request -> (Int32, wk_spawn_result, Int32) in
            request.report_later = 1
            var result = wk_spawn_result()
            errno = EDOM
            let rc = wk_spawn(&request, &result)
            return (rc, result, errno)
        }
        XCTAssertEqual(failed.0, 0, "the spawn waited for the child's failure")
        XCTAssertNotEqual(failed.1.report_ticket, 0)
        let (exit, step, error, path, cwd) = reapAndCollect(failed.1)
        XCTAssertEqual(failed.2, EDOM, "the child's failed chdir wrote the spawning thread's errno")
        XCTAssertEqual(exit, .exited(127))
        XCTAssertEqual(step, WK_STEP_CHDIR.rawValue)
        XCTAssertEqual(error, ENOENT)
        XCTAssertEqual(path, "/bin/true")
        XCTAssertEqual(cwd, "/srv/wk-missing-directory")

        let ran = withRequest(workingDirectory: "/") { request -> wk_spawn_result in
            request.report_later = 1
            var result = wk_spawn_result()
            XCTAssertEqual(wk_spawn(&request, &result), 0)
            return result
        }
        XCTAssertNotEqual(ran.report_ticket, 0)
        let (ranExit, ranStep, _, _, _) = reapAndCollect(ran)
        XCTAssertEqual(ranExit, .exited(0))
        XCTAssertEqual(ranStep, WK_STEP_NONE.rawValue, "a child that exec'd has no report")
    }

    /// The blocks are bounded, and one whose child reported stays lent until its report is
    /// collected: past the bound, or with strings larger than a block, the spawn waits for
    /// the exec as before (no ticket, the failure returned at once).
    func testReportLater_waitsForTheExec_whenNoBlockIsFree_orTheStringsDoNotFit() throws {
        var tickets: [wk_spawn_result] = []
        var waited = 0
        var ticketAfterWaiting = false
        for _ in 0..<40 {
            let (rc, result) = withRequest(workingDirectory: "/srv/wk-missing-directory") { request -> (Int32, wk_spawn_result) in
                request.report_later = 1
                var result = wk_spawn_result()
                return (wk_spawn(&request, &result), result)
            }
            if result.report_ticket != 0 {
                XCTAssertEqual(rc, 0)
                ticketAfterWaiting = ticketAfterWaiting || waited > 0
                tickets.append(result)
                // Reaped, so its block's word is clear: only the uncollected report holds it.
                var poll = pollfd(fd: result.pidfd, events: Int16(POLLIN), revents: 0)
                XCTAssertEqual(Glibc.poll(&poll, 1, 10_000), 1)
                _ = reap(pid: result.pid, pidfd: result.pidfd)
            } else {
                XCTAssertEqual(rc, -1)
                XCTAssertEqual(UInt32(bitPattern: result.failed_step), WK_STEP_CHDIR.rawValue)
                waited += 1
            }
        }
        // 32 blocks, less any another test's child still holds.
        XCTAssertGreaterThan(tickets.count, 0)
        XCTAssertLessThanOrEqual(tickets.count, 32, "the blocks are not bounded as documented")
        XCTAssertEqual(waited, 40 - tickets.count)
        XCTAssertFalse(ticketAfterWaiting, "a block was taken while reports held every block")
        for result in tickets {
            var report = wk_spawn_result()
            var path: UnsafePointer<CChar>?, program: UnsafePointer<CChar>?, cwd: UnsafePointer<CChar>?
            XCTAssertEqual(wk_spawn_collect(result.report_ticket, &report, &path, &program, &cwd), 1, "a report was lost")
            XCTAssertEqual(UInt32(bitPattern: report.failed_step), WK_STEP_CHDIR.rawValue)
            wk_spawn_release(result.report_ticket)
            XCTAssertEqual(wk_spawn_collect(result.report_ticket, &report, &path, &program, &cwd), 0, "a spent ticket collected again")
            close(result.pidfd)
        }

        let large = withRequest(workingDirectory: "/", environment: ["BIG=" + String(repeating: "x", count: 60_000)]) { request -> (Int32, wk_spawn_result) in
            request.report_later = 1
            var result = wk_spawn_result()
            return (wk_spawn(&request, &result), result)
        }
        XCTAssertEqual(large.0, 0)
        XCTAssertEqual(large.1.report_ticket, 0, "60 kB of environment cannot fit a block")
        XCTAssertEqual(reapAndCollect(large.1).0, .exited(0))
        let again = withRequest(workingDirectory: "/") { request -> wk_spawn_result in
            request.report_later = 1
            var result = wk_spawn_result()
            XCTAssertEqual(wk_spawn(&request, &result), 0)
            return result
        }
        XCTAssertNotEqual(again.report_ticket, 0, "the collected blocks are free again")
        XCTAssertEqual(reapAndCollect(again).0, .exited(0))
    }
}
