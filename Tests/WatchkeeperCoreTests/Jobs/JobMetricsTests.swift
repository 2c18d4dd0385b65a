import Dispatch
import Logging
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// What the engine's instruments export, read back from the exposition text the exporter
/// renders: the series of a task exist at 0 before it runs, and each record moves exactly
/// the series it should.
final class JobMetricsTests: XCTestCase {
    private let task = JobKey(.task, "backup")
    private let watch = JobKey(.watch, "inbox")

    private func record(_ outcome: RunOutcome, expiry: ExpiryReason? = nil, started: Bool = true,
                        finishedAt: WallTime = WallTime(secondsSinceEpoch: 1_700_000_000, nanoseconds: 500_000_000)) -> RunRecord {
        RunRecord(name: "backup", runID: RunID.random().description, attempt: 1, outcome: outcome, scheduledAt: nil,
                  startedAt: started ? finishedAt : nil, finishedAt: finishedAt, duration: started ? .milliseconds(1_500) : .zero,
                  exit: nil, expiry: expiry, lateness: nil, detail: nil)
    }

    func testPreparedTask_exportsEveryOutcomeAndExpiryReasonAtZero_beforeItsFirstRun() throws {
        let exporter = makeExporter()
        exporter.jobMetrics.prepare(task)
        let text = try rendered(exporter)
        for outcome in RunOutcome.allCases where outcome != .ranElsewhere && outcome != .held {
            XCTAssertEqual(text.value("watchkeeper_jobs_total", ["kind": "task", "name": "backup", "outcome": outcome.rawValue]), 0, outcome.rawValue)
        }
        // The fleet's outcomes only where they happen: a daemon without [cluster] exports
        // the series it did before.
        XCTAssertNil(text.value("watchkeeper_jobs_total", ["kind": "task", "name": "backup", "outcome": "ran_elsewhere"]))
        exporter.jobMetrics.recorded(record(.ranElsewhere, started: false), key: task)
        XCTAssertEqual(try rendered(exporter).value("watchkeeper_jobs_total", ["kind": "task", "name": "backup", "outcome": "ran_elsewhere"]), 1)
        for reason in ["budget", "shutdown", "replaced"] {
            XCTAssertEqual(text.value("watchkeeper_job_expirations_total", ["kind": "task", "name": "backup", "reason": reason]), 0, reason)
        }
        XCTAssertEqual(text.value("watchkeeper_job_last_success_timestamp_seconds", ["name": "backup"]), 0)
        XCTAssertEqual(text.value("watchkeeper_job_last_failure_timestamp_seconds", ["name": "backup"]), 0)
        XCTAssertEqual(text.value("watchkeeper_job_duration_seconds_count", ["name": "backup"]), 0)
        XCTAssertEqual(text.types["watchkeeper_jobs_total"], "counter")
        XCTAssertEqual(text.types["watchkeeper_job_duration_seconds"], "histogram")
        XCTAssertEqual(text.value("watchkeeper_build_info", ["version": WatchkeeperVersion.current]), 1)
    }

    func testHooks_areExportedAtZeroFromTheStart_andCountedByHookAndResult() throws {
        let exporter = makeExporter()
        var text = try rendered(exporter)
        for hook in ["on_failure", "on_success"] {
            for result in ["ok", "failed", "expired", "unstarted", "cancelled"] {
                XCTAssertEqual(text.value("watchkeeper_hooks_total", ["hook": hook, "result": result]), 0, "\(hook) \(result)")
            }
        }
        XCTAssertEqual(text.types["watchkeeper_hooks_total"], "counter")
        exporter.jobMetrics.hookEnded(.failure, result: .expired)
        exporter.jobMetrics.hookEnded(.failure, result: .expired)
        exporter.jobMetrics.hookEnded(.success, result: .ok)
        text = try rendered(exporter)
        XCTAssertEqual(text.value("watchkeeper_hooks_total", ["hook": "on_failure", "result": "expired"]), 2)
        XCTAssertEqual(text.value("watchkeeper_hooks_total", ["hook": "on_success", "result": "ok"]), 1)
        XCTAssertEqual(text.value("watchkeeper_hooks_total", ["hook": "on_failure", "result": "ok"]), 0)
    }

    func testRemovedTask_leavesTheExport_andARunEndingAfterDoesNotBringItBack() throws {
        let exporter = makeExporter()
        let metrics = exporter.jobMetrics
        metrics.prepare(task)
        metrics.prepare(watch)
        metrics.recorded(record(.ok), key: task)
        metrics.forget(task)
        metrics.recorded(record(.failed), key: task)  // its last run, ending after the reload
        let text = try rendered(exporter)
        XCTAssertNil(text.value("watchkeeper_jobs_total", ["name": "backup", "outcome": "ok"]))
        XCTAssertNil(text.value("watchkeeper_job_last_success_timestamp_seconds", ["name": "backup"]))
        XCTAssertNil(text.value("watchkeeper_job_duration_seconds_count", ["name": "backup"]))
        XCTAssertEqual(text.value("watchkeeper_jobs_total", ["name": "inbox", "outcome": "ok"]), 0, "the others stay")
        // Configured again (a rename back): exported again, from 0.
        metrics.prepare(task)
        XCTAssertEqual(try rendered(exporter).value("watchkeeper_jobs_total", ["name": "backup", "outcome": "ok"]), 0)
    }

    func testRecords_countByOutcome_andSetTheLastSuccessAndFailureTimes() throws {
        let exporter = makeExporter()
        let metrics = exporter.jobMetrics
        metrics.prepare(task)
        metrics.recorded(record(.ok, finishedAt: WallTime(secondsSinceEpoch: 1_700_000_100, nanoseconds: 250_000_000)), key: task)
        metrics.recorded(record(.ok), key: task)
        metrics.recorded(record(.failed, finishedAt: WallTime(secondsSinceEpoch: 1_700_000_200, nanoseconds: 0)), key: task)
        metrics.recorded(record(.missed, started: false), key: task)
        let text = try rendered(exporter)
        XCTAssertEqual(text.value("watchkeeper_jobs_total", ["name": "backup", "outcome": "ok"]), 2)
        XCTAssertEqual(text.value("watchkeeper_jobs_total", ["name": "backup", "outcome": "failed"]), 1)
        XCTAssertEqual(text.value("watchkeeper_jobs_total", ["name": "backup", "outcome": "missed"]), 1)
        XCTAssertEqual(text.value("watchkeeper_jobs_total", ["name": "backup", "outcome": "expired"]), 0)
        // The last one to end ok, not the latest time seen: records come in the order runs end.
        XCTAssertEqual(text.value("watchkeeper_job_last_success_timestamp_seconds", ["name": "backup"]), 1_700_000_000.5)
        XCTAssertEqual(text.value("watchkeeper_job_last_failure_timestamp_seconds", ["name": "backup"]), 1_700_000_200)
        // Three runs started (1.5 s each); the missed one never did.
        XCTAssertEqual(text.value("watchkeeper_job_duration_seconds_count", ["name": "backup"]), 3)
        XCTAssertEqual(text.value("watchkeeper_job_duration_seconds_sum", ["name": "backup"]), 4.5)
        XCTAssertEqual(text.value("watchkeeper_job_duration_seconds_bucket", ["name": "backup", "le": "1.0"]), 0)
        XCTAssertEqual(text.value("watchkeeper_job_duration_seconds_bucket", ["name": "backup", "le": "5.0"]), 3)
    }

    func testExpiredRecord_countsAsAFailure_andByItsReason() throws {
        let exporter = makeExporter()
        exporter.jobMetrics.recorded(record(.expired, expiry: .budget), key: watch)
        exporter.jobMetrics.recorded(record(.expired, expiry: .shutdown), key: watch)
        exporter.jobMetrics.recorded(record(.expired, expiry: .budget), key: watch)
        let text = try rendered(exporter)
        XCTAssertEqual(text.value("watchkeeper_jobs_total", ["kind": "watch", "name": "inbox", "outcome": "expired"]), 3)
        XCTAssertEqual(text.value("watchkeeper_job_expirations_total", ["kind": "watch", "reason": "budget"]), 2)
        XCTAssertEqual(text.value("watchkeeper_job_expirations_total", ["kind": "watch", "reason": "shutdown"]), 1)
        XCTAssertEqual(text.value("watchkeeper_job_expirations_total", ["kind": "watch", "reason": "replaced"]), 0)
        XCTAssertEqual(text.value("watchkeeper_job_last_failure_timestamp_seconds", ["kind": "watch"]), 1_700_000_000.5)
        XCTAssertEqual(text.value("watchkeeper_job_last_success_timestamp_seconds", ["kind": "watch"]), 0)
    }

    func testStartLatency_ofAFileIsFromItsEvent_ofABatchFromItsOldestFile_ofATaskFromItsScheduledInstant() {
        func file(_ eventAt: UInt64?) -> FileSubject {
            FileSubject(path: Array("/in/a".utf8), rootLength: 3, event: .closedWrite, identity: nil,
                        eventAt: eventAt.map { MonotonicInstant(nanoseconds: $0) })
        }
        let nanoseconds: UInt64 = 10_000_000_000
        let now = MonotonicInstant(nanoseconds: nanoseconds)
        let wallNow = WallTime(secondsSinceEpoch: 1_700_000_010, nanoseconds: 0)
        XCTAssertEqual(JobMetrics.startLatency(of: .file(file(nanoseconds - 2_500_000)), now: now, wallNow: wallNow), 2_500_000)
        XCTAssertEqual(JobMetrics.startLatency(of: .batch([file(nanoseconds - 100), file(nanoseconds - 7_000), file(nil)], input: .argv), now: now, wallNow: wallNow), 7_000)
        XCTAssertNil(JobMetrics.startLatency(of: .file(file(nil)), now: now, wallNow: wallNow))
        let scheduled = WallTime(secondsSinceEpoch: 1_700_000_008, nanoseconds: 750_000_000)
        XCTAssertEqual(JobMetrics.startLatency(of: .schedule(scheduledAt: scheduled), now: now, wallNow: wallNow), 1_250_000_000)
        XCTAssertNil(JobMetrics.startLatency(of: .schedule(scheduledAt: nil), now: now, wallNow: wallNow))
        // A clock that went back between the event and now is no negative latency.
        XCTAssertEqual(JobMetrics.startLatency(of: .file(file(nanoseconds + 5)), now: now, wallNow: wallNow), 0)
    }

    func testStartedFirstAttempt_recordsItsLatencyInTheHistogram() throws {
        let exporter = makeExporter()
        let eventAt = MonotonicInstant.now
        exporter.jobMetrics.started(watch, subject: .file(FileSubject(path: Array("/in/a".utf8), rootLength: 3, event: .closedWrite,
                                                                      identity: nil, eventAt: eventAt)))
        exporter.jobMetrics.started(watch, subject: .file(FileSubject(path: Array("/in/b".utf8), rootLength: 3, event: .closedWrite,
                                                                      identity: nil, eventAt: nil)))
        let text = try rendered(exporter)
        XCTAssertEqual(text.value("watchkeeper_job_start_latency_seconds_count", ["kind": "watch", "name": "inbox"]), 1)
        XCTAssertEqual(text.value("watchkeeper_job_start_latency_seconds_bucket", ["kind": "watch", "le": "+Inf"]), 1)
    }
}
