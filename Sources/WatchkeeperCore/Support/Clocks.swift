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
        let p = utcFields
        return "\(p.year)-\(p.month)-\(p.day)T\(p.hour):\(p.minute):\(p.second).\(Self.zeroPadded(nanoseconds / 1_000_000, 3))Z"
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
