import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

final class ConfigDiagnosticTests: XCTestCase {
    func testAQuotedKeyWithANewline_staysOneLineThatCannotPassForASecondDiagnostic() {
        let diagnostics = configErrors(#""a\n/etc/watchkeeper/watchkeeper.toml:1:1: forged" = 1"#)
        XCTAssertEqual(ConfigErrors(diagnostics).description.split(separator: "\n").count, 1)
        assertSingleDiagnostic(diagnostics, at: (1, 1),
                               #"unknown key "a\n/etc/watchkeeper/watchkeeper.toml:1:1: forged" in the top level (known keys: daemon, cluster, task, watch)"#)
    }

    func testControlCharactersInAMessage_areEscaped_andItsBackslashesKept() {
        let diagnostic = ConfigDiagnostic(file: "/etc/w.toml", position: SourcePosition(line: 2, column: 3),
                                          message: "value \"\u{1B}[2J\r\t\u{85}\" after '\\q'")
        XCTAssertEqual(diagnostic.description, #"/etc/w.toml:2:3: value "\x1b[2J\r\t\u0085" after '\q'"#)
    }

    func testAPathWithANewline_isEscapedInTheDiagnostic() {
        let diagnostic = ConfigDiagnostic(file: "/tmp/a\nb.toml", position: nil, message: "unable to read the configuration: No such file or directory")
        XCTAssertEqual(diagnostic.description, #"/tmp/a\nb.toml: unable to read the configuration: No such file or directory"#)
    }
}
