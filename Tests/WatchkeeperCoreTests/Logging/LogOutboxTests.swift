import Dispatch
import Foundation
import Synchronization
import XCTest

@testable import WatchkeeperCore

/// The daemon's own entries go out on the outbox's queue: a sink that blocks holds that
/// queue only, memory stays bounded, and what had to be dropped is said.
final class LogOutboxTests: XCTestCase {
    /// A sink that blocks until opened, keeping what it was given.
    private final class GatedSink: Sendable {
        let open = DispatchSemaphore(value: 0)
        let written = Mutex<[String]>([])

        func write(_ entries: [LogOutbox.Entry]) {
            open.wait()
            open.signal()
            for entry in entries {
                let text: String
                switch entry {
                case .journal(_, let fallback): text = fallback()
                case .stderr(let bytes): text = String(decoding: bytes, as: UTF8.self)
                case .dropReport(let report): text = "REPORT " + report
                }
                written.withLock { $0.append(text) }
            }
        }
    }

    func testASinkThatBlocks_holdsNoCaller_andMemoryStaysBounded() {
        let sink = GatedSink()
        let outbox = LogOutbox { sink.write($0) }
        let line = [UInt8](repeating: UInt8(ascii: "x"), count: 1_023) + [UInt8(ascii: "\n")]
        let count = LogOutbox.maxBytes / line.count + 100
        let started = MonotonicInstant.now
        for _ in 0..<count { outbox.submit(.stderr(line), size: line.count) }
        XCTAssertLessThan(MonotonicInstant.now - started, .seconds(2), "a caller waited for the blocked sink")
        XCTAssertFalse(outbox.flush(within: .milliseconds(50)), "flushed through a sink that takes nothing")
        guard case .object(let fields) = outbox.describe() else { return XCTFail("no description") }
        let values = Dictionary(fields.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
        guard case .int(let waiting)? = values["waiting_bytes"], case .int(let dropped)? = values["dropped_entries"] else {
            return XCTFail("\(fields)")
        }
        XCTAssertLessThanOrEqual(Int(waiting), LogOutbox.maxBytes)
        XCTAssertGreaterThanOrEqual(dropped, 100)

        sink.open.signal()
        XCTAssertTrue(outbox.flush(within: .seconds(10)))
        let written = sink.written.withLock { $0 }
        XCTAssertEqual(written.count, count - Int(dropped) + 1)
        XCTAssertTrue(written.contains { $0.hasPrefix("REPORT dropped \(dropped) log entries") }, "no word of the dropped entries")
    }

    func testEntriesGoOutInTheOrderGiven() {
        let sink = GatedSink()
        sink.open.signal()
        let outbox = LogOutbox { sink.write($0) }
        for index in 0..<1_000 {
            let text = "entry \(index)"
            if index.isMultiple(of: 2) {
                outbox.submit(.stderr(Array(text.utf8)), size: text.utf8.count)
            } else {
                outbox.submit(.journal([], fallback: { text }), size: text.utf8.count)
            }
        }
        XCTAssertTrue(outbox.flush(within: .seconds(10)))
        XCTAssertEqual(sink.written.withLock { $0 }, (0..<1_000).map { "entry \($0)" })
    }

    /// A run's hook waits for its record (`afterWritten`), the stop and the ready line for
    /// everything (`flush`): neither waits out the writer's gathering, however long it is.
    func testAfterWrittenAndFlush_endTheWritersGatheringAtOnce() {
        let sink = GatedSink()
        sink.open.signal()
        let outbox = LogOutbox(gathering: .seconds(60)) { sink.write($0) }
        outbox.submit(.stderr(Array("record\n".utf8)), size: 7)
        let ran = DispatchSemaphore(value: 0)
        let started = MonotonicInstant.now
        outbox.afterWritten { ran.signal() }
        XCTAssertEqual(ran.wait(timeout: .now() + 20), .success, "afterWritten waited out the gathering")
        XCTAssertEqual(sink.written.withLock { $0 }, ["record\n"])
        outbox.submit(.stderr(Array("last\n".utf8)), size: 5)
        XCTAssertTrue(outbox.flush(within: .seconds(20)), "flush waited out the gathering")
        XCTAssertEqual(sink.written.withLock { $0 }, ["record\n", "last\n"])
        XCTAssertLessThan(MonotonicInstant.now - started, .seconds(30))
    }
}
