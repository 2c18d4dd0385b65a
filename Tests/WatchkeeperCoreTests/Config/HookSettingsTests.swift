import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// `on_failure`, `on_success` and their budgets, on tasks and watch rules alike: read in
/// the forms `command` has, with the placeholders of the job plus {outcome} and {budget}.
final class HookSettingsTests: XCTestCase {
    func testParse_taskHooks_readBothFormsAndTheirBudgets() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [[task]]
            name = "backup"
            every = "1h"
            command = ["/bin/true"]
            on_failure = ["/usr/local/bin/page", "{task}", "{run_id}", "{attempt}", "{outcome}", "{budget}"]
            on_failure_budget = "2m"
            on_success = ["/usr/local/bin/done", "{task}"]
            on_success_budget = "500ms"

            [[task]]
            name = "sh"
            every = "1h"
            shell = true
            command = "true"
            on_failure = 'echo "$WATCHKEEPER_OUTCOME" >> /tmp/failures'
            """))
        let job = configuration.tasks[0].job
        XCTAssertEqual(job.onFailure, .arguments(["/usr/local/bin/page", "{task}", "{run_id}", "{attempt}", "{outcome}", "{budget}"]))
        XCTAssertEqual(job.onFailureBudget, .seconds(120))
        XCTAssertEqual(job.onSuccess, .arguments(["/usr/local/bin/done", "{task}"]))
        XCTAssertEqual(job.onSuccessBudget, .milliseconds(500))
        let shell = configuration.tasks[1].job
        XCTAssertEqual(shell.onFailure, .shell(#"echo "$WATCHKEEPER_OUTCOME" >> /tmp/failures"#))
        XCTAssertNil(shell.onSuccess)
        XCTAssertEqual(shell.onFailureBudget, .seconds(30), "the default, as on_expire_budget's")
        XCTAssertEqual(shell.onSuccessBudget, .seconds(30))
    }

    func testParse_watchHooks_getTheRulesPlaceholders() throws {
        let watch = try XCTUnwrap(parsedConfiguration("""
            [[watch]]
            name = "inbox"
            path = "/srv/inbox"
            command = ["/usr/local/bin/import", "{path}"]
            on_failure = ["/usr/local/bin/quarantine", "{path}", "{name}", "{outcome}"]
            """)?.watches.first)
        XCTAssertEqual(watch.job.onFailure, .arguments(["/usr/local/bin/quarantine", "{path}", "{name}", "{outcome}"]))
    }

    func testParse_hookAsAStringWithoutShell_isRefusedWithTheArrayAdvice() {
        assertSingleConfigError("""
            [[task]]
            name = "a"
            every = "1h"
            command = ["/bin/true"]
            on_failure = "mail root"
            """, at: (5, 14),
            #"task.on_failure must be an array of arguments, like ["/usr/bin/rsync", "-a", "{task}"]; set shell = true to run a string through /bin/sh -c"#)
    }

    func testParse_hookWithTheExpireHandlersPid_isAnUnknownPlaceholder() {
        // The job is gone when a hook runs: its pid means nothing any more.
        let errors = configErrors("""
            [[task]]
            name = "a"
            every = "1h"
            command = ["/bin/true"]
            on_success = ["/bin/kill", "{pid}"]
            """)
        XCTAssertEqual(errors.count, 1, "\(errors)")
        XCTAssertTrue(errors.first?.message.hasPrefix(#"task.on_success: unknown placeholder "{pid}""#) == true, "\(errors)")
    }

    func testParse_hookBudgetOutOfRange_isRefusedWithTheRange() {
        assertSingleConfigError("""
            [[task]]
            name = "a"
            every = "1h"
            command = ["/bin/true"]
            on_failure = ["/bin/true"]
            on_failure_budget = "2h"
            """, at: (6, 21), #"task.on_failure_budget = "2h" is out of range (10ms to 1h)"#)
        let errors = configErrors("""
            [[task]]
            name = "a"
            every = "1h"
            command = ["/bin/true"]
            on_success_budget = "soon"
            """)
        XCTAssertEqual(errors.count, 1, "\(errors)")
        XCTAssertTrue(errors.first?.message.hasPrefix(#"bad duration "soon" for task.on_success_budget: "#) == true, "\(errors)")
    }
}
