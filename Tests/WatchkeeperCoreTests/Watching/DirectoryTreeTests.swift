import XCTest

@testable import WatchkeeperCore

/// The watch table's compact store: directories as names under a parent's index.
final class DirectoryTreeTests: XCTestCase {
    private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    func testAPath_isFoundByItsComponents_andRebuiltFromThem() {
        var tree = DirectoryTree()
        let node = tree.ensure(owner: 0, relative: bytes("a/b\u{1}/c d"))
        XCTAssertEqual(tree.find(owner: 0, relative: bytes("a/b\u{1}/c d")), node)
        XCTAssertEqual(tree.path(of: node), bytes("a/b\u{1}/c d"))
        XCTAssertNotNil(tree.find(owner: 0, relative: bytes("a/b\u{1}")))
        XCTAssertNil(tree.find(owner: 1, relative: bytes("a")), "another owner's tree is its own")
        XCTAssertNil(tree.find(owner: 0, relative: bytes("a/c")))
    }

    func testAnUnusedNode_isFreedWithEveryEmptyAncestor_andItsIndexReused() {
        var tree = DirectoryTree()
        let kept = tree.ensure(owner: 0, relative: bytes("keep"))
        tree[kept].wd = 1
        let deep = tree.ensure(owner: 0, relative: bytes("x/y/z"))
        let count = tree.nodes.count
        tree.pruneIfUnused(deep)
        XCTAssertNil(tree.find(owner: 0, relative: bytes("x")))
        XCTAssertEqual(tree.find(owner: 0, relative: bytes("keep")), kept)
        _ = tree.ensure(owner: 0, relative: bytes("p/q/r"))
        XCTAssertEqual(tree.nodes.count, count, "freed nodes are reused before the array grows")
    }

    /// 30,000 directories with 20-byte names come and go: the dead name bytes are
    /// compacted away, and every live directory is still found under its own name.
    func testNamesOfRemovedDirectories_areCompacted_andLiveOnesStayFindable() {
        var tree = DirectoryTree()
        for round in 0..<3 {
            var nodes: [Int32] = []
            for index in 0..<10_000 {
                let node = tree.ensure(owner: 0, relative: bytes(String(format: "r%d/dir-%014d", round, index)))
                tree[node].wd = Int32(index)
                nodes.append(node)
            }
            for (index, node) in nodes.enumerated() {
                XCTAssertEqual(tree.path(of: node), bytes(String(format: "r%d/dir-%014d", round, index)))
            }
            for node in nodes {
                tree[node].wd = -1
                tree.pruneIfUnused(node)
            }
            XCTAssertNil(tree.find(owner: 0, relative: bytes("r\(round)")))
        }
        let survivor = tree.ensure(owner: 0, relative: bytes("last/one"))
        XCTAssertEqual(tree.find(owner: 0, relative: bytes("last/one")), survivor)
        XCTAssertLessThan(tree.nodes.count, 10_100, "nodes were reused across rounds")
    }
}
