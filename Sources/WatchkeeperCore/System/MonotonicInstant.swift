import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// A point on CLOCK_MONOTONIC, in nanoseconds since boot (not counting suspend): the
/// clock `DispatchTime.uptimeNanoseconds` reads on Linux, so instants convert to dispatch
/// deadlines without drift, and the clock NTP steps and `date -s` cannot move.
///
/// Deadlines, ages and budgets are instants and `Duration`s instead of bare `UInt64`
/// nanoseconds, so that "a deadline minus now" is a Duration with a sign, and adding a
/// configured duration cannot overflow into the past.
public struct MonotonicInstant: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let nanoseconds: UInt64

    public init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    public init(_ time: DispatchTime) {
        self.nanoseconds = time.uptimeNanoseconds
    }

    public static var now: MonotonicInstant {
        var spec = timespec()
        // Cannot fail for CLOCK_MONOTONIC with a valid pointer (EINVAL and EFAULT only).
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return MonotonicInstant(nanoseconds: UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec))
    }

    /// The same instant as a dispatch deadline. Instants past Int64's range (a deadline
    /// of "now + 1000 years") become `.distantFuture`, which Dispatch reads as never.
    public var dispatchTime: DispatchTime {
        nanoseconds >= UInt64(Int64.max) ? .distantFuture : DispatchTime(uptimeNanoseconds: nanoseconds)
    }

    /// Saturates at both ends of the clock instead of wrapping around.
    public static func + (instant: MonotonicInstant, duration: Duration) -> MonotonicInstant {
        let offset = duration.nanosecondsClamped
        if offset >= 0 {
            let (sum, overflow) = instant.nanoseconds.addingReportingOverflow(UInt64(offset))
            return MonotonicInstant(nanoseconds: overflow ? .max : sum)
        }
        let magnitude = offset.magnitude
        return MonotonicInstant(nanoseconds: instant.nanoseconds > magnitude ? instant.nanoseconds - magnitude : 0)
    }

    public static func - (instant: MonotonicInstant, duration: Duration) -> MonotonicInstant {
        instant + (.zero - duration)
    }

    public static func += (instant: inout MonotonicInstant, duration: Duration) {
        instant = instant + duration
    }

    /// Negative when `later` is actually earlier: a deadline already passed.
    public static func - (later: MonotonicInstant, earlier: MonotonicInstant) -> Duration {
        Duration.between(nanoseconds: earlier.nanoseconds, and: later.nanoseconds)
    }

    /// How long ago `self` was, as of `now`.
    public func elapsed(at now: MonotonicInstant = .now) -> Duration {
        now - self
    }

    public static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    /// Seconds since boot, as the kernel log and `journalctl -o short-monotonic` print them.
    public var description: String {
        let fraction = String(nanoseconds % 1_000_000_000)
        return "\(nanoseconds / 1_000_000_000).\(String(repeating: "0", count: 9 - fraction.count))\(fraction)s"
    }
}
