import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Values that would reach a job's argv, environment or paths in a form the system
/// cannot take: an empty program name, and a NUL written as an escape (TOMLKit's C
/// strings cut the value at it, so `"a\u0000b"` silently became `"a"`).
final class ConfigJobValueTests: XCTestCase {
    private static let nul = #"\u0000 is a NUL byte, which would cut the string short: the system reads arguments, environment variables and paths only up to a NUL"#

    private static func task(_ extra: String, command: String = #"["/bin/true"]"#) -> String {
        "[[task]]\nname = \"a\"\nevery = \"1h\"\ncommand = \(command)\n\(extra)"
    }

    // MARK: - Empty program

    func testParse_emptyProgramName_isRefusedAtThatElement() {
        assertSingleConfigError(Self.task("", command: #"["", "--flag"]"#), at: (4, 12),
                                "task.command must start with the program to run, not an empty string")
    }

    func testParse_emptyProgramNameInOnExpire_isRefusedToo() {
        assertSingleConfigError(Self.task(#"on_expire = [""]"#), at: (5, 14),
                                "task.on_expire must start with the program to run, not an empty string")
    }

    func testParse_emptyArgumentAfterTheProgram_isAllowed() throws {
        let configuration = try ConfigLoader.parse(source: Self.task("", command: #"["/bin/echo", ""]"#), path: configPath, environment: [:]).get()
        XCTAssertEqual(configuration.tasks.first?.job.command, .arguments(["/bin/echo", ""]))
    }

    // MARK: - NUL escapes

    func testParse_nulEscapeInACommandElement_isRefusedAtTheBackslash() {
        assertSingleConfigError(Self.task("", command: #"["/bin/echo", "a\u0000b"]"#), at: (4, 27), Self.nul)
    }

    func testParse_nulEscapeInAnEnvironmentValue_isRefusedAtTheBackslash() {
        assertSingleConfigError(Self.task(#"environment = { A = "x\u0000y" }"#), at: (5, 23), Self.nul)
    }

    func testParse_nulEscapeInAPath_isRefusedAtTheBackslash() {
        assertSingleConfigError(Self.task(#"working_directory = "/srv\u0000/x""#), at: (5, 26), Self.nul)
        assertSingleConfigError("[[watch]]\nname = \"w\"\npath = \"/srv/in\\u0000box\"\ncommand = [\"/bin/true\"]\n", at: (3, 16), Self.nul)
    }

    func testParse_longNulEscapeAndMultiLineStrings_areRefusedToo() {
        assertSingleConfigError(Self.task(#"environment = { A = "x\U00000000" }"#), at: (5, 23),
                                #"\U00000000 is a NUL byte, which would cut the string short: the system reads arguments, environment variables and paths only up to a NUL"#)
        assertSingleConfigError(Self.task("", command: "[\"/bin/sh\", \"-c\", \"\"\"\necho \\u0000\n\"\"\"]"), at: (5, 6), Self.nul)
    }

    func testParse_nulEscapeInAQuotedEnvironmentName_isRefused() {
        assertSingleConfigError(Self.task(#"environment = { "A\u0000B" = "x" }"#), at: (5, 19), Self.nul)
    }

    func testParse_backslashUInALiteralString_isPlainText() throws {
        // '...' strings have no escapes: this is six characters, not a NUL.
        let configuration = try ConfigLoader.parse(source: Self.task("", command: #"["/bin/echo", '\u0000']"#), path: configPath, environment: [:]).get()
        XCTAssertEqual(configuration.tasks.first?.job.command, .arguments(["/bin/echo", #"\u0000"#]))
    }

    func testParse_escapedBackslashBeforeU0000_isNotANul() throws {
        let configuration = try ConfigLoader.parse(source: Self.task("", command: #"["/bin/echo", "\\u0000"]"#), path: configPath, environment: [:]).get()
        XCTAssertEqual(configuration.tasks.first?.job.command, .arguments(["/bin/echo", #"\u0000"#]))
    }
}
