import XCTest

@testable import WatchkeeperCore

final class CgroupLocationTests: XCTestCase {
    func testUnifiedPath_isTheZeroLine_onAHybridHost() {
        let text = "9:name=systemd:/system.slice/x.service\n4:memory:/system.slice/x.service\n0::/system.slice/x.service\n"
        XCTAssertEqual(CgroupLocation.unifiedPath(procSelfCgroup: text), "/system.slice/x.service")
    }

    func testUnifiedPath_isNil_onAV1OnlyHost() {
        XCTAssertNil(CgroupLocation.unifiedPath(procSelfCgroup: "4:memory:/a\n1:cpu:/\n"))
    }

    func testUnifiedMount_findsCgroup2AmongV1Mounts_andUnescapesItsPoint() {
        let text = """
            30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
            33 30 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
            35 30 0:31 / /sys/fs/cgroup/my\\040unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate
            """
        let mount = CgroupLocation.unifiedMount(mountinfo: text)
        XCTAssertEqual(mount?.point, "/sys/fs/cgroup/my unified")
        XCTAssertEqual(mount?.root, "/")
    }

    func testDirectory_joinsThePathUnderTheMount() {
        XCTAssertEqual(CgroupLocation.directory(path: "/system.slice/x.service", mount: ("/sys/fs/cgroup", "/")),
                       "/sys/fs/cgroup/system.slice/x.service")
        XCTAssertEqual(CgroupLocation.directory(path: "/", mount: ("/sys/fs/cgroup", "/")), "/sys/fs/cgroup")
    }

    func testDirectory_stripsABindMountsRoot_andRefusesAPathOutsideIt() {
        XCTAssertEqual(CgroupLocation.directory(path: "/ns/a/b", mount: ("/sys/fs/cgroup", "/ns/a")), "/sys/fs/cgroup/b")
        XCTAssertNil(CgroupLocation.directory(path: "/ns/ab", mount: ("/sys/fs/cgroup", "/ns/a")))
    }

    func testUnenforceableLimits_nameEachKeyOnce_withTheMissingController() {
        var limits = JobLimits()
        limits.memoryMax = 64 << 20
        limits.cpuWeight = 50
        let reasons = JobContainment.processGroups(reason: "test").unenforceable(limits)
        XCTAssertEqual(reasons, ["memory_max (no delegated cgroup)", "cpu_weight (no delegated cgroup)"])
        XCTAssertEqual(JobContainment.processGroups(reason: "test").unenforceable(JobLimits()), [])
    }
}
