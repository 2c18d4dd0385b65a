import XCTest

@testable import WatchkeeperCore

final class HistoryViewTests: XCTestCase {
    private func reply(_ pathFields: [DumpField]) -> DumpValue {
        .object([.init("kind", .string("watch")), .init("runs", .array([
            .object([.init("run_id", .string("0123456789abcdef")), .init("outcome", .string("ok")),
                     .init("finished_at", .string("2026-11-26T08:00:00.000Z"))] + pathFields),
        ]))])
    }

    func testAPathThatIsNotUTF8_isSentAsAnEscapedStringWithItsBytes_andShownEscapedOnce() throws {
        let fields = WatchLedger.pathFields([0x69, 0x6e, 0x2f, 0xff, 0x2e, 0x63, 0x73, 0x76])
        XCTAssertEqual(fields.first { $0.key == "path" }?.value, .string("in/\\xff.csv"), "a string, as the interface declares")
        XCTAssertEqual(fields.first { $0.key == "path_bytes" }?.value, .array([105, 110, 47, 255, 46, 99, 115, 118].map { .int($0) }))
        // Through JSON and back, as the CLI gets it.
        let decoded = try DumpValue.parse(json: reply(fields).json)
        XCTAssertEqual(HistoryView.render(decoded).last?.hasSuffix("in/\\xff.csv"), true, HistoryView.render(decoded).joined(separator: "\n"))
    }

    func testAUTF8PathWithABackslashAndANewline_isSentAsItIs_andShownEscaped() throws {
        let name = Array("a\\b\nc.txt".utf8)
        let fields = WatchLedger.pathFields(name)
        XCTAssertEqual(fields.map(\.key), ["path"])
        let decoded = try DumpValue.parse(json: reply(fields).json)
        XCTAssertEqual(HistoryView.render(decoded).last?.hasSuffix("a\\\\b\\nc.txt"), true, HistoryView.render(decoded).joined(separator: "\n"))
    }
}
