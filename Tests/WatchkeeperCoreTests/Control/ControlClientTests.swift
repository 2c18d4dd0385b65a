import Dispatch
import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The CLI's side of the control socket against a server that misbehaves on purpose.
final class ControlClientTests: XCTestCase {
    private var directory = ""

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("wk-client-\(getpid())-\(UInt64.random(in: 0 ... .max))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// (The servers send with MSG_NOSIGNAL: the client gives up and closes first, and a
    /// SIGPIPE would end the test process.)
    /// A server on its own thread: accepts one client, reads its call up to the NUL, then
    /// does `behave` with the connection.
    private func serve(_ behave: @escaping @Sendable (Int32) -> Void) throws -> String {
        let path = directory + "/control.sock"
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try socketCall(listener, path: path, connecting: false)
        XCTAssertEqual(listen(listener, 1), 0)
        Thread.detachNewThread {
            let connection = accept(listener, nil, nil)
            var byte: UInt8 = 1
            while read(connection, &byte, 1) == 1, byte != 0 {}
            behave(connection)
            close(connection)
            close(listener)
        }
        return path
    }

    func testAServerThatTricklesBytesAndNeverEndsTheReply_isGivenUpAtTheCallsDeadline() throws {
        let path = try serve { connection in
            // A byte every 100 ms for 10 s: each read succeeds, none ends the reply.
            for _ in 0 ..< 100 {
                var byte = UInt8(ascii: " ")
                guard send(connection, &byte, 1, Int32(MSG_NOSIGNAL)) == 1 else { return }
                usleep(100_000)
            }
        }
        let client = try ControlClient.connect(path: path, timeout: .seconds(1))
        let began = MonotonicInstant.now
        XCTAssertThrowsError(try client.call(VarlinkCall(method: "io.watchkeeper.Control.Status"))) { error in
            XCTAssertTrue("\(error)".contains("no reply within 1s"), "\(error)")
        }
        let took = MonotonicInstant.now - began
        XCTAssertLessThan(took, .seconds(5), "the deadline is for the whole call, not for each read")
    }

    func testAReplyOfTwelveMegabytes_isReadWhole() throws {
        let text = String(repeating: "x", count: 12 * 1024 * 1024)
        let reply = VarlinkReply.parameters([.init("text", .string(text))]).encoded
        let path = try serve { connection in
            var offset = 0
            while offset < reply.count {
                let written = reply.withUnsafeBytes { send(connection, $0.baseAddress! + offset, min(100_000, reply.count - offset), Int32(MSG_NOSIGNAL)) }
                guard written > 0 else { return }
                offset += written
            }
        }
        let client = try ControlClient.connect(path: path, timeout: .seconds(60))
        let answer = try client.call(VarlinkCall(method: "io.watchkeeper.Control.Dump")).get()
        XCTAssertEqual(answer["text"]?.stringValue?.utf8.count, text.utf8.count)
    }

    func testARefusalSentBeforeTheCallIsRead_isReportedAsPermissionDenied() throws {
        let path = directory + "/control.sock"
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try socketCall(listener, path: path, connecting: false)
        XCTAssertEqual(listen(listener, 1), 0)
        let refusal = VarlinkReply.error(ControlInterface.ErrorName.permissionDenied.error([.init("group", .string("wheel"))])).encoded
        // The daemon refuses at accept: it answers and closes before reading anything.
        let closed = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let connection = accept(listener, nil, nil)
            _ = refusal.withUnsafeBytes { send(connection, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
            close(connection)
            close(listener)
            closed.signal()
        }
        let client = try ControlClient.connect(path: path, timeout: .seconds(10))
        // Closed before the call is sent: the send fails with EPIPE.
        XCTAssertEqual(closed.wait(timeout: .now() + 10 * testDeadlineScale), .success, "the server never closed the connection")
        XCTAssertThrowsError(try client.call(VarlinkCall(method: "io.watchkeeper.Control.Status"))) { error in
            guard case ControlClientError.permissionDenied(_, let group, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(group, "wheel")
        }
    }
}
