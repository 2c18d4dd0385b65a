import XCTest
@testable import WatchkeeperCore

/// Who the control socket lets in, decided from the kernel's word about the peer.
final class ControlAccessPolicyTests: XCTestCase {
    let access = ControlAccess(daemonUID: 998, group: (name: "wkadmin", gid: 1500))

    func peer(uid: UInt32, gid: UInt32 = 100, groups: [UInt32] = []) -> ControlPeer {
        ControlPeer(pid: 1, uid: uid, gid: gid, groups: groups)
    }

    func testRootAndTheDaemonsUser_areAlwaysAllowed() {
        XCTAssertTrue(access.allows(peer(uid: 0)))
        XCTAssertTrue(access.allows(peer(uid: 998)))
        XCTAssertTrue(ControlAccess(daemonUID: 0, group: nil).allows(peer(uid: 0)))
    }

    func testControlGroup_asPrimaryOrSupplementaryGroup_isAllowed() {
        XCTAssertTrue(access.allows(peer(uid: 1000, gid: 1500)))
        XCTAssertTrue(access.allows(peer(uid: 1000, gid: 100, groups: [27, 1500])))
    }

    func testEveryoneElse_isRefused_andTheMessageSaysWhoMay() {
        XCTAssertFalse(access.allows(peer(uid: 1000, gid: 100, groups: [27])))
        XCTAssertFalse(ControlAccess(daemonUID: 0, group: nil).allows(peer(uid: 1000, gid: 0)), "gid 0 alone is not root")
        XCTAssertTrue(access.whoMay.contains("members of group wkadmin"), access.whoMay)
        XCTAssertTrue(ControlAccess(daemonUID: 0, group: nil).whoMay.contains("set [daemon] control_group"))
    }

    func testReadGroup_mayCallOnlyTheMethodsThatChangeNothing() {
        let access = ControlAccess(daemonUID: 998, group: (name: "wkadmin", gid: 1500), readGroup: (name: "wkread", gid: 1600))
        let reader = peer(uid: 1000, gid: 100, groups: [1600])
        XCTAssertEqual(access.level(of: reader), .read)
        XCTAssertTrue(access.allows(reader), "a reader is let in at the door")
        for method in [ControlInterface.Method.status, .tasks, .watches, .history, .next, .fleet, .metrics] {
            XCTAssertTrue(access.permits(method, for: reader), "\(method)")
        }
        for method in [ControlInterface.Method.trigger, .cancel, .reload, .dump] {
            XCTAssertFalse(access.permits(method, for: reader), "\(method)")
            XCTAssertTrue(access.permits(method, for: peer(uid: 1001, gid: 1500, groups: [1600])), "control_group wins: \(method)")
            XCTAssertTrue(access.permits(method, for: peer(uid: 0)), "root: \(method)")
        }
        XCTAssertNil(access.level(of: peer(uid: 1002, gid: 100, groups: [27])))
        XCTAssertFalse(access.permits(.status, for: peer(uid: 1002)))
        XCTAssertTrue(access.whoMay.contains("members of group wkread only to read"), access.whoMay)
        XCTAssertEqual(access.describe(for: reader)["level"], .string("read"))
        XCTAssertEqual(access.describe(for: peer(uid: 0))["level"], .string("control"))
    }

    func testEveryMethodThatActs_isOutOfReadOnlyReach() {
        let acting = ControlInterface.Method.allCases.filter { !$0.readsOnly }
        XCTAssertEqual(Set(acting), [.trigger, .cancel, .reload, .dump], "Dump writes the journal and state.json")
    }

    func testRefusals_areLoggedOncePerUidPerMinute_withTheCountInBetween() {
        var log = RefusalLog()
        func second(_ count: UInt64) -> MonotonicInstant { MonotonicInstant(nanoseconds: count * 1_000_000_000) }
        XCTAssertEqual(log.record(uid: 5, now: second(10)), "")
        XCTAssertNil(log.record(uid: 5, now: second(11)))
        XCTAssertNil(log.record(uid: 5, now: second(12)))
        XCTAssertEqual(log.record(uid: 6, now: second(12)), "", "another uid is logged at once")
        XCTAssertEqual(log.record(uid: 5, now: second(71)), " (2 more from this uid in the last minute not logged)")
    }
}
