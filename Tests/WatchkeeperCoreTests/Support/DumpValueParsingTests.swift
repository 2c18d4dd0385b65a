import XCTest
@testable import WatchkeeperCore

/// The JSON reader the control socket trusts with what any local client sends.
final class DumpValueParsingTests: XCTestCase {
    func testRoundTrip_ofTheDumpsOwnJSON() throws {
        let value: DumpValue = .object([
            .init("name", .string("caf\u{e9} \"quoted\" \\ back\nline\u{1}")),
            .init("count", .int(-42)),
            .init("ratio", .double(0.25)),
            .init("flags", .array([.bool(true), .bool(false), .null])),
            .init("nested", .object([.init("empty", .array([])), .init("also", .object([]))])),
            .init("emoji", .string("\u{1F600}")),
        ])
        XCTAssertEqual(try DumpValue.parse(json: value.json), value)
    }

    func testEscapes_includingSurrogatePairs() throws {
        XCTAssertEqual(try DumpValue.parse(json: #""a\u00e9\ud83d\ude00\/\b\f\t""#), .string("a\u{e9}\u{1F600}/\u{8}\u{c}\t"))
    }

    func testNumbers_integersStayIntegers_otherNumbersAreDoubles() throws {
        XCTAssertEqual(try DumpValue.parse(json: "9223372036854775807"), .int(Int64.max))
        XCTAssertEqual(try DumpValue.parse(json: "9223372036854775808"), .double(9223372036854775808))
        XCTAssertEqual(try DumpValue.parse(json: "1e3"), .double(1000))
        XCTAssertEqual(try DumpValue.parse(json: " -0.5 "), .double(-0.5))
    }

    func testNumbersBeyondADouble_areRefused_notReadAsInfinity() {
        // Found by fuzzing the control socket: infinity was written back as null, so a
        // request meant something else when relayed.
        for text in ["1e400", "-2.5e388888", "[0,-1e309]"] {
            XCTAssertThrowsError(try DumpValue.parse(json: text), text) { error in
                XCTAssertTrue("\(error)".contains("number out of range"), "\(error)")
            }
        }
        XCTAssertEqual(try DumpValue.parse(json: "1e-400"), .double(0))
    }

    func testRefusesWhatRFC8259Refuses() {
        for text in ["", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", "'x'", "\"\u{1}\"", "\"\\x\"", "\"\\ud800\"", "nul", "{} {}", "[1] x", "{\"a\" 1}"] {
            XCTAssertThrowsError(try DumpValue.parse(json: text), "accepted \(text.debugDescription)")
        }
        XCTAssertThrowsError(try DumpValue.parse(json: [0x22, 0xFF, 0x22]), "invalid UTF-8 in a string")
    }

    func testNestingIsCapped_soAHostileClientCannotRecurseWithoutBound() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        XCTAssertThrowsError(try DumpValue.parse(json: deep)) { error in
            XCTAssertTrue("\(error)".contains("nested deeper than 64"), "\(error)")
        }
        let fine = String(repeating: "[", count: 60) + String(repeating: "]", count: 60)
        XCTAssertNoThrow(try DumpValue.parse(json: fine))
    }

    func testErrorsSayWhere() {
        XCTAssertThrowsError(try DumpValue.parse(json: "{\"a\": tru}")) { error in
            XCTAssertEqual((error as? DumpValue.ParseError)?.offset, 6)
        }
    }
}
