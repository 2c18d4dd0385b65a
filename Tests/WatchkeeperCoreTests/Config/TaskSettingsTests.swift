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
    static let knownPlaceholders = "(known: {task}, {run_id}, {attempt}, {scheduled})"
    static let arrayAdvice =
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

    func testParse_emptyRetryTable_takesTheDefaultPolicy_andABackoffOverTheDefaultMaximumRaisesIt() throws {
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
            retry = { backoff = "1h" }
            """))
        XCTAssertEqual(configuration.tasks.map(\.retry), [
            RetryPolicy(attempts: 3, backoff: .seconds(10), maxBackoff: .seconds(300)),
            RetryPolicy(attempts: 3, backoff: .seconds(3_600), maxBackoff: .seconds(3_600)),
        ])
    }

    func testParse_maxBackoffShorterThanBackoff_isRefusedAtItsValue() {
        let diagnostics = configErrors("""
            [[task]]
            name = "b"
            command = ["/bin/true"]
            every = "1m"
            retry = { backoff = "1h", max_backoff = "1m" }
            """)
        assertSingleDiagnostic(diagnostics, at: (5, 41),
                               "task.retry.max_backoff = \"1m\" is shorter than backoff = \"1h\": the longest wait must be at least the first")
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
}
