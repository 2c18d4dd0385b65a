import Foundation
import Logging
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Pins what `ConfigLoader` accepts, what it builds, and how it reports every class of
/// problem: the exact `LINE:COLUMN` and message an operator will see from `check-config`.
final class ConfigLoaderTests: XCTestCase {
    private static let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // Config
        .deletingLastPathComponent()  // WatchkeeperCoreTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()  // repository root

    private static let levels = "trace, debug, info, notice, warning, error, critical"

    // MARK: - Valid files

    func testParse_withEveryDaemonKeySet_readsEveryValue() throws {
        let source = """
            [daemon]
            log_level = "debug"
            shutdown_grace = "1m30s"
            runtime_dir = "/run/wk-test"
            state_dir = "/var/lib/wk-test"
            dump_component_timeout = "250ms"
            recent_problems = 7
            max_jobs = 16
            """
        let configuration = try XCTUnwrap(parsedConfiguration(source, environment: [
            "RUNTIME_DIRECTORY": "/run/from-env",
            "STATE_DIRECTORY": "/var/lib/from-env",
        ]))
        XCTAssertEqual(configuration.path, configPath)
        let daemon = configuration.daemon
        XCTAssertEqual(daemon.logLevel, .debug)
        XCTAssertEqual(daemon.shutdownGrace, .seconds(90))
        // Explicit settings in the file win over systemd's environment.
        XCTAssertEqual(daemon.runtimeDirectory, "/run/wk-test")
        XCTAssertEqual(daemon.stateDirectory, "/var/lib/wk-test")
        XCTAssertEqual(daemon.dumpComponentTimeout, .milliseconds(250))
        XCTAssertEqual(daemon.recentProblems, 7)
        XCTAssertEqual(daemon.maxJobs, 16)
    }

    func testParse_withoutDirectories_takesThemFromSystemdEnvironment_firstOfSeveral() throws {
        let source = """
            [daemon]
            log_level = "warning"
            """
        let configuration = try XCTUnwrap(parsedConfiguration(source, environment: [
            "RUNTIME_DIRECTORY": "/run/watchkeeper-a:/run/watchkeeper-b",
            "STATE_DIRECTORY": "/var/lib/watchkeeper-a",
        ]))
        XCTAssertEqual(configuration.daemon.logLevel, .warning)
        XCTAssertEqual(configuration.daemon.runtimeDirectory, "/run/watchkeeper-a")
        XCTAssertEqual(configuration.daemon.stateDirectory, "/var/lib/watchkeeper-a")
    }

    func testParse_emptyFile_givesDefaults() throws {
        let configuration = try XCTUnwrap(parsedConfiguration(""))
        XCTAssertEqual(configuration.daemon, DaemonSettings(environment: [:]))
        XCTAssertEqual(configuration.daemon.logLevel, .info)
        XCTAssertEqual(configuration.daemon.shutdownGrace, .seconds(30))
        XCTAssertEqual(configuration.daemon.runtimeDirectory, "/run/watchkeeper")
        XCTAssertEqual(configuration.daemon.stateDirectory, "/var/lib/watchkeeper")
        XCTAssertEqual(configuration.daemon.dumpComponentTimeout, .seconds(2))
        XCTAssertEqual(configuration.daemon.recentProblems, 50)
        XCTAssertEqual(configuration.daemon.maxJobs, 4)
        XCTAssertEqual(configuration.tasks, [])
    }

    func testParse_emptyFileWithSystemdEnvironment_defaultsDirectoriesFromIt() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("# nothing but a comment\n", environment: [
            "RUNTIME_DIRECTORY": "/run/x",
            "STATE_DIRECTORY": "/var/lib/x",
        ]))
        XCTAssertEqual(configuration.daemon.runtimeDirectory, "/run/x")
        XCTAssertEqual(configuration.daemon.stateDirectory, "/var/lib/x")
    }

    func testParse_shippedExampleConfiguration_loadsCleanly() throws {
        let url = Self.repositoryRoot.appendingPathComponent("etc/watchkeeper/watchkeeper.toml")
        let source = try String(contentsOf: url, encoding: .utf8)
        let configuration = try XCTUnwrap(parsedConfiguration(source))
        XCTAssertEqual(configuration.daemon.logLevel, .info)
        XCTAssertEqual(configuration.daemon.shutdownGrace, .seconds(30))
        XCTAssertEqual(configuration.daemon.dumpComponentTimeout, .seconds(2))
        XCTAssertEqual(configuration.daemon.recentProblems, 50)
    }

    func testParse_demoConfiguration_loadsCleanly() throws {
        let url = Self.repositoryRoot.appendingPathComponent("demo/watchkeeper.toml")
        let source = try String(contentsOf: url, encoding: .utf8)
        let configuration = try XCTUnwrap(parsedConfiguration(source))
        XCTAssertEqual(configuration.daemon.shutdownGrace, .seconds(10))
        XCTAssertEqual(configuration.daemon.dumpComponentTimeout, .seconds(1))
        XCTAssertEqual(configuration.daemon.recentProblems, 20)
    }

    func testParse_daemonAsInlineTable_isAccepted() throws {
        let configuration = try XCTUnwrap(parsedConfiguration(#"daemon = { log_level = "error", recent_problems = 3 }"#))
        XCTAssertEqual(configuration.daemon.logLevel, .error)
        XCTAssertEqual(configuration.daemon.recentProblems, 3)
    }

    // MARK: - One test per error class

    func testParse_syntaxError_isReportedAtTOMLKitPosition() {
        let source = """
            [daemon]
            log_level = "info"
            recent_problems = = 5
            """
        let diagnostics = configErrors(source)
        XCTAssertEqual(diagnostics.count, 1, "\(diagnostics)")
        guard let only = diagnostics.first else { return }
        // The second `=`: where a value should start.
        XCTAssertEqual(only.position, SourcePosition(line: 3, column: 19), "\(only)")
        XCTAssertEqual(only.message, "syntax error: Error while parsing value: could not determine value type")
    }

    func testParse_unterminatedString_isASyntaxErrorOnItsLine() {
        let source = """
            [daemon]
            log_level = "info
            """
        let diagnostics = configErrors(source)
        XCTAssertEqual(diagnostics.count, 1, "\(diagnostics)")
        // Just past the last character of the file, where the closing quote was expected.
        XCTAssertEqual(diagnostics.first?.position, SourcePosition(line: 2, column: 18), "\(diagnostics)")
        XCTAssertEqual(diagnostics.first?.message, "syntax error: Error while parsing string: encountered end-of-file")
        XCTAssertEqual(
            diagnostics.first?.description,
            "\(configPath):2:18: syntax error: Error while parsing string: encountered end-of-file"
        )
    }

    func testParse_unknownDaemonKey_suggestsTheClosestKnownKey() {
        let source = """
            [daemon]
              log_lvel = "debug"
            """
        assertSingleConfigError(source, at: (2, 3), #"unknown key "log_lvel" in [daemon]; did you mean "log_level"?"#)
    }

    func testParse_unknownDaemonKeyFarFromAnyKnownKey_listsTheKnownKeys() {
        let source = """
            [daemon]
            colour = "blue"
            """
        assertSingleConfigError(
            source, at: (2, 1),
            #"unknown key "colour" in [daemon] (known keys: log_level, shutdown_grace, runtime_dir, state_dir, dump_component_timeout, recent_problems, max_jobs, control_group, read_group, metrics_file, metrics_interval)"#
        )
    }

    func testParse_unknownTopLevelTable_isReportedAtItsHeaderKey() {
        let source = """
            [daemon]
            log_level = "info"

            [logging]
            level = "info"
            """
        assertSingleConfigError(source, at: (4, 2), #"unknown key "logging" in the top level (known keys: daemon, cluster, task, watch)"#)
    }

    func testParse_misspeltTopLevelTable_suggestsDaemon() {
        let source = """
            [deamon]
            log_level = "info"
            """
        assertSingleConfigError(source, at: (1, 2), #"unknown key "deamon" in the top level; did you mean "daemon"?"#)
    }

    func testParse_integerWrittenAsString_isAWrongTypeAtTheValue() {
        let source = """
            [daemon]
            recent_problems = "5"
            """
        assertSingleConfigError(source, at: (2, 19), "daemon.recent_problems must be an integer, not a string")
    }

    func testParse_durationWrittenAsBareInteger_isAWrongTypeAtTheValue() {
        let source = """
            [daemon]
            shutdown_grace = 30
            """
        assertSingleConfigError(source, at: (2, 18), "daemon.shutdown_grace must be a string, not an integer")
    }

    func testParse_daemonAsScalar_isAWrongType() {
        assertSingleConfigError("daemon = 5", at: (1, 10), "daemon must be a table, not an integer")
    }

    func testParse_badDurations_areReportedWithTheParserReason() {
        let expectation = DurationParser.expectation
        let cases: [(text: String, reason: String, line: UInt)] = [
            ("5 minutes", "missing unit after 5; \(expectation)", #line),
            ("30", "missing unit after 30; \(expectation)", #line),
            ("1m1h", "units must go from largest to smallest, each once; \(expectation)", #line),
            ("5x", #"unknown unit "x"; "# + expectation, #line),
            ("", "empty duration; \(expectation)", #line),
        ]
        for c in cases {
            let source = """
                [daemon]
                shutdown_grace = "\(c.text)"
                """
            assertSingleConfigError(
                source, at: (2, 18),
                #"bad duration ""# + c.text + #"" for daemon.shutdown_grace: "# + c.reason,
                line: c.line
            )
        }
    }

    func testParse_outOfRangeInteger_givesTheAllowedRange() {
        let source = """
            [daemon]
            recent_problems = 0
            """
        assertSingleConfigError(source, at: (2, 19), "daemon.recent_problems = 0 is out of range (1 to 10000)")
    }

    func testParse_maxJobsOutsideOneTo1024_givesTheAllowedRange() {
        assertSingleConfigError("[daemon]\nmax_jobs = 0", at: (2, 12), "daemon.max_jobs = 0 is out of range (1 to 1024)")
        assertSingleConfigError("[daemon]\nmax_jobs = 1025", at: (2, 12), "daemon.max_jobs = 1025 is out of range (1 to 1024)")
        XCTAssertEqual(parsedConfiguration("[daemon]\nmax_jobs = 1024")?.daemon.maxJobs, 1_024)
        XCTAssertEqual(parsedConfiguration("[daemon]\nmax_jobs = 1")?.daemon.maxJobs, 1)
    }

    func testParse_outOfRangeDurations_giveTheAllowedRangeInConfigurationSyntax() {
        assertSingleConfigError(
            "[daemon]\ndump_component_timeout = \"5ms\"", at: (2, 26),
            #"daemon.dump_component_timeout = "5ms" is out of range (10ms to 1m)"#
        )
        assertSingleConfigError(
            "[daemon]\nshutdown_grace = \"2d\"", at: (2, 18),
            #"daemon.shutdown_grace = "2d" is out of range (0s to 1d)"#
        )
    }

    func testParse_relativeRuntimeDirectory_isRefused() {
        let source = """
            [daemon]
            runtime_dir = "run"
            """
        assertSingleConfigError(source, at: (2, 15), #"daemon.runtime_dir must be an absolute path, not the relative "run""#)
    }

    func testParse_relativeStateDirectory_isRefused() {
        assertSingleConfigError(
            "[daemon]\nstate_dir = './state'", at: (2, 13),
            #"daemon.state_dir must be an absolute path, not the relative "./state""#
        )
    }

    func testParse_unknownLogLevel_listsTheLevels() {
        let source = """
            [daemon]
            log_level = "loud"
            """
        assertSingleConfigError(source, at: (2, 13), #"daemon.log_level = "loud" is not one of: "# + Self.levels)
    }

    func testParse_duplicateTaskNames_reportsOnlyTheSecondNameAndWhereTheFirstWas() {
        // Every entry is otherwise valid, so the duplicate is the file's only problem.
        let source = """
            [[task]]
            name = "backup"
            command = ["/bin/true"]
            every = "1h"

            [[task]]
            name = "rotate"
            command = ["/bin/true"]
            every = "1h"

            [[task]]
            name   =   "backup"
            command = ["/bin/true"]
            every = "1h"
            """
        assertSingleConfigError(source, at: (12, 12), #"duplicate task name "backup" (first defined at line 2)"#)
    }

    func testParse_watchWithoutPathOrCommand_reportsBothAtItsHeader() {
        let source = """
            [daemon]
            log_level = "info"

            [[watch]]
            name = "incoming"
            """
        guard case .failure(let errors) = ConfigLoader.parse(source: source, path: configPath, environment: [:]) else {
            return XCTFail("a watch without path and command must be refused")
        }
        XCTAssertEqual(errors.diagnostics.map(\.message).sorted(), [
            #"missing required key "command" in [[watch]] "incoming""#,
            #"missing required key "path" in [[watch]] "incoming""#,
        ])
        XCTAssertEqual(Set(errors.diagnostics.map { $0.position.map { "\($0.line):\($0.column)" } ?? "-" }), ["4:3"])
    }

    /// retry_expired means the same for tasks and watch rules: one engine retries both.
    func testParse_watchRetryExpired_isReadLikeATasks() throws {
        let source = """
            [[watch]]
            name = "incoming"
            path = "/srv/in"
            retry = { attempts = 2, backoff = "1s", max_backoff = "2s" }
            retry_expired = true
            command = ["/bin/true", "{path}"]
            """
        guard case .success(let configuration) = ConfigLoader.parse(source: source, path: configPath, environment: [:]) else {
            return XCTFail("retry_expired must be a known key of a watch rule")
        }
        let watch = try XCTUnwrap(configuration.watches.first)
        XCTAssertTrue(watch.retryExpired)
        XCTAssertEqual(watch.retry?.attempts, 2)
    }

    func testParse_taskWithoutName_reportsTheMissingKeyAtItsHeader() {
        let source = """
            [[task]]
            command = ["/bin/true"]
            every = "1h"
            """
        assertSingleConfigError(source, at: (1, 3), #"missing required key "name" in [[task]]"#)
    }

    func testParse_invalidTaskName_isReportedAtTheName() {
        let source = """
            [[task]]
            name = "-backup"
            command = ["/bin/true"]
            every = "1h"
            """
        assertSingleConfigError(
            source, at: (2, 8),
            #"invalid task name "-backup": use letters, digits, '.', '_' and '-', starting with a letter or digit"#
        )
    }

    func testParse_fileWithSeveralProblems_reportsAllInSourceOrder() {
        // The loader reads keys in its own order (log_level first, recent_problems
        // near the end, unknown keys after all of them, and top-level keys as daemon,
        // task, watch); the report must still follow the file.
        let source = """
            [daemon]
            recent_problems = 0
            log_lvel = "info"
            shutdown_grace = "5x"
            log_level = "loud"
            runtime_dir = "run"

            [extra]
            """
        let diagnostics = configErrors(source)
        XCTAssertEqual(diagnostics.map { $0.position?.line }, [2, 3, 4, 5, 6, 8], "\(diagnostics)")
        XCTAssertEqual(diagnostics.map(\.message), [
            "daemon.recent_problems = 0 is out of range (1 to 10000)",
            #"unknown key "log_lvel" in [daemon]; did you mean "log_level"?"#,
            #"bad duration "5x" for daemon.shutdown_grace: unknown unit "x"; "# + DurationParser.expectation,
            #"daemon.log_level = "loud" is not one of: "# + Self.levels,
            #"daemon.runtime_dir must be an absolute path, not the relative "run""#,
            #"unknown key "extra" in the top level (known keys: daemon, cluster, task, watch)"#,
        ])
    }

    func testParse_twoProblemsOnOneLine_areOrderedByColumn() {
        let diagnostics = configErrors(#"daemon = { recent_problems = 0, log_level = "loud" }"#)
        XCTAssertEqual(diagnostics.map(\.position), [
            SourcePosition(line: 1, column: 30),
            SourcePosition(line: 1, column: 45),
        ], "\(diagnostics)")
    }

    func testParse_windowsLineEndingsAndByteOrderMark_doNotShiftPositions() {
        assertSingleConfigError(
            "\u{FEFF}[daemon]\r\nlog_level = \"info\"\r\nrecent_problems = 0\r\n", at: (3, 19),
            "daemon.recent_problems = 0 is out of range (1 to 10000)"
        )
    }

    func testParse_tabsCountAsOneColumn() {
        assertSingleConfigError("[daemon]\n\trecent_problems\t=\t0\n", at: (2, 20), "daemon.recent_problems = 0 is out of range (1 to 10000)")
    }

    // MARK: - ConfigErrors rendering

    func testConfigErrors_description_isOnePathLineColumnLinePerProblem() {
        let diagnostics = configErrors("[daemon]\nrecent_problems = 0\nlog_level = \"loud\"\n")
        let rendered = ConfigErrors(diagnostics).description
        XCTAssertEqual(rendered, """
            \(configPath):2:19: daemon.recent_problems = 0 is out of range (1 to 10000)
            \(configPath):3:13: daemon.log_level = "loud" is not one of: \(Self.levels)
            """)
    }

    func testConfigErrors_summary_isTheFirstProblemAndHowManyFollow() {
        let diagnostics = configErrors("[daemon]\nrecent_problems = 0\nlog_level = \"loud\"\nstate_dir = \"x\"\n")
        XCTAssertEqual(
            ConfigErrors(diagnostics).summary,
            "\(configPath):2:19: daemon.recent_problems = 0 is out of range (1 to 10000) (and 2 more)"
        )
        XCTAssertEqual(
            ConfigErrors([diagnostics[0]]).summary,
            "\(configPath):2:19: daemon.recent_problems = 0 is out of range (1 to 10000)"
        )
        XCTAssertEqual(ConfigErrors([]).summary, "no errors")
    }

    func testConfigErrors_sortsByLineThenColumn_withUnpositionedFirst() {
        let late = ConfigDiagnostic(file: "f", position: SourcePosition(line: 3, column: 1), message: "late")
        let sameLineLater = ConfigDiagnostic(file: "f", position: SourcePosition(line: 2, column: 9), message: "b")
        let sameLineEarlier = ConfigDiagnostic(file: "f", position: SourcePosition(line: 2, column: 4), message: "a")
        let unpositioned = ConfigDiagnostic(file: "f", position: nil, message: "whole file")
        let errors = ConfigErrors([late, sameLineLater, unpositioned, sameLineEarlier])
        XCTAssertEqual(errors.diagnostics.map(\.message), ["whole file", "a", "b", "late"])
        XCTAssertEqual(errors.description, "f: whole file\nf:2:4: a\nf:2:9: b\nf:3:1: late")
    }

    // MARK: - Loading from disk and choosing the path

    func testLoad_missingFile_givesAnUnpositionedDiagnosticWithTheOSReason() {
        let missing = NSTemporaryDirectory() + "watchkeeper-no-such-\(UUID().uuidString).toml"
        switch ConfigLoader.load(path: missing, environment: [:]) {
        case .success:
            XCTFail("a missing file must not load")
        case .failure(let errors):
            XCTAssertEqual(errors.diagnostics.count, 1)
            let only = errors.diagnostics.first
            XCTAssertEqual(only?.file, missing)
            XCTAssertNil(only?.position)
            XCTAssertEqual(only?.message, "unable to read the configuration: No such file or directory")
            XCTAssertEqual(errors.description, "\(missing): unable to read the configuration: No such file or directory")
        }
    }

    func testLoad_directoryInsteadOfFile_givesTheOSReason() {
        switch ConfigLoader.load(path: NSTemporaryDirectory(), environment: [:]) {
        case .success:
            XCTFail("a directory must not load")
        case .failure(let errors):
            XCTAssertEqual(errors.diagnostics.first?.message, "unable to read the configuration: Is a directory")
            XCTAssertNil(errors.diagnostics.first?.position)
        }
    }

    func testLoad_realFile_parsesItWithItsPathInDiagnostics() throws {
        let file = NSTemporaryDirectory() + "watchkeeper-test-\(UUID().uuidString).toml"
        try "[daemon]\nrecent_problems = 3\n".write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let configuration = try ConfigLoader.load(path: file, environment: [:]).get()
        XCTAssertEqual(configuration.path, file)
        XCTAssertEqual(configuration.daemon.recentProblems, 3)

        try "[daemon]\nrecent_problems = -1\n".write(toFile: file, atomically: true, encoding: .utf8)
        guard case .failure(let errors) = ConfigLoader.load(path: file, environment: [:]) else {
            return XCTFail("a negative recent_problems must be refused")
        }
        XCTAssertEqual(errors.description, "\(file):2:19: daemon.recent_problems = -1 is out of range (1 to 10000)")
    }

    func testResolvePath_explicitBeatsEnvironmentBeatsDefault() {
        let environment = ["WATCHKEEPER_CONFIG": "/from/env.toml"]
        XCTAssertEqual(ConfigLoader.resolvePath(explicit: "/explicit.toml", environment: environment), "/explicit.toml")
        XCTAssertEqual(ConfigLoader.resolvePath(explicit: nil, environment: environment), "/from/env.toml")
        XCTAssertEqual(ConfigLoader.resolvePath(explicit: nil, environment: [:]), "/etc/watchkeeper/watchkeeper.toml")
        XCTAssertEqual(ConfigLoader.defaultPath, "/etc/watchkeeper/watchkeeper.toml")
    }

    func testResolvePath_emptyValuesCountAsUnset() {
        XCTAssertEqual(ConfigLoader.resolvePath(explicit: "", environment: ["WATCHKEEPER_CONFIG": "/from/env.toml"]), "/from/env.toml")
        XCTAssertEqual(ConfigLoader.resolvePath(explicit: "", environment: ["WATCHKEEPER_CONFIG": ""]), ConfigLoader.defaultPath)
    }
}
