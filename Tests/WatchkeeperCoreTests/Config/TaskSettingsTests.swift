import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Pins how `[[task]]` entries are read through `ConfigLoader.parse`: every key of a
/// valid task, the defaults of a minimal one, and, one test per class of problem, the
/// exact `LINE:COLUMN` and message `check-config` prints.
final class TaskSettingsTests: XCTestCase {
    private static let knownPlaceholders = "(known: {task}, {run_id}, {attempt}, {scheduled})"
    private static let arrayAdvice =
        #"task.command must be an array of arguments, like ["/usr/bin/rsync", "-a", "{task}"]; set shell = true to run a string through /bin/sh -c"#

    // MARK: - Valid tasks

    func testParse_taskWithEveryKeySet_readsEveryField() throws {
        let source = """
            [[task]]
            name = "nightly-backup"
            command = ["/usr/bin/rsync", "-a", "--log-file=/var/log/{task}-{run_id}.log", "{attempt}", "{scheduled}"]
            cron = "30 3 * * 1-5"
            timezone = "Europe/Berlin"
            budget = "2h"
            warn_at = "75%"
            on_expire = ["/usr/local/bin/notify", "{task}", "{pid}", "{budget}"]
            on_expire_budget = "45s"
            stop_signal = "int"
            kill_grace = "20s"
            user = "root"
            group = "root"
            working_directory = "/srv/backup"
            environment = { RSYNC_RSH = "ssh -i /etc/watchkeeper/key", LANG = "C.UTF-8" }
            priority = "high"
            jitter = "5m"
            run_on_start = true
            overlap = "allow"
            max_concurrent = 3
            retry = { attempts = 5, backoff = "30s", max_backoff = "10m" }
            retry_expired = true
            after = ["prepare"]
            persistent = true
            catch_up_window = "12h"
            """
        let configuration = try XCTUnwrap(parsedConfiguration(source + "\n" + """
            [[task]]
            name = "prepare"
            command = ["/bin/true"]
            manual = true
            """))
        XCTAssertEqual(configuration.tasks.map(\.name), ["nightly-backup", "prepare"])
        let task = configuration.tasks[0]

        XCTAssertEqual(task.schedule, .cron(try CronExpression(parsing: "30 3 * * 1-5"), timezone: "Europe/Berlin"))
        XCTAssertEqual(task.jitter, .seconds(300))
        XCTAssertTrue(task.runOnStart)
        XCTAssertEqual(task.overlap, .allow)
        XCTAssertEqual(task.maxConcurrent, 3)
        XCTAssertEqual(task.retry, RetryPolicy(attempts: 5, backoff: .seconds(30), maxBackoff: .seconds(600)))
        XCTAssertTrue(task.retryExpired)
        XCTAssertEqual(task.after, ["prepare"])
        XCTAssertTrue(task.persistent)
        XCTAssertEqual(task.catchUpWindow, .seconds(43_200))

        let job = task.job
        XCTAssertEqual(job.command, .arguments([
            "/usr/bin/rsync", "-a", "--log-file=/var/log/{task}-{run_id}.log", "{attempt}", "{scheduled}",
        ]))
        XCTAssertEqual(job.budget, .seconds(7_200))
        XCTAssertEqual(job.warnAt, 0.75)
        XCTAssertEqual(job.onExpire, .arguments(["/usr/local/bin/notify", "{task}", "{pid}", "{budget}"]))
        XCTAssertEqual(job.onExpireBudget, .seconds(45))
        XCTAssertEqual(job.stopSignal, SIGINT)
        XCTAssertEqual(job.killGrace, .seconds(20))
        XCTAssertEqual(job.user, "root")
        XCTAssertEqual(job.group, "root")
        XCTAssertEqual(job.workingDirectory, "/srv/backup")
        XCTAssertEqual(job.environment, ["RSYNC_RSH": "ssh -i /etc/watchkeeper/key", "LANG": "C.UTF-8"])
        XCTAssertEqual(job.priority, .high)

        XCTAssertEqual(configuration.tasks[1].schedule, .manual)
    }

    func testParse_everySchedule_isTheIntervalAsADuration() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [[task]]
            name = "poll"
            command = ["/bin/true"]
            every = "1h30m"
            """))
        XCTAssertEqual(configuration.tasks.first?.schedule, .every(.seconds(5_400)))
    }

    func testParse_cronWithoutTimezone_usesTheMachineZone() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [[task]]
            name = "daily"
            command = ["/bin/true"]
            cron = "@daily"
            """))
        XCTAssertEqual(configuration.tasks.first?.schedule, .cron(try CronExpression(parsing: "0 0 * * *"), timezone: nil))
    }

    func testParse_shellTrueWithAStringCommand_isAShellScriptKeptVerbatim() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [[task]]
            name = "dump"
            shell = true
            command = "pg_dump app | gzip > /srv/backup/{task}.sql.gz"
            on_expire = "logger -t watchkeeper 'dump overran'"
            every = "15m"
            """))
        let job = try XCTUnwrap(configuration.tasks.first?.job)
        // A shell script is not a template: braces reach /bin/sh untouched.
        XCTAssertEqual(job.command, .shell("pg_dump app | gzip > /srv/backup/{task}.sql.gz"))
        XCTAssertEqual(job.onExpire, .shell("logger -t watchkeeper 'dump overran'"))
    }

    func testParse_minimalTask_takesTheDefaultOfEveryOtherKey() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [[task]]
            name = "minimal"
            command = ["/bin/true"]
            every = "10m"
            """))
        let task = try XCTUnwrap(configuration.tasks.first)
        XCTAssertEqual(task.name, "minimal")
        XCTAssertEqual(task.schedule, .every(.seconds(600)))
        XCTAssertEqual(task.jitter, .zero)
        XCTAssertFalse(task.runOnStart)
        XCTAssertEqual(task.overlap, .skip)
        XCTAssertEqual(task.maxConcurrent, 1)
        XCTAssertNil(task.retry)
        XCTAssertFalse(task.retryExpired)
        XCTAssertEqual(task.after, [])
        XCTAssertFalse(task.persistent)
        XCTAssertEqual(task.catchUpWindow, .seconds(86_400))

        let job = task.job
        XCTAssertEqual(job.command, .arguments(["/bin/true"]))
        XCTAssertEqual(job.budget, .seconds(3_600))
        XCTAssertNil(job.warnAt)
        XCTAssertNil(job.onExpire)
        XCTAssertEqual(job.onExpireBudget, .seconds(30))
        XCTAssertEqual(job.stopSignal, SIGTERM)
        XCTAssertEqual(job.killGrace, .seconds(5))
        XCTAssertNil(job.user)
        XCTAssertNil(job.group)
        XCTAssertNil(job.workingDirectory)
        XCTAssertEqual(job.environment, [:])
        XCTAssertEqual(job.priority, .default)
    }

    func testParse_overlapAllowWithoutMaxConcurrent_allowsUpTo1024() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [[task]]
            name = "fan-out"
            command = ["/bin/true"]
            every = "1m"
            overlap = "allow"
            """))
        XCTAssertEqual(configuration.tasks.first?.maxConcurrent, 1_024)
    }

    func testParse_emptyRetryTable_takesTheDefaultPolicy_andMaxBackoffIsAtLeastBackoff() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1m"
            retry = {}

            [[task]]
            name = "b"
            command = ["/bin/true"]
            every = "1m"
            retry = { backoff = "1h", max_backoff = "1m" }
            """))
        XCTAssertEqual(configuration.tasks.map(\.retry), [
            RetryPolicy(attempts: 3, backoff: .seconds(10), maxBackoff: .seconds(300)),
            RetryPolicy(attempts: 3, backoff: .seconds(3_600), maxBackoff: .seconds(3_600)),
        ])
    }

    func testParse_dependencyChainWithoutCycle_isAccepted() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [[task]]
            name = "c"
            command = ["/bin/true"]
            manual = true
            after = ["a", "b"]

            [[task]]
            name = "b"
            command = ["/bin/true"]
            manual = true
            after = ["a"]

            [[task]]
            name = "a"
            command = ["/bin/true"]
            every = "1h"
            """))
        XCTAssertEqual(configuration.tasks.map(\.after), [["a", "b"], ["a"], []])
    }

    // MARK: - One test per error class

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
            #"task "a" has no schedule: set one of every = "15m", cron = "0 3 * * *" or manual = true"#
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
        assertSingleConfigError(source, at: (1, 3), #"task "a" has more than one schedule: keep only one of every, cron and manual"#)
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
        assertSingleConfigError(source, at: (5, 12), "task.timezone only applies to a cron schedule")
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

    func testParse_watchRule_readsEveryKey() throws {
        let source = """
            [[watch]]
            name = "inbox"
            path = "/srv/inbox"
            recursive = true
            events = ["closed_write", "moved_in", "deleted"]
            include = ["**/*.csv"]
            exclude = ["**/.*"]
            follow_symlinks = true
            settle = "500ms"
            max_concurrent = 2
            command = ["/usr/local/bin/import", "{watch}", "{path}", "{dir}", "{name}", "{event}"]
            budget = "10m"
            """
        let watch = try XCTUnwrap(parsedConfiguration(source)?.watches.first)
        XCTAssertEqual(watch.name, "inbox")
        XCTAssertEqual(watch.path, "/srv/inbox")
        XCTAssertTrue(watch.recursive)
        XCTAssertEqual(watch.events, [.closedWrite, .movedIn, .deleted])
        XCTAssertTrue(watch.filter.selects(Array("a/b.csv".utf8)))
        XCTAssertFalse(watch.filter.selects(Array("a/.b.csv".utf8)))
        XCTAssertTrue(watch.followSymlinks)
        XCTAssertEqual(watch.settle, .milliseconds(500))
        XCTAssertEqual(watch.maxConcurrent, 2)
        XCTAssertEqual(watch.job.budget, .seconds(600))
    }

    func testParse_watchRuleDefaults_areTheReadyEventsAndNoSettle() throws {
        let watch = try XCTUnwrap(parsedConfiguration("""
            [[watch]]
            name = "w"
            path = "/srv/w"
            command = ["/bin/true"]
            """)?.watches.first)
        XCTAssertEqual(watch.events, [.closedWrite, .movedIn])
        XCTAssertFalse(watch.recursive)
        XCTAssertEqual(watch.settle, .zero)
        XCTAssertTrue(watch.filter.selects(Array("anything".utf8)))
    }

    func testParse_watchWithRelativePath_isRefusedAtTheValue() {
        assertSingleConfigError("""
            [[watch]]
            name = "w"
            path = "srv/w"
            command = ["/bin/true"]
            """, at: (3, 8), #"watch.path must be an absolute path, not the relative "srv/w""#)
    }

    func testParse_watchWithUnknownEvent_listsTheKnownOnes() {
        assertSingleConfigError("""
            [[watch]]
            name = "w"
            path = "/srv/w"
            events = ["closed_write", "opened"]
            command = ["/bin/true"]
            """, at: (4, 10), #"watch.events: unknown event "opened" (known: created, closed_write, moved_in, moved_out, deleted, modified, attrib)"#)
    }

    func testParse_watchWithBadGlob_pointsIntoThePattern() {
        let found = configErrors("""
            [[watch]]
            name = "w"
            path = "/srv/w"
            include = ["ok/*.csv", "bad/[x"]
            command = ["/bin/true"]
            """)
        XCTAssertEqual(found.count, 1, "\(found)")
        XCTAssertEqual(found.first?.position?.line, 4)
        XCTAssertTrue(found.first?.message.hasPrefix(#"bad pattern "bad/[x" in watch.include: "#) ?? false, "\(found)")
    }

    func testParse_watchCommandWithATaskPlaceholder_isRefused() {
        let found = configErrors("""
            [[watch]]
            name = "w"
            path = "/srv/w"
            command = ["/bin/echo", "{scheduled}"]
            """)
        XCTAssertEqual(found.count, 1, "\(found)")
        XCTAssertTrue(found.first?.message.contains(#"unknown placeholder "{scheduled}""#) ?? false, "\(found)")
    }

    func testParse_batchWatchWithoutPathsElement_isRefused() {
        let found = configErrors("""
            [[watch]]
            name = "b"
            path = "/srv/b"
            batch = true
            settle = "1s"
            command = ["/usr/bin/import", "{path}"]
            """)
        XCTAssertFalse(found.isEmpty)
        XCTAssertTrue(found.contains { $0.message.contains(#"unknown placeholder "{path}""#) }, "\(found)")
    }

    func testParse_batchWatchWithoutSettle_isRefused() {
        let found = configErrors("""
            [[watch]]
            name = "b"
            path = "/srv/b"
            batch = true
            command = ["/usr/bin/import", "{paths}"]
            """)
        XCTAssertEqual(found.map(\.message), [#"batch = true needs a settle window (for example settle = "1s") to collect files in"#])
    }

    func testParse_stdinBatch_takesNoPathsPlaceholder_andWorksWithAShell() throws {
        let watch = try XCTUnwrap(parsedConfiguration("""
            [[watch]]
            name = "b"
            path = "/srv/b"
            batch = "stdin"
            settle = "1s"
            shell = true
            command = "xargs -0 rm --"
            """)?.watches.first)
        XCTAssertTrue(watch.batch)
        XCTAssertEqual(watch.batchInput, .stdin)
        let found = configErrors("""
            [[watch]]
            name = "b"
            path = "/srv/b"
            batch = "stdin"
            settle = "1s"
            command = ["/usr/bin/import", "{paths}"]
            """)
        XCTAssertTrue(found.contains { $0.message.contains(#"unknown placeholder "{paths}""#) }, "\(found)")
    }

    func testParse_batchWithAnUnknownWord_namesTheAllowedValues() {
        let found = configErrors("""
            [[watch]]
            name = "b"
            path = "/srv/b"
            batch = "lines"
            settle = "1s"
            command = ["/usr/bin/import", "{paths}"]
            """)
        XCTAssertEqual(found.map(\.message), [#"watch.batch must be one of true, false, "argv", "stdin", not "lines""#], "\(found)")
        XCTAssertEqual(found.first?.position?.line, 4)
    }
}
