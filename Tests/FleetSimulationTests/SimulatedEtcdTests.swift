import WatchkeeperCore
import XCTest

@testable import FleetSimulation

/// The simulated etcd keeps etcd's rules that the fleet relies on (as EtcdTestCluster
/// recorded them against Debian's etcd 3.4): transactions at one revision, leases whose keys
/// all go at one revision when they expire, no expiry without quorum and a fresh TTL after
/// it, watches that replay from a revision.
final class SimulatedEtcdTests: XCTestCase {
    private let loop = SimLoop(seed: 1)
    private lazy var etcd: SimulatedEtcd = {
        let etcd = SimulatedEtcd(loop: loop)
        etcd.network = SimNetwork(loop: loop)
        return etcd
    }()

    private func put(_ key: String, lease: Int64 = 0) throws -> EtcdTxnResult {
        try etcd.txn(EtcdTxn(compare: [EtcdCompare(key, .createRevision(0))], success: [.put(key: key, value: "v", lease: lease)],
                             failure: [.range(key: key)]))
    }

    func testACreateIfAbsent_succeedsOnce_andTheSecondFindsTheFirst() throws {
        XCTAssertTrue(try put("/a").succeeded)
        let second = try put("/a")
        XCTAssertFalse(second.succeeded)
        XCTAssertEqual(second.ranges.first?.first?.key, "/a")
        XCTAssertEqual(etcd.revision, 2, "a failed compare makes no revision")
    }

    func testALeaseThatIsNotRenewed_expiresWithAllItsKeysAtOneRevision() throws {
        let lease = etcd.grant(ttl: 3)
        _ = try put("/a", lease: lease)
        _ = try put("/b", lease: lease)
        loop.run(until: .seconds(2.9))
        XCTAssertEqual(etcd.keepAlive(lease), 3)
        loop.run(until: .seconds(5.8))
        XCTAssertEqual(etcd.allKeys.count, 2, "renewed at 2.9 s, it lives until 5.9 s")
        loop.run(until: .seconds(6))
        XCTAssertEqual(etcd.allKeys.count, 0)
        XCTAssertEqual(etcd.history.last?.events.count, 2, "both keys went at one revision")
        XCTAssertEqual(etcd.keepAlive(lease), 0, "etcd no longer knows the lease")
    }

    func testWithoutQuorum_noLeaseExpires_andQuorumBackGivesEveryLeaseAFreshTTL() throws {
        let lease = etcd.grant(ttl: 3)
        _ = try put("/a", lease: lease)
        etcd.loseQuorum()
        loop.run(until: .seconds(10))
        XCTAssertEqual(etcd.allKeys.count, 1)
        etcd.regainQuorum()
        loop.run(until: .seconds(12.9))
        XCTAssertEqual(etcd.allKeys.count, 1)
        loop.run(until: .seconds(13.1))
        XCTAssertEqual(etcd.allKeys.count, 0)
    }

    func testAPutOnALeaseThatIsGone_failsTheWholeTransaction() throws {
        let lease = etcd.grant(ttl: 1)
        loop.run(until: .seconds(2))
        XCTAssertThrowsError(try put("/a", lease: lease))
        XCTAssertTrue(etcd.allKeys.isEmpty)
    }
}
