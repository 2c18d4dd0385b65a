import XCTest

@testable import WatchkeeperCore

final class ProcessPrivilegesTests: XCTestCase {
    func testStatusLines_giveTheEffectiveCapabilitiesAndTheFilter() {
        // The shipped unit's bounding set (without CAP_SYS_ADMIN) under its system call filter.
        let privileges = ProcessPrivileges.parse("Name:\twatchkeeper\nCapInh:\t0000000000000000\nCapEff:\t00000000000000ef\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n")
        XCTAssertEqual(privileges.effectiveCapabilities, 0xef)
        XCTAssertTrue(privileges.seccompFiltered)
        XCTAssertEqual(privileges.has(ProcessPrivileges.dacReadSearch), true)
        XCTAssertEqual(privileges.has(ProcessPrivileges.sysAdmin), false)
    }

    func testNoStatus_knowsNothing_andClaimsNoFilter() {
        let privileges = ProcessPrivileges.parse("")
        XCTAssertNil(privileges.has(ProcessPrivileges.sysAdmin))
        XCTAssertFalse(privileges.seccompFiltered)
    }

    func testThisProcess_readsItsOwnStatus() {
        XCTAssertNotNil(ProcessPrivileges.current().effectiveCapabilities)
    }
}
