import Foundation
import XCTest
import WatchkeeperTestSupport

/// A cgroup per job where the daemon has a delegated cgroup (as under systemd with
/// Delegate=yes), process groups otherwise: real cgroupfs, real processes, real kills.
final class JobContainmentTests: XCTestCase {
    private func start(_ tasks: String, cgroup: DelegatedCgroup?) throws -> (DaemonSandbox, DaemonProcess) {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig + "\n\n" + tasks.replacingOccurrences(of: "@DIR@", with: sandbox.root))
        let daemon = try sandbox.start(notifySocket: notify, cgroup: cgroup?.path)
        guard notify.waitFor("READY", "1", timeout: 10) != nil else {
            XCTFail("no READY=1 within 10 s; stderr:\n\(daemon.stderr)")
            throw XCTSkip("daemon did not become ready")
        }
        return (sandbox, daemon)
    }

    /// Gone, or a zombie waiting for init: either way it runs no more.
    private func hasEnded(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return true }
        return stat[stat.index(close, offsetBy: 2)] == "Z"
    }

    private func pid(in file: String) -> pid_t? {
        waitForValue(10) { (try? String(contentsOfFile: file, encoding: .utf8)).flatMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) } }
    }

    /// The escapee: a grandchild in a new session, so kill(-pgid) cannot reach it.
    private let escaper = #"setsid sh -c 'echo $$ > @DIR@/escapee.pid; exec sleep 300' </dev/null >/dev/null 2>&1 &"#

    func testExpiry_endsAProcessThatLeftTheJobsSession() throws {
        let cgroup = try DelegatedCgroup()
        let (sandbox, daemon) = try start("""
            [[task]]
            name = "escaper"
            every = "1h"
            run_on_start = true
            budget = "1s"
            kill_grace = "500ms"
            shell = true
            command = "\(escaper) sleep 300"
            """, cgroup: cgroup)
        let escapee = try XCTUnwrap(pid(in: sandbox.root + "/escapee.pid"), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=expired", timeout: 10), daemon.stderr)
        XCTAssertTrue(waitFor(5) { self.hasEnded(escapee) }, "pid \(escapee) outlived its job's expiry")
        XCTAssertTrue(waitFor(5) { cgroup.children == ["daemon"] }, "job cgroups left: \(cgroup.children)")
        withExtendedLifetime(sandbox) { daemon.stop(within: 20) }
    }

    func testAProcessLeftBehindByAJobThatExited_isStopped_andTheJobsCgroupRemoved() throws {
        let cgroup = try DelegatedCgroup()
        let (sandbox, daemon) = try start("""
            [[task]]
            name = "leaver"
            every = "1h"
            run_on_start = true
            kill_grace = "300ms"
            shell = true
            command = "\(escaper) while [ ! -s @DIR@/escapee.pid ]; do sleep 0.01; done; exit 0"
            """, cgroup: cgroup)
        let escapee = try XCTUnwrap(pid(in: sandbox.root + "/escapee.pid"), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "exited but left processes in its cgroup \(cgroup.path)/run-", timeout: 10), daemon.stderr)
        XCTAssertTrue(waitFor(5) { self.hasEnded(escapee) }, "pid \(escapee) outlived its job")
        XCTAssertTrue(waitFor(5) { cgroup.children == ["daemon"] }, "job cgroups left: \(cgroup.children)")
        withExtendedLifetime(sandbox) { daemon.stop(within: 20) }
    }

    func testTheDaemon_movesItselfIntoALeaf_andRunsEachJobInACgroupOfItsOwn() throws {
        let cgroup = try DelegatedCgroup()
        let (sandbox, daemon) = try start("""
            [[task]]
            name = "where"
            every = "1h"
            run_on_start = true
            command = ["/bin/sh", "-c", "grep '^0::' /proc/self/cgroup > @DIR@/where; echo $WATCHKEEPER_RUN_ID >> @DIR@/where"]
            """, cgroup: cgroup)
        XCTAssertTrue(daemon.waitForStderr(containing: "a cgroup per job under \(cgroup.path)", timeout: 5), daemon.stderr)
        let own = try String(contentsOfFile: "/proc/\(daemon.pid)/cgroup", encoding: .utf8)
        XCTAssertTrue(own.contains("::/\(URL(fileURLWithPath: cgroup.path).lastPathComponent)/daemon\n"), own)
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=ok", timeout: 10), daemon.stderr)
        let lines = try String(contentsOfFile: sandbox.root + "/where", encoding: .utf8).split(separator: "\n")
        XCTAssertEqual(lines.count, 2)
        XCTAssertTrue(lines.first?.hasSuffix("/run-\(lines.last ?? "?")") ?? false, "\(lines)")
        withExtendedLifetime(sandbox) { daemon.stop(within: 20) }
    }

    func testWithoutADelegatedCgroup_jobsAreHeldByProcessGroups_andTheDaemonSaysSo() throws {
        let (sandbox, daemon) = try start("", cgroup: nil)
        XCTAssertTrue(daemon.waitForStderr(containing: "jobs are contained by process groups (", timeout: 5), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("a job that calls setsid in a child escapes expiry"), daemon.stderr)
        withExtendedLifetime(sandbox) { daemon.stop(within: 20) }
    }

    func testALimitTheControllersCannotEnforce_isNamedAtStart() throws {
        let cgroup = try DelegatedCgroup()
        let available = (try? String(contentsOfFile: cgroup.path + "/cgroup.controllers", encoding: .utf8)) ?? ""
        let (sandbox, daemon) = try start("""
            [[task]]
            name = "limited"
            every = "1h"
            memory_max = "64M"
            command = ["/bin/true"]
            """, cgroup: cgroup)
        XCTAssertTrue(daemon.waitForStderr(containing: "a cgroup per job", timeout: 5), daemon.stderr)
        // The limits are checked after the line waited for above, before READY=1.
        if available.split(separator: " ").contains(where: { $0.hasPrefix("memory") }) {
            XCTAssertTrue(daemon.waitForReadyLine(), daemon.stderr)
            XCTAssertFalse(daemon.stderr.contains("not enforced here"), daemon.stderr)
        } else {
            XCTAssertTrue(daemon.waitForStderr(containing: "task limited: not enforced here: memory_max (the memory controller is not available in \(cgroup.path)", timeout: 10), daemon.stderr)
        }
        withExtendedLifetime(sandbox) { daemon.stop(within: 20) }
    }
}
