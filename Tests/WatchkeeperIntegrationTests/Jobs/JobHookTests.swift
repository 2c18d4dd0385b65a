import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// `on_failure` and `on_success` run by the real daemon after real jobs: each test reads
/// what the hooks themselves wrote to files, and the daemon's records on stderr.
final class JobHookTests: WatchTestCase {
    /// KEY=value lines a hook wrote with `env`, as a dictionary of WATCHKEEPER_ names.
    func environment(_ path: String) -> [String: String] {
        var result: [String: String] = [:]
        for line in lines(path) where line.hasPrefix("WATCHKEEPER_") {
            let parts = line.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            result[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
        }
        return result
    }

    private var dumps = 0

    /// The jobs section of a fresh SIGUSR1 dump; nil if none came within 5 s.
    func dumpedJobs() -> [String: Any]? {
        dumps += 1
        daemon.send(SIGUSR1)
        return sandbox.waitForState(sequence: dumps, timeout: 5)?["jobs"] as? [String: Any]
    }

    func runID(ofRecordContaining text: String) -> String? {
        guard let record = daemon.stderr.split(separator: "\n").first(where: { $0.contains(text) && $0.contains("run_id=") }) else { return nil }
        return String(record.components(separatedBy: "run_id=")[1].prefix { $0.isHexDigit })
    }

    // The hook copies its output file before it ends: the daemon removes it then.
    static let hookRecorder = #"env > @DIR@/env.$WATCHKEEPER_HOOK; cat "$WATCHKEEPER_OUTPUT_FILE" > @DIR@/out.$WATCHKEEPER_HOOK"#

    func testOnSuccess_runsAfterASuccessfulRun_withItsRecordAndOutputInItsEnvironment() throws {
        try start("""
            [[task]]
            name = "tidy"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'echo first; sleep 0.3; echo "second, on stderr" >&2'
            on_success = '\(Self.hookRecorder)'
            on_failure = 'echo failure >> @DIR@/wrong'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "on_success for task tidy run", timeout: 10), daemon.stderr)
        let env = environment(sandbox.root + "/env.success")
        XCTAssertEqual(env["WATCHKEEPER_HOOK"], "success")
        XCTAssertEqual(env["WATCHKEEPER_OUTCOME"], "ok")
        XCTAssertEqual(env["WATCHKEEPER_EXIT_CODE"], "0")
        XCTAssertNil(env["WATCHKEEPER_SIGNAL"])
        XCTAssertEqual(env["WATCHKEEPER_TASK"], "tidy")
        XCTAssertEqual(env["WATCHKEEPER_ATTEMPT"], "1")
        XCTAssertEqual(env["WATCHKEEPER_RUN_ID"], runID(ofRecordContaining: "outcome=ok"), daemon.stderr)
        XCTAssertEqual(env["WATCHKEEPER_OUTPUT_LINES"], "2")
        let seconds = try XCTUnwrap(Double(env["WATCHKEEPER_DURATION_SECONDS"] ?? ""), "\(env)")
        XCTAssertGreaterThanOrEqual(seconds, 0.3)
        // Its own fd 3: a file no directory holds, gone with the hook.
        XCTAssertEqual(env["WATCHKEEPER_OUTPUT_FILE"], "/proc/self/fd/3")
        // stdout and stderr in the order the daemon read them.
        XCTAssertEqual(lines(sandbox.root + "/out.success"), ["first", "second, on stderr"])
        XCTAssertTrue(daemon.waitForStderr(containing: "exited 0", timeout: 5), daemon.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.runtimeDirectory + "/hooks"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.root + "/wrong"))
    }

    func testOnFailure_afterANonZeroExit_getsTheExitCode_andExactlyTheLast100Lines() throws {
        try start("""
            [[task]]
            name = "noisy"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'i=1; while [ $i -le 150 ]; do echo "line $i"; i=$((i+1)); done; exit 7'
            on_failure = '\(Self.hookRecorder)'
            on_success = 'echo success >> @DIR@/wrong'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "on_failure for task noisy run", timeout: 10), daemon.stderr)
        let env = environment(sandbox.root + "/env.failure")
        XCTAssertEqual(env["WATCHKEEPER_HOOK"], "failure")
        XCTAssertEqual(env["WATCHKEEPER_OUTCOME"], "failed")
        XCTAssertEqual(env["WATCHKEEPER_EXIT_CODE"], "7")
        XCTAssertEqual(env["WATCHKEEPER_OUTPUT_LINES"], "100")
        XCTAssertEqual(lines(sandbox.root + "/out.failure"), (51...150).map { "line \($0)" })
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.root + "/wrong"))
    }

    func testOnFailure_afterAJobKilledByASignal_getsTheSignalsName() throws {
        try start("""
            [[task]]
            name = "crash"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'kill -KILL $$'
            on_failure = '\(Self.hookRecorder)'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "on_failure for task crash run", timeout: 10), daemon.stderr)
        let env = environment(sandbox.root + "/env.failure")
        XCTAssertEqual(env["WATCHKEEPER_SIGNAL"], "SIGKILL")
        XCTAssertNil(env["WATCHKEEPER_EXIT_CODE"])
        XCTAssertEqual(env["WATCHKEEPER_OUTCOME"], "failed")
        XCTAssertEqual(env["WATCHKEEPER_OUTPUT_LINES"], "0")
    }

    func testHookRunAsAnotherUser_readsItsOutput_underA0750RuntimeDirectoryOfRoot() throws {
        guard getuid() == 0 else { throw XCTSkip("running a job as another user needs root") }
        try start("""
            [[task]]
            name = "as-nobody"
            every = "1h"
            run_on_start = true
            user = "nobody"
            working_directory = "/"
            shell = true
            command = 'echo secret-line; exit 1'
            on_failure = 'echo "hook as $(id -un): $(cat "$WATCHKEEPER_OUTPUT_FILE")"; cat <&3 | sed "s/^/fd 3: /"'
            """, prepare: { root in
                // As the daemon makes it when it is not there: nobody cannot even search it.
                XCTAssertEqual(mkdir(root + "/run", 0o750), 0)
                XCTAssertEqual(chmod(root + "/run", 0o750), 0)
            })
        XCTAssertTrue(daemon.waitForStderr(containing: "hook as nobody: secret-line", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "fd 3: secret-line", timeout: 5), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "exited 0", timeout: 5), daemon.stderr)
    }

    /// A launcher under which the kernel refuses memfd_create with EPERM, as it does for a
    /// unit whose SystemCallFilter= leaves the call out (SystemCallErrorNumber=EPERM, as in
    /// the shipped unit): a seccomp filter on the daemon and all it starts, then its exec.
    static let refusingMemfdCreate = ["/usr/bin/python3", "-c", #"""
        import ctypes, errno, os, platform, sys
        # seccomp_data has the call's number at offset 0 and the architecture at 4.
        arch, memfd_create = {"x86_64": (0xC000003E, 319), "aarch64": (0xC00000B7, 279)}[platform.machine()]
        LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
        RET_ERRNO, RET_ALLOW = 0x00050000, 0x7FFF0000
        class Instruction(ctypes.Structure):
            _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]
        class Program(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]
        code = [(LD_W_ABS, 0, 0, 4), (JEQ_K, 0, 3, arch), (LD_W_ABS, 0, 0, 0), (JEQ_K, 0, 1, memfd_create),
                (RET_K, 0, 0, RET_ERRNO | errno.EPERM), (RET_K, 0, 0, RET_ALLOW)]
        program = Program(len(code), (Instruction * len(code))(*code))
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
            sys.exit("unable to install the seccomp filter: " + os.strerror(ctypes.get_errno()))
        os.execv(sys.argv[1], sys.argv[1:])
        """#]

    /// Issue 38: a hook whose output file cannot be made (the memfd refused) still runs,
    /// without WATCHKEEPER_OUTPUT_FILE or fd 3 and told there are no lines, and a warning
    /// says why it has nothing to read.
    func testOutputFileRefusedByTheKernel_theHookRunsWithoutIt_andAWarningSaysWhy() throws {
        guard access("/usr/bin/python3", X_OK) == 0 else { throw XCTSkip("the seccomp launcher needs /usr/bin/python3") }
        try start("""
            [[task]]
            name = "no-memfd"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'echo one; echo two; exit 4'
            on_failure = 'env > @DIR@/env.failure; fd3=closed; [ -e /proc/$$/fd/3 ] && fd3=open; echo $fd3 > @DIR@/fd3'
            """, launcher: Self.refusingMemfdCreate)
        var runID: String?
        XCTAssertTrue(waitFor(10) { runID = self.runID(ofRecordContaining: "outcome=failed"); return runID != nil }, daemon.stderr)
        let hookRun = "on_failure for task no-memfd run \(try XCTUnwrap(runID))"
        XCTAssertTrue(daemon.waitForStderr(containing: "\(hookRun) exited 0", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("warning: \(hookRun): unable to hand it the run's output (Operation not permitted); "
                                             + "it runs without WATCHKEEPER_OUTPUT_FILE"), daemon.stderr)
        let env = environment(sandbox.root + "/env.failure")
        XCTAssertEqual(env["WATCHKEEPER_EXIT_CODE"], "4")
        XCTAssertNil(env["WATCHKEEPER_OUTPUT_FILE"], "\(env)")
        XCTAssertEqual(env["WATCHKEEPER_OUTPUT_LINES"], "0", "the run printed two, but the hook has none to read")
        XCTAssertEqual(lines(sandbox.root + "/fd3"), ["closed"])
        let hooks = dumpedJobs()?["hooks"] as? [String: [String: Int]]
        XCTAssertEqual(hooks?["on_failure"], ["ok": 1], "\(String(describing: hooks))")
    }

    func testTheRunsRecord_isWrittenBeforeItsHooksOutput() throws {
        try start("""
            [[task]]
            name = "quick"
            every = "1s"
            run_on_start = true
            command = ["/bin/false"]
            on_failure = ["/bin/echo", "hook-after-{run_id}"]
            """)
        // Several runs: the race lost once in a few.
        var hookLines: [Substring] = []
        XCTAssertTrue(waitFor(20) {
            hookLines = self.daemon.stderr.split(separator: "\n").filter { $0.contains("hook-after-") }
            return hookLines.count >= 6
        }, daemon.stderr)
        let all = daemon.stderr.split(separator: "\n")
        for hookLine in hookLines {
            let runID = String(hookLine.components(separatedBy: "hook-after-")[1].prefix { $0.isHexDigit })
            let recordAt = all.firstIndex { $0.contains("outcome=failed") && $0.contains("run_id=\(runID)") && !$0.contains("hook-after-") }
            let hookAt = all.firstIndex(of: hookLine)
            XCTAssertNotNil(recordAt, "no record of run \(runID) in:\n\(daemon.stderr)")
            if let recordAt, let hookAt { XCTAssertLessThan(recordAt, hookAt, "run \(runID): its hook's output came before its record:\n\(daemon.stderr)") }
        }
    }

    func testArgumentHook_getsOutcomeAndItsOwnBudgetAsPlaceholders() throws {
        try start("""
            [[task]]
            name = "argv"
            every = "1h"
            run_on_start = true
            budget = "10m"
            command = ["/bin/false"]
            on_failure = ["/bin/sh", "-c", "echo $1 $2 $3 > @DIR@/args", "hook", "{outcome}", "{budget}", "{task}"]
            on_failure_budget = "7s"
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "on_failure for task argv run", timeout: 10), daemon.stderr)
        XCTAssertEqual(lines(sandbox.root + "/args"), ["failed 7s argv"])
    }

    func testOnFailure_afterAJobThatCouldNotStart_hasNeitherExitCodeNorSignal() throws {
        try start("""
            [[task]]
            name = "missing"
            every = "1h"
            run_on_start = true
            command = ["@DIR@/no-such-program"]
            on_failure = ["/bin/sh", "-c", "env > @DIR@/env.failure"]
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "on_failure for task missing run", timeout: 10), daemon.stderr)
        let env = environment(sandbox.root + "/env.failure")
        XCTAssertEqual(env["WATCHKEEPER_OUTCOME"], "failed")
        XCTAssertNil(env["WATCHKEEPER_EXIT_CODE"])
        XCTAssertNil(env["WATCHKEEPER_SIGNAL"])
        XCTAssertEqual(env["WATCHKEEPER_OUTPUT_LINES"], "0")
    }

    func testRetries_onFailureRunsOnceAfterTheLastAttempt_notAfterTheOnesRetried() throws {
        try start("""
            [[task]]
            name = "flaky"
            every = "1h"
            run_on_start = true
            retry = { attempts = 3, backoff = "100ms", max_backoff = "1s" }
            shell = true
            command = 'echo "run $WATCHKEEPER_ATTEMPT" >> @DIR@/events; exit 3'
            on_failure = 'echo "failure $WATCHKEEPER_ATTEMPT $WATCHKEEPER_EXIT_CODE" >> @DIR@/events'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "on_failure for task flaky run", timeout: 15), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "exited 0", timeout: 5), daemon.stderr)
        // The drain waits for hooks too: once stopped, nothing more can come.
        daemon.stop(within: 20)
        XCTAssertEqual(lines(sandbox.root + "/events"), ["run 1", "run 2", "run 3", "failure 3 3"])
    }

    func testRetries_aRunThatFailsThenSucceeds_getsOnSuccessOnce_andNoOnFailure() throws {
        try start("""
            [[task]]
            name = "second-time"
            every = "1h"
            run_on_start = true
            retry = { attempts = 3, backoff = "100ms", max_backoff = "1s" }
            shell = true
            command = 'echo "run $WATCHKEEPER_ATTEMPT" >> @DIR@/events; [ "$WATCHKEEPER_ATTEMPT" -ge 2 ]'
            on_failure = 'echo "failure $WATCHKEEPER_ATTEMPT" >> @DIR@/events'
            on_success = 'echo "success $WATCHKEEPER_ATTEMPT" >> @DIR@/events'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "on_success for task second-time run", timeout: 15), daemon.stderr)
        daemon.stop(within: 20)
        XCTAssertEqual(lines(sandbox.root + "/events"), ["run 1", "run 2", "success 2"])
    }

    func testExpiry_onExpireRunsFirst_thenOnFailureOnceItHasEnded() throws {
        // on_expire stops the job itself and goes on after it is gone: on_failure still waits for it.
        try start("""
            [[task]]
            name = "slow"
            every = "1h"
            run_on_start = true
            budget = "500ms"
            shell = true
            command = 'trap "echo term >> @DIR@/events; exit 0" TERM; echo started >> @DIR@/events; while :; do sleep 0.05; done'
            on_expire = 'kill -TERM $WATCHKEEPER_PID; sleep 0.5; echo expire-end >> @DIR@/events'
            on_failure = 'echo "failure $WATCHKEEPER_OUTCOME $WATCHKEEPER_EXPIRE_REASON" >> @DIR@/events'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "on_failure for task slow run", timeout: 15), daemon.stderr)
        daemon.stop(within: 20)
        XCTAssertEqual(lines(sandbox.root + "/events"), ["started", "term", "expire-end", "failure expired budget"])
        // The record came before the hook, as soon as the job was gone.
        let stderr = daemon.stderr
        let record = try XCTUnwrap(stderr.range(of: "outcome=expired"), stderr)
        let hook = try XCTUnwrap(stderr.range(of: "on_failure for task slow run"), stderr)
        XCTAssertLessThan(record.lowerBound, hook.lowerBound)
    }

    func testHookOverItsBudget_isKilled_andItsFailureRunsNoHook() throws {
        try start("""
            [[task]]
            name = "hung-hook"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'exit 1'
            on_failure = 'echo $$ >> @DIR@/hook-pids; sleep 30'
            on_failure_budget = "300ms"
            on_success = 'echo success >> @DIR@/wrong'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "exceeded its 300ms budget; SIGKILL", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "was killed by SIGKILL", timeout: 5), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("hook_result=expired"), daemon.stderr)
        daemon.stop(within: 20)
        let pids = lines(sandbox.root + "/hook-pids")
        XCTAssertEqual(pids.count, 1, "a hook's end triggers no hook: \(pids)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.root + "/wrong"))
        if let pid = pid_t(pids.first ?? "") { XCTAssertNotEqual(kill(pid, 0), 0, "the hook is gone") }
    }

    func testFailingHook_isLoggedWithTheRunID_andRunsNoHookItself() throws {
        try start("""
            [[task]]
            name = "bad-hook"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'true'
            on_success = 'echo hook >> @DIR@/events; exit 5'
            on_failure = 'echo failure >> @DIR@/events'
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "exited 5", timeout: 10), daemon.stderr)
        let runID = try XCTUnwrap(runID(ofRecordContaining: "outcome=ok"), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("on_success for task bad-hook run \(runID) exited 5"), daemon.stderr)
        let hooks = dumpedJobs()?["hooks"] as? [String: [String: Int]]
        XCTAssertEqual(hooks?["on_success"], ["failed": 1], "\(String(describing: hooks))")
        XCTAssertEqual(hooks?["on_failure"], [:], "\(String(describing: hooks))")
        daemon.stop(within: 20)
        XCTAssertEqual(lines(sandbox.root + "/events"), ["hook"])
    }

    func testWatchRuleOnFailure_getsTheFilesPath() throws {
        try start("""
            [[watch]]
            name = "inbox"
            path = "@DIR@/in"
            shell = true
            command = 'echo "cannot import $WATCHKEEPER_PATH"; exit 2'
            on_failure = '\(Self.hookRecorder)'
            """)
        write("report.csv")
        XCTAssertTrue(daemon.waitForStderr(containing: "on_failure for watch inbox run", timeout: 10), daemon.stderr)
        let env = environment(sandbox.root + "/env.failure")
        XCTAssertEqual(env["WATCHKEEPER_PATH"], sandbox.root + "/in/report.csv")
        XCTAssertEqual(env["WATCHKEEPER_WATCH"], "inbox")
        XCTAssertEqual(env["WATCHKEEPER_EXIT_CODE"], "2")
        XCTAssertEqual(lines(sandbox.root + "/out.failure"), ["cannot import \(sandbox.root)/in/report.csv"])
    }

    func testRunEndingWhileTheDaemonStops_getsItsHook_andTheDrainWaitsForIt() throws {
        try start("""
            [[task]]
            name = "last-words"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'touch @DIR@/started; sleep 0.5; exit 1'
            on_failure = 'sleep 0.3; echo "hook $WATCHKEEPER_OUTCOME" >> @DIR@/events'
            """)
        XCTAssertTrue(waitFor(10) { FileManager.default.fileExists(atPath: self.sandbox.root + "/started") }, daemon.stderr)
        // Within shutdown_grace (5 s): the run ends on its own, its hook runs, the daemon waits for both.
        daemon.stop(within: 20)
        XCTAssertEqual(lines(sandbox.root + "/events"), ["hook failed"], daemon.stderr)
    }

    func testStateDump_showsARunningHook() throws {
        try start("""
            [[task]]
            name = "slow-hook"
            every = "1h"
            run_on_start = true
            shell = true
            command = 'true'
            on_success = 'touch @DIR@/hook-started; sleep 30'
            on_success_budget = "20s"
            """)
        XCTAssertTrue(waitFor(10) { FileManager.default.fileExists(atPath: self.sandbox.root + "/hook-started") }, daemon.stderr)
        var found: [String: Any]?
        XCTAssertTrue(waitFor(10) {
            guard let jobs = self.dumpedJobs(), let running = jobs["hooks_running"] as? [[String: Any]] else { return false }
            found = running.first
            return found != nil
        }, daemon.stderr)
        XCTAssertEqual(found?["task"] as? String, "slow-hook")
        XCTAssertEqual(found?["hook"] as? String, "on_success")
        XCTAssertNotNil(found?["pid"] as? Int)
        // Shutdown is not held up for the rest of its budget: once shutdown_grace is over it is stopped.
        daemon.stop(within: 20)
        XCTAssertTrue(daemon.stderr.contains("was killed by SIGTERM"), daemon.stderr)
    }
}
