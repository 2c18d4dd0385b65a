import CWatchkeeperSpawn
import Foundation
import XCTest

@testable import WatchkeeperCore

/// The C shim itself (Sources/CWatchkeeperSpawn), called as ProcessSpawner calls it: what
/// its children may and may not touch of the spawning thread.
final class SpawnShimTests: XCTestCase {
    /// A request for `/bin/true` with /dev/null as stdout and stderr; `body` gets it with
    /// every pointer valid.
    private func withRequest<T>(workingDirectory: String?, _ body: (inout wk_spawn_request) -> T) -> T {
        let devNull = open("/dev/null", O_WRONLY | O_CLOEXEC)
        defer { close(devNull) }
        let path = strdup("/bin/true")
        let directory = workingDirectory.map { strdup($0) }
        defer {
            free(path)
            directory.map { free($0) }
        }
        var argv: [UnsafeMutablePointer<CChar>?] = [path, nil]
        var envp: [UnsafeMutablePointer<CChar>?] = [nil]
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
}
