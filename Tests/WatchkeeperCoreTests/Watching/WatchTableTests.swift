import XCTest

@testable import WatchkeeperCore

final class WatchTableTests: XCTestCase {
    private typealias Table = WatchTable<String>
    private typealias Location = Table.Location

    private func wd(_ value: Int32) -> WatchDescriptor { WatchDescriptor(rawValue: value) }
    private func at(_ owner: String, _ relative: String) -> Location { Location(owner: owner, relative: Array(relative.utf8)) }
    private func event(_ wd: Int32, _ mask: InotifyMask, _ name: String = "") -> InotifyEvent {
        InotifyEvent(wd: WatchDescriptor(rawValue: wd), mask: mask, cookie: 0, name: Array(name.utf8))
    }

    func testTwoOwnersOfOneDirectory_shareTheDescriptor_untilTheLastLetsGo() {
        var table = Table()
        XCTAssertEqual(table.insert(wd(1), for: at("photos", "")).insertion, .newWatch)
        XCTAssertEqual(table.insert(wd(1), for: at("backup", "2026")).insertion, .sharedWatch)
        XCTAssertEqual(table.insert(wd(1), for: at("photos", "")).insertion, .unchanged)
        XCTAssertEqual(Set(table.locations(of: wd(1))), [at("photos", ""), at("backup", "2026")])
        XCTAssertEqual(table.descriptor(owner: "backup", relative: Array("2026".utf8)), wd(1))
        XCTAssertEqual(table.descriptorCount, 1)
        XCTAssertEqual(table.locationCount, 2)

        XCTAssertNil(table.remove(at("photos", "")), "the other owner still needs the watch")
        XCTAssertEqual(table.remove(at("backup", "2026")), wd(1))
        XCTAssertEqual(table.descriptorCount, 0)
    }

    func testEventsOfASharedDescriptor_goToEveryOwnersDirectory() {
        var table = Table()
        table.insert(wd(3), for: at("a", "in"))
        table.insert(wd(3), for: at("b", ""))
        guard case .entry(_, let locations) = table.interpret(event(3, .closeWrite, "report.pdf")) else {
            return XCTFail("a file event was not attributed")
        }
        XCTAssertEqual(Set(locations.map { $0.path(of: Array("report.pdf".utf8)) }), [Array("in/report.pdf".utf8), Array("report.pdf".utf8)])
    }

    func testRemovingASubtree_takesThePrefixByWholeComponents_andReturnsOnlyUnusedDescriptors() {
        var table = Table()
        table.insert(wd(1), for: at("r", ""))
        table.insert(wd(2), for: at("r", "a"))
        table.insert(wd(3), for: at("r", "a/b"))
        table.insert(wd(4), for: at("r", "a/b/c"))
        table.insert(wd(5), for: at("r", "ab"))
        table.insert(wd(3), for: at("other", "b"))

        XCTAssertEqual(table.removeSubtree(owner: "r", under: Array("a".utf8)), [wd(2), wd(4)])
        XCTAssertEqual(table.descriptor(owner: "r", relative: Array("ab".utf8)), wd(5))
        XCTAssertEqual(table.descriptor(owner: "r", relative: []), wd(1))
        XCTAssertEqual(table.locations(of: wd(3)), [at("other", "b")])
        XCTAssertEqual(table.removeOwner("r"), [wd(1), wd(5)])
        XCTAssertEqual(table.locations(ofOwner: "other"), [at("other", "b")])
    }

    func testIgnored_dropsTheEntry_andTellsTheOwnersWhoStillHadIt() {
        var table = Table()
        table.insert(wd(7), for: at("a", "x"))
        table.insert(wd(7), for: at("b", ""))
        guard case .watchGone(let gone, let locations) = table.interpret(event(7, .ignored)) else {
            return XCTFail("IN_IGNORED was not interpreted as the watch going")
        }
        XCTAssertEqual(gone, wd(7))
        XCTAssertEqual(Set(locations), [at("a", "x"), at("b", "")])
        XCTAssertNil(table.descriptor(owner: "a", relative: Array("x".utf8)))
        XCTAssertEqual(table.descriptorCount, 0)
        // After the owner removed the watch itself, the kernel's IN_IGNORED tells nobody.
        table.insert(wd(8), for: at("a", "y"))
        XCTAssertEqual(table.remove(at("a", "y")), wd(8))
        XCTAssertEqual(table.interpret(event(8, .ignored)), .watchGone(wd(8), locations: []))
    }

    func testMoveSelf_detachesTheDescriptor_soItsLaterEventsAreNotAttributedToTheOldPath() {
        var table = Table()
        table.insert(wd(2), for: at("inbox", ""))
        XCTAssertEqual(table.interpret(event(2, .moveSelf)), .movedAway(wd(2), locations: [at("inbox", "")]))
        XCTAssertTrue(table.isDetached(wd(2)))
        let later = event(2, .create, "new.txt")
        XCTAssertEqual(table.interpret(later), .unattributed(later))
        // The removal still finds it, so the owner can unwatch it.
        XCTAssertEqual(table.remove(at("inbox", "")), wd(2))
    }

    func testADetachedDescriptorWatchedAgain_isAttachedToItsNewLocationOnly() {
        var table = Table()
        table.insert(wd(2), for: at("r", "old"))
        _ = table.interpret(event(2, .moveSelf))
        // The same inode watched again under its new name: the kernel returns the same wd.
        XCTAssertEqual(table.insert(wd(2), for: at("r", "new")).insertion, .newWatch)
        XCTAssertNil(table.descriptor(owner: "r", relative: Array("old".utf8)))
        XCTAssertEqual(table.interpret(event(2, .create, "f")), .entry(event(2, .create, "f"), locations: [at("r", "new")]))
    }

    func testDeleteSelfAndUnmount_areToldToTheOwners_beforeIgnoredDropsTheEntry() {
        var table = Table()
        table.insert(wd(4), for: at("r", "sub"))
        table.insert(wd(5), for: at("r", "mnt"))
        XCTAssertEqual(table.interpret(event(4, .deleteSelf)), .deleted(wd(4), locations: [at("r", "sub")]))
        XCTAssertEqual(table.interpret(event(5, .unmount)), .unmounted(wd(5), locations: [at("r", "mnt")]))
        XCTAssertEqual(table.interpret(event(4, .ignored)), .watchGone(wd(4), locations: [at("r", "sub")]))
        XCTAssertEqual(table.interpret(event(5, .ignored)), .watchGone(wd(5), locations: [at("r", "mnt")]))
        XCTAssertEqual(table.descriptorCount, 0)
    }

    func testOverflow_isForEveryOwner() {
        var table = Table()
        table.insert(wd(1), for: at("r", ""))
        XCTAssertEqual(table.interpret(InotifyEvent(wd: .none, mask: .queueOverflow, cookie: 0, name: [])), .overflow)
    }

    func testALocationWatchedAgainWithANewDescriptor_returnsTheOldOneForRemoval() {
        var table = Table()
        table.insert(wd(1), for: at("r", "d"))
        let result = table.insert(wd(9), for: at("r", "d"))
        XCTAssertEqual(result.insertion, .newWatch)
        XCTAssertEqual(result.replaced, wd(1))
        XCTAssertEqual(table.locations(of: wd(1)), [])
    }

    func testLocationPaths_joinByComponent() {
        XCTAssertEqual(at("r", "").path(of: Array("f".utf8)), Array("f".utf8))
        XCTAssertEqual(at("r", "a/b").path(of: Array("f".utf8)), Array("a/b/f".utf8))
        XCTAssertEqual(at("r", "a").path(of: []), Array("a".utf8))
        XCTAssertTrue(at("r", "a/b").isWithin(Array("a".utf8)))
        XCTAssertFalse(at("r", "ab").isWithin(Array("a".utf8)))
        XCTAssertTrue(at("r", "ab").isWithin([]))
    }
}
