import Foundation
import XCTest
import WatchkeeperCore
import WatchkeeperTestSupport

/// etcd's own authentication: a user whose role reaches only the fleet's prefix, its
/// password in a file, as docs/fleet.md sets it up.
final class FleetAuthTests: XCTestCase {
    func testAUserLimitedToThePrefix_runsFleetTasks_andThePasswordIsShownNowhere() throws {
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory(), members: 1)
        let shared = try makeScratchDirectory()
        let prefix = "/wk-auth/\(UInt32.random(in: 0 ... .max))"
        let auth = try etcd.enableAuth(prefix: prefix + "/")
        let fleet = try FleetHosts(count: 2, endpoints: etcd.endpoints, shared: shared, tasks: FleetHosts.tickTask(every: "1s", sleep: "0.1"), cluster: """
            lease_ttl = "4s"
            username = "\(auth.user)"
            password_file = "\(auth.passwordFile)"
            """, prefix: prefix)
        try fleet.startAll()
        XCTAssertTrue(waitFor(20) { fleet.runs().filter { $0.end != nil }.count >= 3 }, fleet.hosts[0].daemon?.stderrTail ?? "")
        XCTAssertTrue(Dictionary(grouping: fleet.runs(), by: \.instant).values.allSatisfy { $0.count == 1 })
        let dump = try fleet.control(fleet.hosts[0], ["dump", "--json"])
        XCTAssertTrue(dump.contains(auth.passwordFile))
        XCTAssertFalse(dump.contains(auth.password), "the password is in the dump")
        let metrics = try fleet.control(fleet.hosts[0], ["metrics"])
        XCTAssertFalse(metrics.contains(auth.password))
        for host in fleet.hosts {
            host.daemon?.stop(within: 20)
            XCTAssertFalse(host.daemon?.stderr.contains(auth.password) ?? true, "the password is in \(host.name)'s log")
        }
    }

    func testAWrongPassword_isSaidWithTheEndpoint_andNothingRuns() throws {
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory(), members: 1)
        let shared = try makeScratchDirectory()
        let prefix = "/wk-auth/\(UInt32.random(in: 0 ... .max))"
        let auth = try etcd.enableAuth(prefix: prefix + "/")
        let wrong = shared + "/wrong-password"
        FileManager.default.createFile(atPath: wrong, contents: Data("not-\(auth.password)".utf8))
        let fleet = try FleetHosts(count: 1, endpoints: etcd.endpoints, shared: shared, tasks: FleetHosts.tickTask(every: "1s", sleep: "0.1"), cluster: """
            username = "\(auth.user)"
            password_file = "\(wrong)"
            """, prefix: prefix)
        try fleet.startAll()
        let daemon = try XCTUnwrap(fleet.hosts[0].daemon)
        XCTAssertTrue(daemon.waitForStderr(containing: "unable to get or renew the etcd lease", timeout: 15), daemon.stderrTail)
        let line = daemon.stderr.split(separator: "\n").first { $0.contains("unable to get or renew the etcd lease") }.map(String.init) ?? ""
        XCTAssertTrue(line.contains("etcd at \(etcd.endpoints[0]) refused the call") && line.contains("authentication failed"), line)
        Thread.sleep(forTimeInterval: 2)
        XCTAssertEqual(fleet.runs(), [])
    }
}
