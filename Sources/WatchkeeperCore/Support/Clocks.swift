#if canImport(Glibc)
import Glibc
#endif

/// Wall-clock instants, for what an operator reads ("last fired at"). Intervals,
/// budgets and ages are measured with `DispatchTime`/CLOCK_MONOTONIC instead,
/// which an NTP step or a manual `date -s` cannot bend.
public struct WallTime: Sendable, Equatable, Comparable {
    public let secondsSinceEpoch: Int64
    public let nanoseconds: Int32

    public init(secondsSinceEpoch: Int64, nanoseconds: Int32) {
        self.secondsSinceEpoch = secondsSinceEpoch
        self.nanoseconds = nanoseconds
    }

    public static func now() -> WallTime {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return WallTime(secondsSinceEpoch: Int64(spec.tv_sec), nanoseconds: Int32(spec.tv_nsec))
    }

    public static func < (lhs: WallTime, rhs: WallTime) -> Bool {
        (lhs.secondsSinceEpoch, lhs.nanoseconds) < (rhs.secondsSinceEpoch, rhs.nanoseconds)
    }

    /// RFC 3339 in UTC with milliseconds: 2026-11-22T01:02:03.456Z.
    public var iso8601: String {
        guard let civil = civilUTC else {
            let p = utcFields
            return "\(p.year)-\(p.month)-\(p.day)T\(p.hour):\(p.minute):\(p.second).\(Self.zeroPadded(nanoseconds / 1_000_000, 3))Z"
        }
        return String(unsafeUninitializedCapacity: Self.iso8601Length) { Self.writeISO8601(civil, milliseconds: nanoseconds / 1_000_000, to: $0) }
    }

    /// `iso8601`'s bytes appended to `bytes`, without a String on the way: a job's
    /// WATCHKEEPER_DEADLINE is written this way into its environment, on the way to its exec
    /// (docs/measurements/latency-path.md).
    func appendISO8601(to bytes: inout [UInt8]) {
        guard let civil = civilUTC else { return bytes.append(contentsOf: iso8601.utf8) }
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: Self.iso8601Length))
        bytes.withUnsafeMutableBufferPointer { buffer in
            _ = Self.writeISO8601(civil, milliseconds: nanoseconds / 1_000_000, to: UnsafeMutableBufferPointer(rebasing: buffer[start...]))
        }
    }

    private static let iso8601Length = 24

    /// The calendar in UTC from the seconds alone (Howard Hinnant's days-to-civil, exact for
    /// the proleptic Gregorian calendar gmtime uses), for years 0-9999; nil outside them,
    /// where `utcFields` pads differently, and for nanoseconds outside a second.
    private var civilUTC: (year: Int64, month: Int64, day: Int64, hour: Int64, minute: Int64, second: Int64)? {
        let days = secondsSinceEpoch >= 0 ? secondsSinceEpoch / 86_400 : (secondsSinceEpoch - 86_399) / 86_400
        let secondOfDay = secondsSinceEpoch - days * 86_400
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        guard (0...9_999).contains(year), (0..<1_000_000_000).contains(nanoseconds) else { return nil }
        return (year, month, day, secondOfDay / 3_600, secondOfDay / 60 % 60, secondOfDay % 60)
    }

    private static func writeISO8601(_ civil: (year: Int64, month: Int64, day: Int64, hour: Int64, minute: Int64, second: Int64),
                                      milliseconds: Int32, to buffer: UnsafeMutableBufferPointer<UInt8>) -> Int {
        var index = 0
        func digits(_ value: Int64, _ width: Int, then separator: UInt8?) {
            var rest = value
            for position in stride(from: index + width - 1, through: index, by: -1) {
                buffer[position] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            }
            index += width
            if let separator {
                buffer[index] = separator
                index += 1
            }
        }
        digits(civil.year, 4, then: UInt8(ascii: "-"))
        digits(civil.month, 2, then: UInt8(ascii: "-"))
        digits(civil.day, 2, then: UInt8(ascii: "T"))
        digits(civil.hour, 2, then: UInt8(ascii: ":"))
        digits(civil.minute, 2, then: UInt8(ascii: ":"))
        digits(civil.second, 2, then: UInt8(ascii: "."))
        digits(Int64(milliseconds), 3, then: UInt8(ascii: "Z"))
        return index
    }

    /// The calendar fields in UTC, zero-padded: a 4-digit year, 2 digits for the rest.
    var utcFields: (year: String, month: String, day: String, hour: String, minute: String, second: String) {
        var seconds = time_t(secondsSinceEpoch)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return (Self.zeroPadded(parts.tm_year + 1900, 4), Self.zeroPadded(parts.tm_mon + 1, 2), Self.zeroPadded(parts.tm_mday, 2),
                Self.zeroPadded(parts.tm_hour, 2), Self.zeroPadded(parts.tm_min, 2), Self.zeroPadded(parts.tm_sec, 2))
    }

    static func zeroPadded(_ value: Int32, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }
}

/// CLOCK_MONOTONIC, the clock systemd's MONOTONIC_USEC= and the journal's
/// monotonic timestamps use.
public enum MonotonicClock {
    public static func nowMicroseconds() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000_000 + UInt64(spec.tv_nsec) / 1_000
    }
}
