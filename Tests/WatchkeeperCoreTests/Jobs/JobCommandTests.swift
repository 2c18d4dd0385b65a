import XCTest

@testable import WatchkeeperCore

/// A job's argv and environment, as written into SpawnStrings from a command parsed once
/// per group (JobCommand): the bytes `Placeholders.expand` and the dictionary of values
/// gave, and JobEnvironment's rule for the job's own variables.
final class JobCommandTests: XCTestCase {
    private func text(_ items: [[UInt8]]) -> [String] { items.map { String(decoding: $0, as: UTF8.self) } }

    private func request(_ subject: JobSubject, kind: JobKind = .watch, attempt: Int = 2) -> JobRequest {
        var settings = JobSettings(command: .shell("true"))
        settings.budget = .seconds(90)
        return JobRequest(key: JobKey(kind, "inbox"), runID: "0123456789abcdef", settings: settings, subject: subject, attempt: attempt)
    }

    private func argv(_ templates: [String], _ request: JobRequest, pid: Int32? = nil, more: [String: [UInt8]] = [:]) -> [[UInt8]] {
        let strings = SpawnStrings()
        JobCommand(.arguments(templates), name: request.name)
            .write(to: strings, JobPlaceholders(request: request, startedWall: WallTime(secondsSinceEpoch: 0, nanoseconds: 0), pid: pid, more: more))
        return strings.arguments
    }

    func testArguments_areWhatExpandGaveWithTheDictionaryOfValues() {
        let file = FileSubject(path: Array("/srv/in/sub/a b.txt".utf8), rootLength: 7, event: .movedIn, identity: nil)
        let templates = ["/bin/x", "{path}", "--dir={dir}", "{name}.{event}", "{watch}-{run_id}-{attempt}", "{{literal}}", "{scheduled}", "{budget}",
                         "{task}", "{pid}", "{nothing}", "", "{paths}", "{{path}}"]
        let values: [String: [UInt8]] = [
            "path": file.path, "dir": Array("/srv/in/sub".utf8), "name": Array("a b.txt".utf8), "event": Array("moved_in".utf8),
            "watch": Array("inbox".utf8), "run_id": Array("0123456789abcdef".utf8), "attempt": Array("2".utf8),
            "scheduled": Array("1970-01-01T00:00:00.000Z".utf8), "budget": Array(Duration.seconds(90).compactDescription.utf8),
        ]
        XCTAssertEqual(text(argv(templates, request(.file(file)))), text(templates.map { Placeholders.expand($0, values: values) }))
    }

    func testAFileAtTheRoot_hasTheRootAsItsDirectory() {
        let file = FileSubject(path: Array("/a".utf8), rootLength: 0, event: .closedWrite, identity: nil)
        XCTAssertEqual(text(argv(["{dir}", "{name}"], request(.file(file)))), ["/", "a"])
    }

    func testAListPlaceholderAlone_isOneArgumentPerFile_andAHooksOwnValuesReplaceTheRuns() {
        let files = ["/srv/in/a", "/srv/in/-rf *"].map { FileSubject(path: Array($0.utf8), rootLength: 7, event: .closedWrite, identity: nil) }
        XCTAssertEqual(text(argv(["/bin/x", "{paths}", "n={paths}"], request(.batch(files, input: .argv)))), ["/bin/x", "/srv/in/a", "/srv/in/-rf *", "n="])
        XCTAssertEqual(text(argv(["{budget}", "{outcome}", "{pid}"], request(.schedule(scheduledAt: nil), kind: .task), pid: 42,
                                 more: ["budget": Array("5s".utf8), "outcome": Array("failed".utf8)])), ["5s", "failed", "42"])
    }

    func testAShellCommand_isShDashC_withTheNameAsItsZeroth_andNoPlaceholders() {
        let strings = SpawnStrings()
        let request = request(.schedule(scheduledAt: nil), kind: .task)
        JobCommand(.shell("echo {path}"), name: "backup").write(to: strings, JobPlaceholders(request: request, startedWall: nil, pid: nil, more: [:]))
        XCTAssertEqual(text(strings.arguments), ["/bin/sh", "-c", "echo {path}", "backup"])
    }

    func testEnvironment_sharedFirst_lessWhatTheJobsOwnReplace_thenTheLastOfEachOwnName() {
        var settings = JobSettings(command: .shell("true"))
        settings.environment = ["JOURNAL_STREAM": "from-settings", "MODE": "fast"]
        let shared = JobEnvironment(key: JobKey(.watch, "inbox"), settings: settings, daemonEnvironment: ["PATH": "/usr/bin"], account: nil)
        let strings = SpawnStrings()
        strings.append(argument: Array("/bin/true".utf8))
        strings.addOwn("WATCHKEEPER_RUN_ID", Array("r1".utf8))
        strings.addOwn("JOURNAL_STREAM", Array("8:9".utf8))
        strings.addOwn("WATCHKEEPER_ATTEMPT") { $0.appendDecimal(1) }
        strings.addOwn("WATCHKEEPER_ATTEMPT") { $0.appendDecimal(2) }
        strings.finishEnvironment(shared: shared)
        XCTAssertEqual(text(strings.environment), [
            "MODE=fast", "PATH=/usr/bin", "WATCHKEEPER_BUDGET_SECONDS=\(settings.budget.secondsText)", "WATCHKEEPER_WATCH=inbox",
            "WATCHKEEPER_RUN_ID=r1", "JOURNAL_STREAM=8:9", "WATCHKEEPER_ATTEMPT=2",
        ])
        XCTAssertEqual(strings.searchPath, Array("/usr/bin".utf8))
        XCTAssertNil(strings.entryWithNUL)
    }

    func testANULByte_isFoundInTheArgumentOrEntryThatHasIt_atItsPlaceInTheFinalOrder() {
        var settings = JobSettings(command: .shell("true"))
        settings.environment = ["A": "x\u{0}y"]
        let shared = JobEnvironment(key: JobKey(.task, "t"), settings: settings, daemonEnvironment: [:], account: nil)
        let strings = SpawnStrings()
        strings.append(argument: Array("/bin/true".utf8))
        strings.append(argument: [0x61, 0, 0x62])
        strings.addOwn("B", [0x63, 0])
        strings.finishEnvironment(shared: shared)
        XCTAssertEqual(strings.argumentWithNUL, 1)
        XCTAssertEqual(strings.entryWithNUL, 0, "A= sorts first")
        let own = SpawnStrings()
        own.append(argument: Array("/bin/true".utf8))
        own.addOwn("B", [0x63, 0])
        own.finishEnvironment(shared: JobEnvironment(key: JobKey(.task, "t"), settings: JobSettings(command: .shell("true")), daemonEnvironment: [:], account: nil))
        XCTAssertEqual(own.entryWithNUL, 3, "after PATH, WATCHKEEPER_BUDGET_SECONDS and WATCHKEEPER_TASK")
    }

    func testReusedStrings_holdOnlyTheLatestSpawnsValues() {
        let strings = SpawnStrings()
        strings.append(argument: Array("/bin/first".utf8))
        strings.addOwn("X", Array("1".utf8))
        strings.finishEnvironment(shared: nil)
        strings.reset()
        strings.append(argument: Array("/bin/second".utf8))
        strings.finishEnvironment(shared: nil)
        XCTAssertEqual(text(strings.arguments), ["/bin/second"])
        XCTAssertEqual(strings.environment, [])
        let program = strings.withCStrings(path: nil) { path, argv, envp in
            (String(cString: path), argv[0].map { String(cString: $0) }, argv[1] == nil, envp[0] == nil)
        }
        XCTAssertEqual(program.0, "/bin/second")
        XCTAssertEqual(program.1, "/bin/second")
        XCTAssertTrue(program.2 && program.3)
    }
}
