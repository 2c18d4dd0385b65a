import Dispatch
import Foundation
import Logging
import Synchronization
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The inotify backend on real directories: handing a tree over to another backend.
final class InotifyBackendTests: ScratchDirectoryTestCase {
    private let queue = SubsystemQueue(name: "test.inotify-backend.\(UUIDLess.next())")
    private final class Changes: Sendable {
        let all = Mutex<[WatchBackend.Change]>([])
    }
    private let changes = Changes()
    private var backend: InotifyBackend?

    override func setUpWithError() throws {
        try super.setUpWithError()
        let sources = SourceRegistry()
        let problems = ProblemAggregator(owner: "test", queue: queue, sources: sources, logger: Logger(label: "test"))
        backend = try queue.queue.sync {
            try InotifyBackend(queue: queue, sources: sources, problems: problems) { [changes] new in changes.all.withLock { $0 += new } }
        }
    }

    override func tearDownWithError() throws {
        queue.queue.sync { backend = nil }
        try super.tearDownWithError()
    }

    private func entries() -> [(name: String, locations: [WatchBackend.Location])] {
        changes.all.withLock { all in
            all.compactMap { change in
                guard case .entry(let event, let locations) = change else { return nil }
                return (String(decoding: event.name, as: UTF8.self), locations)
            }
        }
    }

    /// Issue 36: what inotify had queued for a tree when it moved to fanotify was dropped with
    /// its watches (a directory made just before the switch, never listed: its files lost).
    func testATreeHandedOver_stillGetsWhatWasQueuedForIt_andNothingAfter() throws {
        let owner = WatchOwner.rule("r")
        try FileManager.default.createDirectory(atPath: directory + "/sub", withIntermediateDirectories: true)
        try queue.queue.sync {
            let backend = try XCTUnwrap(backend)
            for relative in ["", "sub"] {
                let path = Array((relative.isEmpty ? directory : directory + "/" + relative).utf8)
                try backend.watch(.init(owner: owner, relative: Array(relative.utf8)), path: path, events: [.create, .closeWrite, .onlyDirectory]).get()
            }
            // Queued in the kernel, not read yet: the queue is busy with this block.
            XCTAssertEqual(mkdir(directory + "/made-just-before", 0o755), 0)
            XCTAssertEqual(mkdir(directory + "/sub/also-before", 0o755), 0)
            backend.handOver(owner)
            XCTAssertEqual(backend.watchedCount(of: owner), 0)
            XCTAssertEqual(mkdir(directory + "/made-after", 0o755), 0)
        }
        XCTAssertTrue(waitFor(10) { self.entries().count >= 2 }, "\(entries())")
        for _ in 0..<5 { queue.queue.sync {} }
        let seen = entries()
        XCTAssertEqual(seen.map(\.name), ["made-just-before", "also-before"])
        XCTAssertEqual(seen.map(\.locations), [[.init(owner: owner, relative: [])], [.init(owner: owner, relative: Array("sub".utf8))]])
    }
}
