import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// One mistake, one diagnostic: a key whose value is refused still counts as known and
/// as written, so no other check reports a consequence of the same mistake.
final class ConfigOneErrorPerMistakeTests: XCTestCase {
    func testParse_badCommand_leavesTheTasksLaterKeysKnown() {
        // Every job key after `command`: each was reported as unknown when the command was refused.
        let source = """
            [[task]]
            name = "a"
            command = "/bin/echo hello"
            every = "1h"
            budget = "1m"
            warn_at = "80%"
            on_expire = ["/bin/true"]
            on_expire_budget = "5s"
            stop_signal = "SIGINT"
            kill_grace = "1s"
            working_directory = "/tmp"
            environment = { A = "b" }
            priority = "low"
            output = "direct"
            """
        assertSingleConfigError(source, at: (3, 11),
                                #"task.command must be an array of arguments, like ["/usr/bin/rsync", "-a", "{task}"]; set shell = true to run a string through /bin/sh -c"#)
    }

    func testParse_badCommandInAWatch_leavesTheWatchsLaterKeysKnown() {
        let source = """
            [[watch]]
            name = "inbox"
            path = "/srv/inbox"
            command = ["/bin/echo", 5]
            budget = "1m"
            priority = "high"
            """
        assertSingleConfigError(source, at: (4, 25), "watch.command must be an array of strings; element 2 is an integer")
    }

    func testParse_anUnknownOutputRoute_isOneErrorAtTheValue() {
        assertSingleConfigError("[[task]]\nname = \"a\"\ncommand = [\"/bin/true\"]\nevery = \"1h\"\noutput = \"syslog\"\n", at: (5, 10),
                                #"task.output = "syslog" is not one of: daemon, direct"#)
    }

    func testParse_badEvery_isOneError_notAlsoNoSchedule() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1 hour"
            """
        assertSingleConfigError(source, at: (4, 9),
                                #"bad duration "1 hour" for task.every: missing unit after 1; "# + DurationParser.expectation)
    }

    func testParse_everyOfTheWrongType_isOneError_notAlsoNoSchedule() {
        assertSingleConfigError("[[task]]\nname = \"a\"\ncommand = [\"/bin/true\"]\nevery = 15\n", at: (4, 9),
                                "task.every must be a string, not an integer")
    }

    func testParse_manualOfTheWrongType_isOneError_notAlsoNoSchedule() {
        assertSingleConfigError("[[task]]\nname = \"a\"\ncommand = [\"/bin/true\"]\nmanual = \"yes\"\n", at: (4, 10),
                                "task.manual must be a boolean, not a string")
    }

    func testParse_badEveryBesideACron_isStillTwoSchedules() {
        // Two mistakes: the duration, and two schedules written.
        let source = "[[task]]\nname = \"a\"\ncommand = [\"/bin/true\"]\nevery = \"1 hour\"\ncron = \"0 3 * * *\"\n"
        XCTAssertEqual(configErrors(source).map(\.position?.line), [1, 4])
    }

    func testParse_shellOfTheWrongType_isOneError_whateverTheCommandsForm() {
        for command in [#""/bin/echo hello""#, #"["/bin/echo", "hello"]"#] {
            assertSingleConfigError("[[task]]\nname = \"a\"\nshell = \"yes\"\ncommand = \(command)\nevery = \"1h\"\n", at: (3, 9),
                                    "task.shell must be a boolean, not a string")
        }
    }

    func testParse_badOverlapWithMaxConcurrent_isOneError_notAlsoNeedsAllow() {
        let source = """
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            overlap = "sometimes"
            max_concurrent = 4
            """
        assertSingleConfigError(source, at: (5, 11), #"task.overlap = "sometimes" is not one of: skip, queue, replace, allow"#)
    }

    func testParse_batchWatchWithABadSettle_isOneError_notAlsoNeedsASettleWindow() {
        let source = """
            [[watch]]
            name = "inbox"
            path = "/srv/inbox"
            batch = true
            settle = "1 second"
            command = ["/bin/ls", "{paths}"]
            """
        assertSingleConfigError(source, at: (5, 10),
                                #"bad duration "1 second" for watch.settle: missing unit after 1; "# + DurationParser.expectation)
    }
}
