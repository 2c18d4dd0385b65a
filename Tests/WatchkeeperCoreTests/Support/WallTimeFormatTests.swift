import XCTest

@testable import WatchkeeperCore

/// `iso8601` (and the bytes a job's WATCHKEEPER_DEADLINE is written with) computes the
/// calendar itself; gmtime_r, which it replaced, is the reference.
final class WallTimeFormatTests: XCTestCase {
    private func reference(_ time: WallTime) -> String {
        let p = time.utcFields
        return "\(p.year)-\(p.month)-\(p.day)T\(p.hour):\(p.minute):\(p.second).\(WallTime.zeroPadded(time.nanoseconds / 1_000_000, 3))Z"
    }

    func testISO8601_isGmtimesCalendar_acrossLeapDaysCenturiesAndBeforeTheEpoch() {
        var seconds: [Int64] = [0, -1, 59, 86_399, 86_400, 951_782_400, 951_868_799, 4_107_542_400, 1_795_000_000, -62_167_219_200, 253_402_300_799]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 { seconds.append(Int64.random(in: -62_167_219_200...253_402_300_799, using: &generator)) }
        for value in seconds {
            let time = WallTime(secondsSinceEpoch: value, nanoseconds: Int32.random(in: 0..<1_000_000_000))
            var bytes: [UInt8] = [0x41]
            time.appendISO8601(to: &bytes)
            XCTAssertEqual(time.iso8601, reference(time), "\(value)")
            XCTAssertEqual(String(decoding: bytes.dropFirst(), as: UTF8.self), reference(time), "\(value)")
        }
    }

    func testISO8601_outsideYears0To9999_isGmtimesPaddingStill() {
        for value: Int64 in [253_402_300_800, -62_167_219_201] {
            let time = WallTime(secondsSinceEpoch: value, nanoseconds: 5_000_000)
            var bytes: [UInt8] = []
            time.appendISO8601(to: &bytes)
            XCTAssertEqual(time.iso8601, reference(time))
            XCTAssertEqual(String(decoding: bytes, as: UTF8.self), reference(time))
        }
        XCTAssertEqual(WallTime(secondsSinceEpoch: 253_402_300_800, nanoseconds: 0).iso8601, "10000-01-01T00:00:00.000Z")
    }
}
