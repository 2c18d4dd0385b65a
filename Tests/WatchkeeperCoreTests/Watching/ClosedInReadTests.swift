import XCTest

@testable import WatchkeeperCore

/// Which CREATEs of a read have their file's close in the same read: searched in a small read,
/// hashed in a burst's, with the same answers.
final class ClosedInReadTests: XCTestCase {
    private let location = WatchTable<WatchOwner>.Location(owner: .rule("inbox"), relative: [])

    private func entry(_ wd: Int32, _ mask: InotifyMask, _ name: String) -> WatchBackend.Change {
        .entry(InotifyEvent(wd: WatchDescriptor(rawValue: wd), mask: mask, cookie: 0, name: Array(name.utf8)), locations: [location])
    }

    private func created(_ wd: Int32, _ name: String) -> InotifyEvent {
        InotifyEvent(wd: WatchDescriptor(rawValue: wd), mask: .create, cookie: 0, name: Array(name.utf8))
    }

    /// A read of `padding` unrelated events around the ones that matter.
    private func read(padding: Int) -> [WatchBackend.Change] {
        var changes = (0..<padding).map { entry(1, .modify, "other-\($0)") }
        changes += [entry(1, .create, "a"), entry(1, .closeWrite, "a"), entry(1, .create, "b"),
                    entry(2, .closeWrite, "c"), entry(1, [.closeWrite, .isDirectory], "d"), .overflow]
        return changes
    }

    func testAClosedFile_isFound_byDescriptorAndName_inASmallReadAndInABurst() {
        for padding in [0, EntryEvents.ClosedInRead.searchedUpTo + 1, 500] {
            let closed = EntryEvents.ClosedInRead(read(padding: padding))
            XCTAssertTrue(closed.contains(created(1, "a")), "a read of \(padding + 6)")
            XCTAssertFalse(closed.contains(created(1, "b")), "not closed, \(padding + 6)")
            XCTAssertFalse(closed.contains(created(1, "c")), "closed under another descriptor, \(padding + 6)")
            XCTAssertTrue(closed.contains(created(2, "c")), "\(padding + 6)")
            XCTAssertFalse(closed.contains(created(1, "d")), "a directory's close is no file's, \(padding + 6)")
            XCTAssertFalse(closed.contains(created(1, "other-0")), "modified, never closed, \(padding + 6)")
        }
    }

    func testAnEmptyRead_holdsNoClose() {
        XCTAssertFalse(EntryEvents.ClosedInRead([]).contains(created(1, "a")))
    }
}
