import XCTest

@testable import WatchkeeperCore

/// Which hook a run's last record calls for, and how the hooks' endings are counted: the
/// decision and the tally apart from the hooks' processes.
final class JobHooksTests: XCTestCase {
    private func record(_ outcome: RunOutcome, expiry: ExpiryReason? = nil) -> RunRecord {
        RunRecord(name: "job", runID: "0000000000000001", attempt: 1, outcome: outcome, scheduledAt: nil, startedAt: nil,
                  finishedAt: .now(), duration: .zero, exit: nil, expiry: expiry, lateness: nil, detail: nil)
    }

    func testTheHookAfterARecord_followsItsOutcome_theJobsHooks_andTheDrain() {
        var both = JobSettings(command: .shell("true"))
        both.onFailure = .shell("echo failed")
        both.onSuccess = .shell("echo ok")
        var failureOnly = JobSettings(command: .shell("true"))
        failureOnly.onFailure = .shell("echo failed")
        let none = JobSettings(command: .shell("true"))
        let rows: [(String, RunRecord, JobSettings, Bool, HookStart)] = [
            ("ok runs on_success", record(.ok), both, true, .start(.success)),
            ("failed runs on_failure", record(.failed), both, true, .start(.failure)),
            ("expired on its budget runs on_failure", record(.expired, expiry: .budget), both, true, .start(.failure)),
            ("expired when replaced runs on_failure", record(.expired, expiry: .replaced), both, true, .start(.failure)),
            ("expired at the daemon's shutdown runs none", record(.expired, expiry: .shutdown), both, true, .none),
            ("cancelled runs none", record(.cancelled), both, true, .none),
            ("skipped runs none", record(.skippedOverlap), both, true, .none),
            ("missed runs none", record(.missed), both, true, .none),
            ("held runs none", record(.held), both, true, .none),
            ("ran elsewhere runs none", record(.ranElsewhere), both, true, .none),
            ("ok without on_success runs none", record(.ok), failureOnly, true, .none),
            ("failed without hooks runs none", record(.failed), none, true, .none),
            ("failed while the drain expires runs nothing, and says so", record(.failed), both, false, .notRun(.failure)),
            ("ok while the drain expires runs nothing, and says so", record(.ok), both, false, .notRun(.success)),
            ("no hook to refuse while the drain expires", record(.ok), failureOnly, false, .none),
        ]
        for (name, record, settings, mayStart, expected) in rows {
            XCTAssertEqual(HookStart.after(record, settings: settings, mayStart: mayStart), expected, name)
        }
    }

    func testTheTally_countsEachOutcomePerGroup_andTheDumpShowsOnlyWhatHappened() {
        var tally = OutcomeTally<HookKind, HookResult>()
        tally.add(.ok, to: .success)
        tally.add(.ok, to: .success)
        tally.add(.expired, to: .failure)
        XCTAssertEqual(tally[.success, .ok], 2)
        XCTAssertEqual(tally[.failure, .expired], 1)
        XCTAssertEqual(tally[.failure, .ok], 0)
        XCTAssertEqual(Set(tally.groups), [.success, .failure])
        XCTAssertEqual(tally.describe(.success), .object([.init("ok", .int(2))]))
        XCTAssertEqual(tally.describe(.failure), .object([.init("expired", .int(1))]))

        var runs = OutcomeTally<JobKey, RunOutcome>()
        let key = JobKey(.task, "backup")
        runs.add(.failed, to: key)
        runs.add(.ok, to: key)
        // In RunOutcome's declared order, whatever the order they were counted in.
        XCTAssertEqual(runs.describe(key), .object([.init("ok", .int(1)), .init("failed", .int(1))]))
        XCTAssertEqual(runs.describe(JobKey(.task, "never")), .object([]))
    }

    func testNoHookRunning_theDumpListsNone_andEveryKindWithItsTotals() {
        let hooks = JobHooks(logger: .init(label: "test"))
        XCTAssertEqual(hooks.count, 0)
        XCTAssertEqual(hooks.describeRunning(now: .now), .array([]))
        XCTAssertEqual(hooks.describeTotals(), .object([.init("on_failure", .object([])), .init("on_success", .object([]))]))
    }
}
