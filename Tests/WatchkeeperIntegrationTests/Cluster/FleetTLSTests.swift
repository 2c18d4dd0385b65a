import Foundation
import XCTest
import WatchkeeperCore
import WatchkeeperTestSupport

/// etcd with TLS and client certificates (`--client-cert-auth`), certificates made by the
/// test with openssl.
final class FleetTLSTests: XCTestCase {
    func testAFleetTaskRunsOverTLSWithAClientCertificate() throws {
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory(), tls: true)
        let tls = try XCTUnwrap(etcd.tls)
        let shared = try makeScratchDirectory()
        let fleet = try FleetHosts(count: 2, endpoints: etcd.endpoints, shared: shared, tasks: FleetHosts.tickTask(every: "1s", sleep: "0.1"), cluster: """
            ca_file = "\(tls.caCertificate)"
            cert_file = "\(tls.clientCertificate)"
            key_file = "\(tls.clientKey)"
            """)
        try fleet.startAll()
        XCTAssertTrue(waitFor(20) { fleet.runs().filter { $0.end != nil }.count >= 4 }, fleet.hosts[0].daemon?.stderrTail ?? "")
        let byInstant = Dictionary(grouping: fleet.runs(), by: \.instant)
        XCTAssertTrue(byInstant.values.allSatisfy { $0.count == 1 }, "\(byInstant)")
        let keys = try etcd.getPrefix(fleet.prefix + "/tasks/tick/fires/")
        XCTAssertGreaterThanOrEqual(keys.count, 4)
    }

    func testACertificateEtcdRefuses_isSaidWithTheEndpointAndTheReason_andNothingRuns() throws {
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory(), members: 1, tls: true)
        let tls = try XCTUnwrap(etcd.tls)
        let shared = try makeScratchDirectory()
        let fleet = try FleetHosts(count: 1, endpoints: etcd.endpoints, shared: shared, tasks: FleetHosts.tickTask(every: "1s", sleep: "0.1"), cluster: """
            ca_file = "\(tls.caCertificate)"
            cert_file = "\(tls.foreignClientCertificate)"
            key_file = "\(tls.foreignClientKey)"
            """)
        try fleet.startAll()
        let daemon = try XCTUnwrap(fleet.hosts[0].daemon)
        XCTAssertTrue(daemon.waitForStderr(containing: "unable to get or renew the etcd lease", timeout: 15), daemon.stderrTail)
        let line = daemon.stderr.split(separator: "\n").first { $0.contains("unable to get or renew the etcd lease") }.map(String.init) ?? ""
        XCTAssertTrue(line.contains("etcd at \(etcd.endpoints[0])"), line)
        XCTAssertTrue(line.contains("TLS failed") && line.contains("alert"), line)
        Thread.sleep(forTimeInterval: 2)
        XCTAssertEqual(fleet.runs(), [], "a fleet fire ran without a lease")
    }
}
