import XCTest

@testable import WatchkeeperCore

/// The byte search that stands in for _StringProcessing's (Support/TextSearch.swift) answers
/// as the standard library's does for the needles the daemon looks for.
final class TextSearchTests: XCTestCase {
    func testContains_findsANeedleAnywhere_andNotAMissingOne() {
        XCTAssertTrue("Transfer-Encoding: chunked".lowercased().contains(utf8: "chunked"))
        XCTAssertTrue("etcdserver: lease not found".contains(utf8: "lease not found"))
        XCTAssertTrue("ab".contains(utf8: "ab"))
        XCTAssertTrue("abc".contains(utf8: ""), "the standard library finds an empty string in any")
        XCTAssertFalse("keep-aliv".contains(utf8: "keep-alive"))
        XCTAssertFalse("".contains(utf8: "a"))
        XCTAssertFalse("/srv/a/b".contains(utf8: "//"))
        XCTAssertTrue("/srv//b".contains(utf8: "//"))
        XCTAssertTrue("naïve café".contains(utf8: "café"), "multi-byte needles match by their bytes")
    }

    func testContains_onASubstring_searchesOnlyItsPart() {
        let text = "zoneinfo/Europe/Paris"
        let tail = text.dropFirst(9)
        XCTAssertFalse(tail.contains(utf8: "zoneinfo"))
        XCTAssertTrue(tail.contains(utf8: "Paris"))
    }

    func testRanges_areEveryOccurrenceWithoutOverlap_asStringIndices() {
        let target = "/usr/share/zoneinfo/posix/zoneinfo/Europe/Paris"
        let ranges = target.ranges(utf8: "zoneinfo/")
        XCTAssertEqual(ranges.count, 2)
        XCTAssertEqual(String(target[ranges[1].upperBound...]), "Europe/Paris")
        XCTAssertEqual("aaaa".ranges(utf8: "aa").count, 2, "occurrences do not overlap")
        XCTAssertEqual("é/zoneinfo/UTC".ranges(utf8: "zoneinfo/").map { String("é/zoneinfo/UTC"[$0]) }, ["zoneinfo/"])
        XCTAssertEqual("abc".ranges(utf8: "").count, 0)
    }

    func testSplit_leavesEmptyPartsOut_likeSplitSeparator() {
        let status = "Package: cron\nStatus: install ok installed\n\n\n\nPackage: cronie\n\n"
        XCTAssertEqual(status.split(utf8Separator: "\n\n"), ["Package: cron\nStatus: install ok installed", "Package: cronie"])
        XCTAssertEqual("".split(utf8Separator: "\n\n"), [])
        XCTAssertEqual("no separator".split(utf8Separator: "\n\n"), ["no separator"])
    }

    func testOffsets_fromAnOffset_andTheFirstOnly() {
        let page = Array("<title>a</title><title>b</title>".utf8)
        XCTAssertEqual(ByteSearch.offsets(of: Array("<title>".utf8), in: page), [0, 16])
        XCTAssertEqual(ByteSearch.firstOffset(of: Array("<title>".utf8), in: page, from: 1), 16)
        XCTAssertEqual(ByteSearch.firstOffset(of: Array("</title>".utf8), in: page, from: 30), nil)
    }
}
