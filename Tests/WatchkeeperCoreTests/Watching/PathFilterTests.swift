import XCTest

@testable import WatchkeeperCore

/// The temporary names a rule leaves out by default (`exclude_temporary`, issue 36): the
/// names tools write under before they rename the file into place.
final class PathFilterTests: XCTestCase {
    private let filter = PathFilter(include: [], exclude: [], excludesTemporaryNames: true)

    func testTheTemporaryNamesOfCommonTools_areNotSelected() {
        for name in [".report.csv.Ab3xY9", "dir/.x.000000", ".~tmp~/report.csv", "a/.~tmp~/b/c", "report.csv~", "report.csv.~12~",
                     ".report.csv.swp", ".notes.swo", "4913", "#notes.txt#", ".#notes.txt", ".notes.txt.kate-swp",
                     ".goutputstream-X1Y2Z3", "big.iso.part", "big.iso.partial", "big.iso.crdownload", "big.iso.filepart", "data.tmp"] {
            XCTAssertFalse(filter.selects(name), name)
            XCTAssertTrue(filter.isTemporary(Array(name.utf8)), name)
        }
    }

    func testOrdinaryNames_andTemporaryNamesWithTheDefaultTurnedOff_areSelected() {
        for name in ["report.csv", ".hidden", ".x.abc", ".x.abcdefg", "x.swp", "part", ".part", "tmp", "#123", "a~b", "49130", ".x.ab-def"] {
            XCTAssertTrue(filter.selects(name), name)
        }
        let everything = PathFilter(include: [], exclude: [])
        XCTAssertTrue(everything.selects("big.iso.part"))
        XCTAssertFalse(everything.isTemporary(Array("big.iso.part".utf8)))
    }

    func testRsyncsTemporaryDirectory_isStillWatched_soItsRenamesSayWhereFilesCameFrom() {
        XCTAssertTrue(filter.mayContainSelected(directory: ".~tmp~"))
        XCTAssertTrue(filter.mayContainSelected(directory: "a/.~tmp~"))
    }
}
