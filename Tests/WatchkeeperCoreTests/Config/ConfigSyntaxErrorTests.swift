import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Files on which toml++ (inside TOMLKit) failed one of its own assertions, which aborted
/// the process: `check-config` and `run` died with SIGABRT, and a reload with such a file
/// killed the running daemon. Each is now a syntax error at the character that is wrong.
final class ConfigSyntaxErrorTests: XCTestCase {
    func testParse_tableHeaderWhoseKeyStartsWithAComma_isASyntaxErrorAtTheComma() {
        assertSingleConfigError("[,daemon]\n", at: (1, 2),
                                "syntax error: Error while parsing table header: expected bare key starting character or string delimiter, saw ','")
    }

    func testParse_threeOpeningBracketsOfATableHeader_isASyntaxErrorAtTheThird() {
        assertSingleConfigError("[[[task]]]\n", at: (1, 3),
                                "syntax error: Error while parsing table header: expected bare key starting character or string delimiter, saw '['")
    }

    func testParse_arrayElementThatIsAClosingBrace_isASyntaxErrorAtTheBrace() {
        let source = """
            [[task]]
            name = "t"
            every = "1s"
            command = [}/bin/true"]
            """
        assertSingleConfigError(source, at: (4, 12), "syntax error: Error while parsing array: expected value or closing ']', saw '}'")
    }

    func testParse_dateFollowedByASpaceAndOneDigit_isASyntaxErrorAtTheDigit() {
        // toml++ looks past the space for a time ("2024-01-01 12:00:00"); a lone digit
        // ended its look-ahead where it asserted there was more.
        for (source, column) in [("x = 2024-01-01 1\n", 16), ("x = 2024-01-01 1", 16), ("x = 2024-01-01 1 # at 1 pm\n", 16)] {
            assertSingleConfigError(source, at: (1, column), "syntax error: Error while parsing key-value pair: expected a comment or whitespace, saw '1'")
        }
    }
}
