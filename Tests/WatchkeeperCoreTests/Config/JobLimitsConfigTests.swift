import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

final class JobLimitsConfigTests: XCTestCase {
    private func task(_ keys: String) -> String {
        "[[task]]\nname = \"a\"\ncommand = [\"/bin/true\"]\nevery = \"1h\"\n\(keys)\n"
    }

    func testLimits_areReadIntoTheJob_andMapToTheirCgroupFiles() throws {
        let loaded = try ConfigLoader.parse(source: task("memory_max = \"512M\"\ntasks_max = 64\ncpu_weight = 20\nio_weight = 300"), path: "/etc/w.toml", environment: [:]).get()
        let limits = loaded.tasks[0].job.limits
        XCTAssertEqual(limits.memoryMax, 512 << 20)
        XCTAssertEqual(limits.summary, "memory_max 512M, tasks_max 64, cpu_weight 20, io_weight 300")
        XCTAssertEqual(limits.cgroupFiles.map { "\($0.file)=\($0.value)" },
                       ["memory.max=536870912", "memory.swap.max=0", "pids.max=64", "cpu.weight=20", "io.weight=default 300"])
    }

    func testMemoryMax_takesBytesAsAnInteger_orWithABinaryUnit() {
        XCTAssertEqual(JobLimits.parseSize("1048576"), 1 << 20)
        XCTAssertEqual(JobLimits.parseSize("2g"), 2 << 30)
        XCTAssertEqual(JobLimits.parseSize("64K"), 64 << 10)
        XCTAssertNil(JobLimits.parseSize("1.5G"))
        XCTAssertNil(JobLimits.parseSize("M"))
        XCTAssertNil(JobLimits.parseSize("99999999999T"), "overflow")
        XCTAssertNil(JobLimits.parseSize("١٢M"), "non-ASCII digits")
    }

    func testMemoryMax_thatIsNotASize_isOneErrorAtTheValue() {
        assertSingleConfigError(task("memory_max = \"lots\""), at: (5, 14),
                                #"task.memory_max = "lots" must be a size in bytes, or with K, M, G or T (powers of 1024), like "512M""#)
    }

    func testMemoryMax_belowOneMebibyte_isRefusedWithTheReason() {
        assertSingleConfigError(task("memory_max = 4096"), at: (5, 14),
                                "task.memory_max = 4096 bytes is too small: at least 1M, or a job starts only to be killed by the OOM killer")
    }

    func testTasksMax_outOfRange_isOneError() {
        assertSingleConfigError(task("tasks_max = 0"), at: (5, 13), "task.tasks_max = 0 is out of range (1 to 4194304)")
    }
}
