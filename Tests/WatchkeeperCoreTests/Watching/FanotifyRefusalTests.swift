import SystemPackage
import XCTest

@testable import WatchkeeperCore

/// The reason said when fanotify cannot take a tree names what the administrator has to
/// change: an EPERM is a missing capability or a system call filter, told apart by the step
/// that failed and the process's own privileges.
final class FanotifyRefusalTests: XCTestCase {
    private let root = ProcessPrivileges(effectiveCapabilities: ~0, seccompFiltered: false)
    private let withoutSysAdmin = ProcessPrivileges(effectiveCapabilities: ~(1 << 21), seccompFiltered: false)
    private let filtered = ProcessPrivileges(effectiveCapabilities: ~0, seccompFiltered: true)
    private let shippedUnit = ProcessPrivileges(effectiveCapabilities: ~(1 << 21), seccompFiltered: true)

    private func refusal(_ step: FanotifyBackend.StartFailure.Step, _ error: Errno, _ privileges: ProcessPrivileges) -> String {
        FanotifyRefusal.tree(.init(step: step, error: error), fileSystem: "ext4", privileges: privileges)
    }

    func testAMarkRefusedWithoutCapSysAdmin_namesTheCapability_notOpenByHandleAt() {
        let text = refusal(.mark, .notPermitted, withoutSysAdmin)
        XCTAssertTrue(text.contains("needs CAP_SYS_ADMIN"), text)
        XCTAssertFalse(text.contains("open_by_handle_at"), text)
    }

    func testAMarkRefusedWithTheCapability_underAFilter_namesTheFilter() {
        let text = refusal(.mark, .notPermitted, filtered)
        XCTAssertTrue(text.contains("system call filter refuses fanotify_mark"), text)
        XCTAssertTrue(text.contains("drop-in"), text)
    }

    func testOpenByHandleAtRefused_namesCapDacReadSearch_orTheFilter() {
        let missing = ProcessPrivileges(effectiveCapabilities: ~(1 << 2), seccompFiltered: true)
        XCTAssertTrue(refusal(.resolveRoot, .notPermitted, missing).contains("needs CAP_DAC_READ_SEARCH"))
        XCTAssertTrue(refusal(.resolveRoot, .notPermitted, filtered).contains("system call filter refuses open_by_handle_at"))
    }

    /// Issue 36: with no capabilities at all, the first step to fail (open_by_handle_at)
    /// named CAP_DAC_READ_SEARCH only; granting it then failed again at the mark.
    func testNoCapabilitiesAtAll_namesBothThatFanotifyNeeds() {
        let none = ProcessPrivileges(effectiveCapabilities: 0, seccompFiltered: false)
        let text = refusal(.resolveRoot, .notPermitted, none)
        XCTAssertTrue(text.contains("CAP_DAC_READ_SEARCH"), text)
        XCTAssertTrue(text.contains("CAP_SYS_ADMIN"), text)
        XCTAssertFalse(refusal(.resolveRoot, .notPermitted, ProcessPrivileges(effectiveCapabilities: ~(1 << 2), seccompFiltered: false))
            .contains("CAP_SYS_ADMIN"), "with CAP_SYS_ADMIN there, only the one missing is named")
    }

    func testFanotifyInitRefusedUnderTheShippedUnit_namesTheFilterAndTheCapabilityTheMarkNeeds() {
        let text = FanotifyRefusal.group(.notPermitted, privileges: shippedUnit)
        XCTAssertTrue(text.contains("system call filter refuses fanotify_init"), text)
        XCTAssertTrue(text.contains("adds CAP_SYS_ADMIN"), text)
        XCTAssertFalse(FanotifyRefusal.group(.notPermitted, privileges: filtered).contains("adds CAP_SYS_ADMIN"))
        XCTAssertTrue(FanotifyRefusal.group(.notPermitted, privileges: withoutSysAdmin).contains("before Linux 5.13"))
    }

    func testWhatNoDropInHelps_isTheFileSystemsOrTheKernels() {
        XCTAssertTrue(refusal(.rootHandle, .notSupported, root).contains("(ext4) cannot encode file handles"))
        XCTAssertTrue(refusal(.mark, .improperLink, root).contains("no fsid"))
        XCTAssertTrue(refusal(.mark, .invalidArgument, root).contains("Linux 5.17"))
        XCTAssertTrue(refusal(.mark, .noSpace, root).contains("fs.fanotify.max_user_marks"))
        XCTAssertEqual(refusal(.openRoot, .ioError, root), "open: Input/output error (EIO)")
    }
}
