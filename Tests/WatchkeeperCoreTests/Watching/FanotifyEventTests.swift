import XCTest

@_spi(Fuzzing) @testable import WatchkeeperCore

/// The decoder of fanotify's read buffer on hand-built buffers, laid out as the kernel
/// writes them: every field, every record type, and broken framing or records.
final class FanotifyEventTests: XCTestCase {
    /// One event as the kernel lays it out: metadata, then the records.
    private static func event(mask: FanotifyMask, pid: Int32 = 42, version: UInt8 = 3, metadataLength: UInt16 = 24,
                              eventLength: UInt32? = nil, records: [[UInt8]] = []) -> [UInt8] {
        let body = records.flatMap { $0 }
        var bytes: [UInt8] = []
        bytes += le(eventLength ?? UInt32(24 + body.count))
        bytes += [version, 0]
        bytes += le(metadataLength)
        bytes += le(mask.rawValue)
        bytes += le(Int32(-1))  // fd: FAN_NOFD
        bytes += le(pid)
        return bytes + body
    }

    /// A `fanotify_event_info_fid` record, NUL-terminated name and padding to 4 bytes
    /// included, as the kernel writes it; `length` overrides the header's length field.
    private static func fileIDRecord(type: UInt8, fsid: UInt64 = 0x1122_3344_5566_7788, handleType: Int32 = 1,
                                     handle: [UInt8] = Array(1...12), handleLength: UInt32? = nil,
                                     name: [UInt8]? = nil, length: UInt16? = nil) -> [UInt8] {
        var body = le(fsid) + le(handleLength ?? UInt32(handle.count)) + le(handleType) + handle
        if let name { body += name + [0] }
        while (4 + body.count) % 4 != 0 { body.append(0) }
        return [type, 0] + le(length ?? UInt16(4 + body.count)) + body
    }

    private static func le<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        withUnsafeBytes(of: value.littleEndian) { Array($0) }
    }

    private static func decode(_ bytes: [UInt8]) -> ([FanotifyEvent], FanotifyEvent.Decoding) {
        var events: [FanotifyEvent] = []
        let decoding = bytes.withUnsafeBytes { FanotifyEvent.decode($0, into: &events) }
        return (events, decoding)
    }

    func testAHandBuiltDirectoryAndNameEvent_decodesEveryField() {
        let bytes = Self.event(mask: [.create, .onDirectory], records: [Self.fileIDRecord(type: 2, name: Array("new dir".utf8))])
        XCTAssertEqual(bytes.count % 4, 0)
        let (events, decoding) = Self.decode(bytes)
        XCTAssertEqual(events, [FanotifyEvent(mask: [.create, .onDirectory], pid: 42,
                                              directory: FanotifyFileHandle(fileSystemID: 0x1122_3344_5566_7788, type: 1, bytes: Array(1...12)),
                                              name: Array("new dir".utf8))])
        XCTAssertEqual(decoding.consumedBytes, bytes.count)
        XCTAssertNil(decoding.firstMalformation)
    }

    func testAQueueOverflow_decodesWithoutRecords() {
        let bytes = Self.event(mask: .queueOverflow, pid: 0) + Self.event(mask: .create, records: [Self.fileIDRecord(type: 2, name: [0x61])])
        let (events, decoding) = Self.decode(bytes)
        XCTAssertEqual(events.map(\.mask), [.queueOverflow, .create])
        XCTAssertNil(events[0].directory)
        XCTAssertEqual(events[0].name, [])
        XCTAssertEqual(decoding, FanotifyEvent.Decoding(consumedBytes: bytes.count))
    }

    func testRenameAndObjectRecords_decode_andUnknownRecordsAreSkipped() {
        let pidfd: [UInt8] = [4, 0] + Self.le(UInt16(8)) + Self.le(Int32(9))
        let future: [UInt8] = [99, 0] + Self.le(UInt16(12)) + [UInt8](repeating: 0xAB, count: 8)
        let bytes = Self.event(mask: .rename, records: [
            Self.fileIDRecord(type: 10, handle: [1, 1, 1, 1], name: Array("old".utf8)), pidfd,
            Self.fileIDRecord(type: 12, handle: [2, 2, 2, 2], name: Array("new".utf8)), future,
            Self.fileIDRecord(type: 1, handleType: 7, handle: [3, 3, 3, 3, 3, 3, 3, 3]),
        ])
        let (events, decoding) = Self.decode(bytes)
        XCTAssertNil(decoding.firstMalformation)
        let event = try? XCTUnwrap(events.first)
        XCTAssertEqual(event?.directory?.bytes, [1, 1, 1, 1])
        XCTAssertEqual(event?.name, Array("old".utf8))
        XCTAssertEqual(event?.newDirectory?.bytes, [2, 2, 2, 2])
        XCTAssertEqual(event?.newName, Array("new".utf8))
        XCTAssertEqual(event?.object, FanotifyFileHandle(fileSystemID: 0x1122_3344_5566_7788, type: 7, bytes: [3, 3, 3, 3, 3, 3, 3, 3]))
    }

    /// Broken framing stops the decoding where it is; what came before is kept.
    func testBrokenFraming_stopsDecoding_andKeepsTheEventsBefore() {
        let good = Self.event(mask: .create, records: [Self.fileIDRecord(type: 2, name: [0x61])])
        let cases: [(bytes: [UInt8], problem: FanotifyMalformation)] = [
            (Array(good.prefix(23)), .truncatedMetadata),
            (Self.event(mask: .create, version: 2), .unsupportedVersion(2)),
            (Self.event(mask: .create, metadataLength: 20), .metadataLength(20)),
            (Self.event(mask: .create, metadataLength: 28), .metadataLength(28)),
            (Self.event(mask: .create, eventLength: 4096), .eventLength(4096)),
            (Self.event(mask: .create, eventLength: 0), .metadataLength(24)),
            (Array(good.dropLast(4)), .eventLength(UInt32(good.count))),
        ]
        for (bytes, problem) in cases {
            let (events, decoding) = Self.decode(good + bytes)
            XCTAssertEqual(events.count, 1, "\(problem)")
            XCTAssertEqual(decoding.consumedBytes, good.count, "\(problem)")
            XCTAssertEqual(decoding.firstMalformation, problem)
            XCTAssertEqual(decoding.droppedEvents, 0)
        }
    }

    /// A broken record inside a well-framed event drops that event only.
    func testABrokenRecord_dropsItsEvent_andDecodingGoesOn() {
        let good = Self.event(mask: .create, records: [Self.fileIDRecord(type: 2, name: [0x61])])
        let record = Self.fileIDRecord(type: 2, name: [0x62])
        let cases: [(records: [[UInt8]], problem: FanotifyMalformation)] = [
            ([Self.fileIDRecord(type: 2, name: [0x62], length: 0)], .recordLength(type: 2, length: 0)),
            ([Self.fileIDRecord(type: 2, name: [0x62], length: 2)], .recordLength(type: 2, length: 2)),
            ([Self.fileIDRecord(type: 2, name: [0x62], length: 200)], .recordLength(type: 2, length: 200)),
            ([[2, 0, 8, 0]], .truncatedRecordHeader),
            ([[1, 0, 8, 0, 0, 0, 0, 0]], .recordLength(type: 1, length: 8)),
            ([Self.fileIDRecord(type: 2, handleLength: 16, name: [])], .unterminatedName),
            ([Self.fileIDRecord(type: 2, handleLength: 500, name: [0x62])], .handleLength(500)),
            ([Self.fileIDRecord(type: 2, handle: [UInt8](repeating: 9, count: 132), name: [0x62])], .handleLength(132)),
            ([record, record], .duplicateRecord(type: 2)),
            ([record, Self.fileIDRecord(type: 3)], .duplicateRecord(type: 3)),
            ([Array(record.dropLast(4)) + [0x63, 0x63, 0x63, 0x63]], .unterminatedName),
        ]
        for (records, problem) in cases {
            var broken = Self.event(mask: .create, records: records)
            if problem == .truncatedRecordHeader {
                // A header cut short: the event ends two bytes into it.
                broken = Self.event(mask: .create, eventLength: 26, records: []) + [2, 0]
            }
            let (events, decoding) = Self.decode(good + broken + good)
            XCTAssertEqual(events.count, 2, "\(problem)")
            XCTAssertEqual(decoding.droppedEvents, 1, "\(problem)")
            XCTAssertEqual(decoding.firstMalformation, problem)
            XCTAssertEqual(decoding.consumedBytes, 2 * good.count + broken.count, "\(problem)")
        }
    }

    /// Every prefix and every single-byte corruption of a real-looking buffer: no crash,
    /// no read outside it (the address sanitizer would see one), and never more events than
    /// whole events in the bytes.
    func testEveryTruncationAndByteFlip_decodesWithoutReadingOutOfBounds() {
        let buffer = Self.event(mask: [.create, .onDirectory], records: [Self.fileIDRecord(type: 2, name: Array("dir".utf8))])
            + Self.event(mask: .queueOverflow, pid: 0)
            + Self.event(mask: .rename, records: [Self.fileIDRecord(type: 10, name: [0x61]), Self.fileIDRecord(type: 12, name: [0x62])])
        for length in 0...buffer.count {
            // A copy of exactly `length` bytes, so a read past it leaves the allocation.
            let prefix = Array(buffer.prefix(length))
            let (events, decoding) = Self.decode(prefix)
            XCTAssertLessThanOrEqual(decoding.consumedBytes, length)
            XCTAssertLessThanOrEqual(events.count, 3)
        }
        for position in buffer.indices {
            for value: UInt8 in [0, 1, 0x7F, 0xFF] {
                var corrupted = buffer
                corrupted[position] = value
                let (events, decoding) = Self.decode(corrupted)
                XCTAssertLessThanOrEqual(decoding.consumedBytes, corrupted.count)
                XCTAssertLessThanOrEqual(events.count + decoding.droppedEvents, 3)
            }
        }
    }
}
