import Dispatch
import Foundation
import Logging
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A run's record reaches the journal before its hook's output: the hook starts only once
/// the log sink has written the record, however slowly the sink writes.
final class JobHookOrderTests: XCTestCase {
    func testAHook_startsOnlyOnceItsRunsRecordIsWritten_byASlowSink() throws {
        let marker = try makeScratchDirectory() + "/hook-ran"
        // At each write of the run's record, after a slow journal's 300 ms: had the hook run?
        let hookHadRun = Arrivals<Bool>()
        let sink = LogSink(target: .stderr, level: .info, problemCapacity: 10, stderrStream: StderrStream(fd: open("/dev/null", O_WRONLY | O_CLOEXEC))) { entries in
            for case .stderr(let bytes) in entries where String(decoding: bytes, as: UTF8.self).contains("outcome=failed") {
                usleep(300_000)
                hookHadRun.add(access(marker, F_OK) == 0)
            }
        }
        let context = JobContext(queue: SubsystemQueue(name: "test.jobs.\(UUIDLess.next())"), sink: sink, logger: Logger(label: "test"),
                                 sources: SourceRegistry(), daemonEnvironment: ["PATH": "/usr/bin:/bin"])
        let engine = JobEngine(context: context, maxJobs: 2)
        // The patience is for a sink that takes nothing at all; this one is only slow.
        engine.hooks.recordPatience = .seconds(60)
        let key = JobKey(.task, "quick")
        let done = Arrivals<JobCompletion>()
        engine.queue.queue.sync {
            engine.configure(shellGroup(key, "exit 3") { $0.onFailure = .arguments(["/usr/bin/touch", marker]) })
            engine.submit(key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
        }
        XCTAssertTrue(done.wait())
        XCTAssertTrue(hookHadRun.wait(), "the record was never written")
        XCTAssertEqual(hookHadRun.first, false, "the hook ran before its run's record was written")
        XCTAssertTrue(waitFor(10) { access(marker, F_OK) == 0 }, "the hook did not run once the record was written")
        withExtendedLifetime(engine) {}
    }
}
