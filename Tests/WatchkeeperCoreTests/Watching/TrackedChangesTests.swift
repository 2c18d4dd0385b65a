import XCTest

@testable import WatchkeeperCore

/// The bookkeeping behind a followed rename or attribute change (issue 36): what counts as
/// being written, where a rename came from, which O_TMPFILE a `#<inode>` close stands for.
final class TrackedChangesTests: XCTestCase {
    private let a = Array("a".utf8)
    private let b = Array("b".utf8)

    private func change(_ path: [UInt8], inode: UInt64 = 1, due: MonotonicInstant = .now) -> TrackedChanges.Change {
        let known = FileIdentity(device: 1, inode: inode, size: 3, modifiedNanoseconds: 1, changedNanoseconds: 1)
        return .init(path: path, from: path, known: known, seen: known, due: due)
    }

    func testAWrite_makesTheNameWritten_untilItsClose_andVoidsAChangeSeenBefore() {
        var changes = TrackedChanges()
        changes.track(change(a))
        changes.written(a)
        XCTAssertTrue(changes.isWriting(a))
        XCTAssertTrue(changes.pending.isEmpty, "a change seen before a write may have been the write's")
        changes.closed(a)
        XCTAssertFalse(changes.isWriting(a))
    }

    func testARename_saysWhereTheFileCameFrom_andCarriesItsWriting() {
        var changes = TrackedChanges()
        changes.movedFrom(a, cookie: 7)
        XCTAssertEqual(changes.movedTo(b, cookie: 7)?.path, a)
        XCTAssertEqual(changes.movedTo(b, cookie: 7)?.path, nil, "once")
        changes.written(a)
        changes.movedFrom(a, cookie: 8)
        XCTAssertEqual(changes.movedTo(b, cookie: 8)?.writing, true)
        XCTAssertTrue(changes.isWriting(b))
        XCTAssertFalse(changes.isWriting(a))
    }

    func testAnExchangesOtherHalf_doesNotTakeTheFirstHalfsChange() {
        var changes = TrackedChanges()
        changes.track(change(b, inode: 1))
        XCTAssertNil(changes.takePending(at: b, of: InodeKey(device: 1, inode: 2)))
        XCTAssertEqual(changes.takePending(at: b, of: InodeKey(device: 1, inode: 1))?.path, b)
    }

    func testChanges_areConfirmedWhenDue_andAnAdmissionVoidsThem() {
        var changes = TrackedChanges()
        let now = MonotonicInstant.now
        changes.track(change(a, due: now))
        changes.track(change(b, due: now + .seconds(5)))
        XCTAssertEqual(changes.takeDue(now: now).map(\.path), [a])
        XCTAssertEqual(changes.nextDue, now + .seconds(5))
        changes.admitted(b)
        XCTAssertNil(changes.nextDue)
    }

    func testTooManyNamesBeingWritten_makesEveryNameCountAsWritten_untilAllAreClosed() {
        var changes = TrackedChanges()
        for index in 0...TrackedChanges.writingLimit { changes.written(Array("f\(index)".utf8)) }
        XCTAssertTrue(changes.isWriting(Array("never-written".utf8)))
        changes.closed(Array("f0".utf8))
        XCTAssertFalse(changes.isWriting(Array("never-written".utf8)))
    }

    func testTheCloseOfAnOTmpfile_namesTheFileItWasLinkedTo_onlyWhileNobodyClosedThatName() {
        var changes = TrackedChanges()
        changes.mayBeLinkedTmpfile(inode: 12345, at: b)
        XCTAssertEqual(changes.linkedTmpfile(closedAs: Array("#12345".utf8)), b)
        XCTAssertNil(changes.linkedTmpfile(closedAs: Array("#12345".utf8)))
        changes.mayBeLinkedTmpfile(inode: 99, at: a)
        changes.closed(a) // an ordinary file, written in place and closed under its own name
        XCTAssertNil(changes.linkedTmpfile(closedAs: Array("#99".utf8)))
        // fanotify merges the tmpfile's close into its earlier MODIFY: the close comes first.
        XCTAssertNil(changes.linkedTmpfile(closedAs: Array("#77".utf8)))
        XCTAssertTrue(changes.wasClosedAsTmpfile(inode: 77))
        XCTAssertFalse(changes.wasClosedAsTmpfile(inode: 77), "once")
        XCTAssertEqual(TrackedChanges.tmpfileInode(Array("#0".utf8)), 0)
        for name in ["#", "#12a", "12", "#123#", "#99999999999999999999999"] {
            XCTAssertNil(TrackedChanges.tmpfileInode(Array(name.utf8)), name)
        }
    }
}
