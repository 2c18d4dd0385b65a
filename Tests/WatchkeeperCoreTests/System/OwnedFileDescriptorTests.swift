import Dispatch
import SystemPackage
import XCTest

@testable import WatchkeeperCore

/// Whether an fd number is open, by fcntl(F_GETFD), which fails with EBADF otherwise.
private func isOpen(_ fd: Int32) -> Bool {
    valueOrErrno { fcntl(fd, F_GETFD) } != .failure(.badFileDescriptor)
}

final class OwnedFileDescriptorTests: XCTestCase {
    private let queue = DispatchQueue(label: "watchkeeper.test.owned-fd")

    func testGoingOutOfScope_closesTheDescriptor() throws {
        let reader: Int32
        let writer: Int32
        do {
            let pipe = try OwnedPipe()
            reader = pipe.readEnd.rawValue
            writer = pipe.writeEnd.rawValue
            XCTAssertTrue(isOpen(reader))
            XCTAssertTrue(isOpen(writer))
        }
        XCTAssertFalse(isOpen(reader))
        XCTAssertFalse(isOpen(writer))
    }

    func testClose_closesOnce_andTheDeinitDoesNotCloseAgain() throws {
        let pipe = try OwnedPipe()
        let reader = pipe.readEnd
        let writer = pipe.writeEnd
        let number = reader.rawValue
        try reader.close()
        XCTAssertFalse(isOpen(number))
        // The number is free again; whatever gets it next must stay open while the other
        // values go through their deinits (a second close of `number` would close it).
        let successor = try OwnedPipe()
        let successorNumbers = [successor.readEnd.rawValue, successor.writeEnd.rawValue]
        _ = consume writer
        for fd in successorNumbers { XCTAssertTrue(isOpen(fd)) }
    }

    func testRelease_leavesTheDescriptorOpenForTheNewOwner() throws {
        let pipe = try OwnedPipe()
        let released = pipe.readEnd.release()
        XCTAssertTrue(isOpen(released.rawValue))
        XCTAssertNoThrow(try nothingOrErrno { Glibc.close(released.rawValue) }.get())
        XCTAssertFalse(isOpen(released.rawValue))
    }

    func testReadSource_closesTheDescriptorInItsCancelHandler_andOnlyThere() throws {
        let pipe = try OwnedPipe(nonBlocking: true)
        let reader = pipe.readEnd
        let writer = pipe.writeEnd
        let number = reader.rawValue
        let closed = DispatchSemaphore(value: 0)
        let handle = reader.makeReadSource(queue: queue, afterClose: { closed.signal() })
        XCTAssertEqual(handle.descriptor.rawValue, number)
        XCTAssertTrue(isOpen(number), "handing the fd to the source closed it")
        handle.activate()
        XCTAssertTrue(isOpen(number))

        handle.cancel()
        XCTAssertEqual(closed.wait(timeout: .now() + .seconds(10)), .success, "the cancel handler never ran")
        XCTAssertFalse(isOpen(number))
        // The write end outlives the registered read end on purpose: closing it first
        // would make the read end hang up while registered (libdispatch #949).
        try writer.close()
    }

    func testCancellingASourceThatNeverStarted_stillClosesTheDescriptor() throws {
        let pipe = try OwnedPipe(nonBlocking: true)
        let reader = pipe.readEnd
        let writer = pipe.writeEnd
        let number = reader.rawValue
        let closed = DispatchSemaphore(value: 0)
        let handle = reader.makeReadSource(queue: queue, afterClose: { closed.signal() })
        handle.cancel()
        handle.activate()
        XCTAssertEqual(closed.wait(timeout: .now() + .seconds(10)), .success)
        XCTAssertFalse(isOpen(number))
        try writer.close()
    }
}
