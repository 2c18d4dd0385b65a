import XCTest

@testable import WatchkeeperCore

/// Pins the duration syntax of the configuration ("250ms", "1h30m") and the compact
/// form the dump prints, which must parse back to the same value.
final class DurationParserTests: XCTestCase {
    private func parse(_ text: String, file: StaticString = #filePath, line: UInt) -> Duration? {
        switch DurationParser.parse(text) {
        case .success(let duration):
            return duration
        case .failure(let failure):
            XCTFail("\"\(text)\" was refused: \(failure.reason)", file: file, line: line)
            return nil
        }
    }

    func testParse_acceptedForms_giveTheirValue() {
        let cases: [(text: String, expected: Duration, line: UInt)] = [
            ("250ms", .milliseconds(250), #line),
            ("5m", .seconds(300), #line),
            ("1h30m", .seconds(5_400), #line),
            ("1.5s", .milliseconds(1_500), #line),
            ("2d", .seconds(172_800), #line),
            ("0s", .zero, #line),
            ("90s", .seconds(90), #line),
            ("1s500ms", .milliseconds(1_500), #line),
            ("1d2h3m4s5ms6us", .seconds(93_784) + .milliseconds(5) + .microseconds(6), #line),
            ("10us", .microseconds(10), #line),
            ("0.5ms", .microseconds(500), #line),
            ("0.1s", .milliseconds(100), #line),
        ]
        for c in cases {
            XCTAssertEqual(parse(c.text, line: c.line), c.expected, "\"\(c.text)\"", line: c.line)
        }
    }

    func testParse_rejectedForms_sayWhy() {
        let expectation = DurationParser.expectation
        let cases: [(text: String, reason: String, line: UInt)] = [
            ("", "empty duration; \(expectation)", #line),
            // A bare number could be seconds or milliseconds: refuse to guess.
            ("30", "missing unit after 30; \(expectation)", #line),
            ("5 minutes", "missing unit after 5; \(expectation)", #line),
            ("1h 30m", expectation, #line),
            ("5x", #"unknown unit "x"; "# + expectation, #line),
            ("5minutes", #"unknown unit "minutes"; "# + expectation, #line),
            ("5M", #"unknown unit "M"; "# + expectation, #line),
            ("1m1h", "units must go from largest to smallest, each once; \(expectation)", #line),
            ("1s1s", "units must go from largest to smallest, each once; \(expectation)", #line),
            ("500ms1s", "units must go from largest to smallest, each once; \(expectation)", #line),
            ("-5s", expectation, #line),
            ("s", expectation, #line),
            (".s", expectation, #line),
            ("1.2.3s", expectation, #line),
            // Non-ASCII digits are digits to Unicode, not to an administrator's eye.
            ("\u{0663}s", expectation, #line),
            ("99999999999d", "duration too long", #line),
        ]
        for c in cases {
            switch DurationParser.parse(c.text) {
            case .success(let duration):
                XCTFail("\"\(c.text)\" was accepted as \(duration)", line: c.line)
            case .failure(let failure):
                XCTAssertEqual(failure.reason, c.reason, "\"\(c.text)\"", line: c.line)
            }
        }
    }

    func testExpectation_namesTheUnitsAndGivesExamples() {
        XCTAssertEqual(
            DurationParser.expectation,
            #"expected a number and a unit (ms, s, m, h, d), like "250ms", "5m" or "1h30m""#
        )
    }

    func testCompactDescription_usesTheLargestUnitsFirst() {
        let cases: [(duration: Duration, text: String, line: UInt)] = [
            (.seconds(90), "1m30s", #line),
            (.milliseconds(250), "250ms", #line),
            (.seconds(3_600), "1h", #line),
            (.zero, "0s", #line),
            (.seconds(5_400), "1h30m", #line),
            (.seconds(172_800), "2d", #line),
            (.seconds(93_784), "1d2h3m4s", #line),
            (.milliseconds(1_500), "1.5s", #line),
            (.seconds(30), "30s", #line),
            (.seconds(60), "1m", #line),
            (.microseconds(1_500), "1.5ms", #line),
            (.seconds(-90), "-1m30s", #line),
        ]
        for c in cases {
            XCTAssertEqual(c.duration.compactDescription, c.text, "\(c.duration)", line: c.line)
        }
    }

    func testCompactDescription_parsesBackToTheSameDuration() {
        let durations: [Duration] = [
            .zero, .milliseconds(250), .milliseconds(10), .milliseconds(1_500), .seconds(1), .seconds(30),
            .seconds(60), .seconds(90), .seconds(3_600), .seconds(5_400), .seconds(86_400), .seconds(93_784),
            .seconds(172_800), .seconds(60) + .milliseconds(500),
        ]
        for duration in durations {
            let text = duration.compactDescription
            XCTAssertEqual(parse(text, line: #line), duration, "\(duration) printed as \"\(text)\"")
        }
    }

    func testParsedText_printsBackUnchanged_whenAlreadyCompact() {
        for text in ["250ms", "5m", "1h30m", "1.5s", "2d", "0s", "1m30s", "1d2h3m4s"] {
            XCTAssertEqual(parse(text, line: #line)?.compactDescription, text)
        }
    }

    func testNanosecondsClamped_saturatesInsteadOfOverflowing() {
        XCTAssertEqual(Duration.seconds(2).nanosecondsClamped, 2_000_000_000)
        XCTAssertEqual(Duration.milliseconds(1_500).microseconds, 1_500_000)
        XCTAssertEqual(Duration.seconds(Int64.max).nanosecondsClamped, .max)
        XCTAssertEqual(Duration.seconds(Int64.min).nanosecondsClamped, .min)
        XCTAssertEqual(Duration.milliseconds(1_500).secondsDouble, 1.5)
    }
}
