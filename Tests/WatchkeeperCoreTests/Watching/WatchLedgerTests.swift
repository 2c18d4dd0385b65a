import XCTest

@testable import WatchkeeperCore

/// Which entry of the ledger a file found with none of its own at its name came from
/// (`WatchLedger.movedEntry`): admission reads the entry at the name, then the entries of the
/// file's form, in two statements, and the store may commit between them.
final class WatchLedgerTests: XCTestCase {
    private let left = Array("left".utf8)
    private let right = Array("right".utf8)

    /// Inode, size and mtime of a file written once; `changed` its change time (a rename
    /// moves it), the birth time fixed (the inode's incarnation).
    private func form(inode: UInt64, changed: Int64) -> FileIdentity {
        FileIdentity(device: 8, inode: inode, size: 3000, modifiedNanoseconds: 1_000, changedNanoseconds: changed, bornNanoseconds: 1_000)
    }

    private func entry(_ path: [UInt8], _ identity: FileIdentity, outcome: RunOutcome = .ok) -> LedgerEntry {
        LedgerEntry(path: path, identity: identity, outcome: outcome.rawValue, handledAt: WallTime(secondsSinceEpoch: 1, nanoseconds: 0))
    }

    /// renameat2's exchange in a polled tree: `left` now holds R. The entry at `left` was
    /// L's when read; then the other half's follow committed (the entries swapped names), so
    /// R's own entry is at `left` when its form is looked up. It is R's: the file is handled.
    func testAnExchangesOtherHalfCommittedBetweenTheTwoReads_findsTheFilesOwnEntryAtItsName() {
        let rNow = form(inode: 2, changed: 9_000)
        let rHandled = entry(left, form(inode: 2, changed: 2_000))
        let moved = WatchLedger.movedEntry(among: [rHandled], held: entry(left, form(inode: 1, changed: 2_000)), relative: left, identity: rNow)
        XCTAssertEqual(moved, rHandled)
    }

    /// The same two reads before the other half committed: R's entry is still at `right`.
    func testAnExchangeWhoseOtherHalfIsNotCommitted_findsTheFilesEntryAtTheOtherName() {
        let rHandled = entry(right, form(inode: 2, changed: 2_000))
        let moved = WatchLedger.movedEntry(among: [rHandled], held: entry(left, form(inode: 1, changed: 2_000)), relative: left,
                                           identity: form(inode: 2, changed: 9_000))
        XCTAssertEqual(moved, rHandled)
    }

    /// `cp -p` over a handled file: the same inode at its name all along, only its change time
    /// moved. Nothing says it was renamed: it runs.
    func testAFileChangedInPlace_whoseEntryWasAtItsNameAllAlong_isNotTakenForMoved() {
        let handled = entry(left, form(inode: 1, changed: 2_000))
        XCTAssertNil(WatchLedger.movedEntry(among: [handled], held: handled, relative: left, identity: form(inode: 1, changed: 9_000)))
    }

    /// A file new at its name, its form handled under another name: moved there.
    func testAFileWithNoEntryAtItsName_takesTheEntryOfItsFormAtAnotherName() {
        let elsewhere = entry(Array("a/old".utf8), form(inode: 3, changed: 2_000))
        XCTAssertEqual(WatchLedger.movedEntry(among: [elsewhere], held: nil, relative: left, identity: form(inode: 3, changed: 9_000)), elsewhere)
    }

    /// An entry whose job did not succeed says nothing was handled, wherever it is.
    func testAnEntryThatIsNotOk_isNeverTheFilesOwn() {
        let failed = entry(left, form(inode: 2, changed: 2_000), outcome: .failed)
        XCTAssertNil(WatchLedger.movedEntry(among: [failed], held: entry(left, form(inode: 1, changed: 2_000)), relative: left,
                                            identity: form(inode: 2, changed: 9_000)))
    }
}
