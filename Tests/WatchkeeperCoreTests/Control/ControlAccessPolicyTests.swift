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
