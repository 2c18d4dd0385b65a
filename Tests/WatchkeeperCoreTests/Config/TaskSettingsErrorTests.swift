import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// One test per class of problem in a `[[task]]`: the exact `LINE:COLUMN` and message
/// `check-config` prints.
extension TaskSettingsTests {
    func testParse_taskWithoutCommand_reportsTheMissingKeyAtItsHeader() {
        let source = """
            [[task]]
            name = "a"
            every = "1h"
            """
        assertSingleConfigError(source, at: (1, 3), #"missing required key "command" in [[task]] "a""#)
    }

    func testParse_stringCommandWithoutShell_isRefusedAndSuggestsShellTrue() {
        let source = """
            [[task]]
            name = "a"
            command = "/bin/echo hello"
            every = "1h"
            """
        assertSingleConfigError(source, at: (3, 11), Self.arrayAdvice)
    }

    func testParse_arrayCommandWithShellTrue_mustBeAString() {
        let source = """
            [[task]]
            name = "a"
            shell = true
            command = ["/bin/echo", "hello"]
            every = "1h"
            """
        assertSingleConfigError(source, at: (4, 11), "task.command must be a string when shell = true")
    }

    func testParse_nonStringElementInCommand_isReportedAtThatElement() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/sleep", 5]
            every = "1h"
            """
        assertSingleConfigError(source, at: (3, 26), "task.command must be an array of strings; element 2 is an integer")
    }

    func testParse_emptyCommand_isRefused() {
        let source = """
            [[task]]
            name = "a"
            command = []
            every = "1h"
            """
        assertSingleConfigError(source, at: (3, 11), "task.command must not be empty")
    }

    func testParse_unknownPlaceholderInAnArgument_isReportedAtThatArgumentAndListsTheKnownOnes() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/echo", "{nmae}"]
            every = "1h"
            """
        assertSingleConfigError(
            source, at: (3, 25),
            #"task.command: unknown placeholder "{nmae}" in "{nmae}" "# + Self.knownPlaceholders
        )
    }

    func testParse_onExpirePlaceholders_addPidAndBudgetToTheTaskOnes() {
        XCTAssertNotNil(parsedConfiguration("""
            [[task]]
            name = "a"
            command = ["/bin/true"]
            on_expire = ["/bin/kill", "-USR1", "{pid}", "{budget}", "{task}"]
            every = "1h"
            """))
        // ...but only there.
        assertSingleConfigError("""
            [[task]]
            name = "a"
            command = ["/bin/kill", "{pid}"]
            every = "1h"
            """, at: (3, 25), #"task.command: unknown placeholder "{pid}" in "{pid}" "# + Self.knownPlaceholders)
    }

    func testParse_unclosedBraceInAnArgument_suggestsDoubling() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/echo", "{task"]
            every = "1h"
            """
        assertSingleConfigError(source, at: (3, 25), #"task.command: unclosed "{" in "{task" (write "{{" for a literal brace)"#)
    }

    func testParse_taskWithoutSchedule_isReportedAtItsHeaderNamingTheChoices() {
        let source = """
            [daemon]
            log_level = "info"

            [[task]]
            name = "a"
            command = ["/bin/true"]
            """
        assertSingleConfigError(
            source, at: (4, 3),
            #"task "a" has no schedule: set one of every = "15m", cron = "0 3 * * *", calendar = "Mon..Fri 02:30" or manual = true"#
        )
    }

    func testParse_taskWithTwoSchedules_isReportedAtItsHeader() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            cron = "0 3 * * *"
            """
        assertSingleConfigError(source, at: (1, 3), #"task "a" has more than one schedule: keep only one of every, cron, calendar and manual"#)
    }

    func testParse_badCronExpression_pointsIntoTheStringAtTheBadField() {
        // The value's opening quote is column 8; "25" is column 3 of the expression,
        // so the report lands on the "2" at column 8 + 3 = 11.
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            cron = "0 25 * * *"
            """
        assertSingleConfigError(source, at: (4, 11), #"bad cron expression "0 25 * * *" for task.cron: hour 25 is out of range 0-23"#)
    }

    func testParse_badCronDayOfWeek_pointsAtTheLastField() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            cron   =   "0 3 * * friday"
            """
        // Quote at column 12; "friday" is column 9 of the expression.
        assertSingleConfigError(
            source, at: (4, 21),
            #"bad cron expression "0 3 * * friday" for task.cron: day of week "friday" is not a number (0-7) or a day name (sun-sat); names are three letters, like "fri""#
        )
    }

    func testParse_timezoneWithoutCron_onlyAppliesToCron() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            timezone = "Europe/Berlin"
            """
        assertSingleConfigError(source, at: (5, 12), "task.timezone only applies to a cron or calendar schedule")
    }

    func testParse_unknownTimezone_isReportedAtTheValueWithASuggestion() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            cron = "0 3 * * *"
            timezone = "Europe/Berln"
            """
        assertSingleConfigError(
            source, at: (5, 12),
            #"unable to load time zone "Europe/Berln": no such zone in /usr/share/zoneinfo; did you mean "Europe/Berlin"?"#
        )
    }

    func testParse_unknownUser_isReportedAtTheUser() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            user = "no-such-user-xyz"
            """
        assertSingleConfigError(source, at: (5, 8), #"unknown user "no-such-user-xyz""#)
    }

    func testParse_warnAtNotAPercentage_asksForOne() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            warn_at = "0.8"
            """
        assertSingleConfigError(
            source, at: (5, 11),
            #"task.warn_at = "0.8" must be a percentage of the budget between 0% and 100%, like "80%""#
        )
    }

    func testParse_unknownStopSignal_listsTheAllowedSignals() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            stop_signal = "SIGFOO"
            """
        assertSingleConfigError(
            source, at: (5, 15),
            #"task.stop_signal = "SIGFOO" is not one of: SIGHUP, SIGINT, SIGKILL, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2"#
        )
    }

    func testParse_maxConcurrentAboveOneWithoutOverlapAllow_isRefused() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            overlap = "queue"
            max_concurrent = 2
            """
        assertSingleConfigError(source, at: (6, 18), #"task.max_concurrent above 1 needs overlap = "allow""#)
    }

    func testParse_afterNamingAMissingTask_isReportedAtTheAfterValue() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            after = ["b", "missing"]

            [[task]]
            name = "b"
            command = ["/bin/true"]
            manual = true
            """
        assertSingleConfigError(source, at: (5, 9), #"task "a": after = "missing": no task is named "missing""#)
    }

    func testParse_afterNamingItself_isRefused() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            after = ["a"]
            """
        assertSingleConfigError(source, at: (5, 9), #"task "a": after = "a": a task cannot run after itself"#)
    }

    func testParse_dependencyCycle_isReportedOnceNamingTheWholeLoop() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            manual = true
            after = ["b"]

            [[task]]
            name = "b"
            command = ["/bin/true"]
            manual = true
            after = ["c"]

            [[task]]
            name = "c"
            command = ["/bin/true"]
            manual = true
            after = ["a"]
            """
        // Three tasks in the loop, one report, at the `after` where the search started.
        assertSingleConfigError(source, at: (5, 9), "tasks depend on each other in a cycle: a → b → c → a")
    }

    /// `count` tasks, each after the next; with `closed`, the last is after the first.
    private static func chainOfTasks(_ count: Int, closed: Bool) -> String {
        (0..<count).map { index in
            let next = index + 1 < count ? "t\(index + 1)" : (closed ? "t0" : nil)
            return """
                [[task]]
                name = "t\(index)"
                command = ["/bin/true"]
                manual = true
                after = [\(next.map { "\"\($0)\"" } ?? "")]

                """
        }.joined()
    }

    func testParse_aChainOfTenThousandTasksEachAfterTheNext_loadsWithoutExhaustingTheStack() {
        // The cycle search recursed once per task: a few thousand overflowed the stack.
        XCTAssertEqual(parsedConfiguration(Self.chainOfTasks(10_000, closed: false))?.tasks.count, 10_000)
    }

    func testParse_aCycleThroughTenThousandTasks_isOneErrorNamingItsEnds() {
        assertSingleConfigError(Self.chainOfTasks(10_000, closed: true), at: (5, 9),
                                "tasks depend on each other in a cycle: t0 → t1 → t2 → t3 → t4 → … → t9999 → t0 (10000 tasks)")
    }

    func testParse_afterErrorInATaskBehindARefusedOne_isReportedAtItsOwnAfter() {
        // The first task is refused (no command), so it never reaches the dependency
        // check; the second task's error must still point at the second task's `after`.
        let source = """
            [[task]]
            name = "broken"
            every = "1h"
            after = ["x"]

            [[task]]
            name = "b"
            command = ["/bin/true"]
            manual = true
            after = ["missing"]
            """
        let diagnostics = configErrors(source)
        XCTAssertEqual(diagnostics.map(\.message), [
            #"missing required key "command" in [[task]] "broken""#,
            #"task "b": after = "missing": no task is named "missing""#,
        ], "\(diagnostics)")
        XCTAssertEqual(diagnostics.map(\.position), [
            SourcePosition(line: 1, column: 3),
            SourcePosition(line: 10, column: 9),
        ], "\(diagnostics)")
    }

    func testParse_afterNamingATaskThatIsItselfRefused_reportsOnlyThatTasksOwnProblem() {
        // "a" exists in the file; saying "no task is named a" would send the operator
        // looking for a typo that is not there.
        let source = """
            [[task]]
            name = "a"
            every = "1h"

            [[task]]
            name = "b"
            command = ["/bin/true"]
            manual = true
            after = ["a"]
            """
        assertSingleConfigError(source, at: (1, 3), #"missing required key "command" in [[task]] "a""#)
    }

    func testParse_unknownKeyInsideRetry_isReportedAtTheKeyWithTheKnownKeys() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            retry = { attempts = 2, delay = "5s" }
            """
        assertSingleConfigError(source, at: (5, 25), #"unknown key "delay" in task.retry (known keys: attempts, backoff, max_backoff)"#)
    }

    func testParse_unknownKeyInTask_suggestsTheClosestKnownKey() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            budgt = "5m"
            """
        assertSingleConfigError(source, at: (5, 1), #"unknown key "budgt" in [[task]] "a"; did you mean "budget"?"#)
    }

    func testParse_environmentKeyStartingWithWatchkeeper_isReservedForTheDaemon() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            environment = { PATH = "/usr/bin", WATCHKEEPER_TASK = "spoofed" }
            """
        assertSingleConfigError(
            source, at: (5, 36),
            #"invalid environment variable name "WATCHKEEPER_TASK" (WATCHKEEPER_ names are set by the daemon)"#
        )
    }

    func testParse_relativeWorkingDirectory_isRefused() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            working_directory = "srv/backup"
            """
        assertSingleConfigError(source, at: (5, 21), #"task.working_directory must be an absolute path, not the relative "srv/backup""#)
    }

    func testParse_badBudgetDuration_givesTheParserReason() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            budget = "1 hour"
            """
        assertSingleConfigError(
            source, at: (5, 10),
            #"bad duration "1 hour" for task.budget: missing unit after 1; "# + DurationParser.expectation
        )
    }
}
