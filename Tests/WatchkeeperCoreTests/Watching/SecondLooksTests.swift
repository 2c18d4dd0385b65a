import XCTest

@testable import WatchkeeperCore

/// The second looks of a poller as a plain value: when each is due, and the pause after a
/// file system failed one (issue 36: the daemon stat'ed in a loop for a whole outage).
final class SecondLooksTests: XCTestCase {
    private let start = MonotonicInstant(nanoseconds: 1_000_000_000_000)
    private func identity(size: Int64) -> FileIdentity {
        FileIdentity(device: 1, inode: 2, size: size, modifiedNanoseconds: 3, changedNanoseconds: 3, bornNanoseconds: nil, generation: nil)
    }

    func testALookIsDueSettleAfterTheLast_andNotBefore() {
        var looks = SecondLooks(settle: .seconds(5), maximumPause: .seconds(10))
        looks.saw(Array("a".utf8), as: identity(size: 1), at: start)
        XCTAssertTrue(looks.due(at: start + .seconds(4)).isEmpty)
        XCTAssertEqual(looks.due(at: start + .seconds(5)).map(\.path), [Array("a".utf8)])
        XCTAssertEqual(looks.nextLook, start + .seconds(5))
        looks.saw(Array("a".utf8), as: identity(size: 2), at: start + .seconds(5))
        XCTAssertEqual(looks.waiting[Array("a".utf8)]?.firstSeen, start, "a file that changed keeps its first sighting")
    }

    func testAFailedLook_pausesEveryLook_doublingUpToTheLongestPause_andNeverDueInThePast() {
        var looks = SecondLooks(settle: .seconds(1), maximumPause: .seconds(10))
        looks.saw(Array("a".utf8), as: identity(size: 1), at: start)
        var now = start + .seconds(1)
        var pauses: [Duration] = []
        for _ in 0..<6 {
            XCTAssertFalse(looks.due(at: now).isEmpty)
            looks.fileSystemFailed(at: now)
            let next = looks.nextLook!
            XCTAssertGreaterThan(next, now, "the next look after a failure must be in the future, or its timer fires at once")
            XCTAssertTrue(looks.due(at: now).isEmpty)
            pauses.append(next - now)
            now = next
        }
        XCTAssertEqual(pauses, [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(10), .seconds(10)])
        looks.fileSystemAnswered()
        XCTAssertEqual(looks.nextLook, start + .seconds(1), "an answer ends the pause")
    }

    func testASettleOfZero_stillPausesAfterAFailure() {
        var looks = SecondLooks(settle: .zero, maximumPause: .seconds(10))
        looks.saw(Array("a".utf8), as: identity(size: 1), at: start)
        looks.fileSystemFailed(at: start)
        XCTAssertGreaterThan(looks.nextLook!, start)
    }
}

/// What a poller tells of a rename within a FUSE tree, and what it shows of itself.
final class PolledMovesTests: XCTestCase {
    private func known(_ inode: UInt64, size: Int64 = 10, modified: Int64 = 7) -> PolledDirectory.KnownFile {
        PolledDirectory.KnownFile(inode: inode, size: size, modified: modified, changed: modified)
    }

    func testARename_isToldWhicheverHalfAPassSeesFirst() {
        var moves = PolledMoves()
        XCTAssertNil(moves.vanished(Array("job".utf8), known(5), pass: 1))
        let first = moves.appeared(Array("done/job".utf8), known(5), pass: 1)
        XCTAssertEqual(first.map { [$0.from, $0.to] }, [Array("job".utf8), Array("done/job".utf8)])
        XCTAssertNil(moves.appeared(Array("done/other".utf8), known(6), pass: 2))
        let second = moves.vanished(Array("other".utf8), known(6), pass: 3)
        XCTAssertEqual(second.map { [$0.from, $0.to] }, [Array("other".utf8), Array("done/other".utf8)], "the next pass completes it")
    }

    func testAnotherFileWithTheNumber_orSightingsTwoPassesOld_areNoRename() {
        var moves = PolledMoves()
        XCTAssertNil(moves.vanished(Array("a".utf8), known(5), pass: 1))
        XCTAssertNil(moves.appeared(Array("b".utf8), known(5, size: 11), pass: 1), "another size: another file")
        XCTAssertNil(moves.vanished(Array("c".utf8), known(9), pass: 1))
        moves.passEnded(3)
        XCTAssertNil(moves.appeared(Array("d".utf8), known(9), pass: 3))
        XCTAssertNil(moves.vanished(Array("e".utf8), .unknown, pass: 3), "a file never looked at tells nothing")
    }

    func testAPollerWaitingForTheFileSystem_saysWhere_evenAtTheTopOfTheTree() {
        var progress = PollProgress()
        let now = MonotonicInstant(nanoseconds: 100_000_000_000)
        progress.busySince = now - .seconds(36)
        progress.directory = []
        let text = progress.stateText(now: now) { relative in Array("/mnt/share".utf8) + (relative.isEmpty ? [] : [UInt8(ascii: "/")] + relative) }
        XCTAssertEqual(text, "waiting 36s for the file system (at /mnt/share)")
    }
}
