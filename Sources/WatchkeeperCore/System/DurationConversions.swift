import Dispatch

// Every conversion between Swift's `Duration` and the integer nanoseconds and
// `DispatchTimeInterval`s that Dispatch and the kernel take, in one place: each used to be
// written inline (`.nanoseconds(Int(d.nanosecondsClamped))`) at every timer.

extension Duration {
    /// Whole nanoseconds, saturating at Int64's range (about ±292 years) instead of
    /// trapping: a configured "1000000d" means "practically never", not a crash.
    public var nanosecondsClamped: Int64 {
        let (seconds, attoseconds) = components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, sumOverflow) = product.addingReportingOverflow(attoseconds / 1_000_000_000)
        if sumOverflow { return seconds < 0 ? .min : .max }
        return sum
    }

    public var microseconds: Int64 { nanosecondsClamped / 1_000 }

    public var secondsDouble: Double { Double(nanosecondsClamped) / 1e9 }

    /// For `DispatchSourceTimer.schedule(deadline:repeating:)` and `DispatchTime + _`.
    /// A negative duration becomes zero: Dispatch has no use for a negative interval, and
    /// a deadline in the past already means "now".
    public var dispatchInterval: DispatchTimeInterval {
        .nanoseconds(Int(clamping: max(0, nanosecondsClamped)))
    }

    /// The duration a `DispatchTimeInterval` stands for; nil for `.never`, which is no
    /// length of time.
    public init?(_ interval: DispatchTimeInterval) {
        switch interval {
        case .seconds(let value): self = .seconds(value)
        case .milliseconds(let value): self = .milliseconds(value)
        case .microseconds(let value): self = .microseconds(value)
        case .nanoseconds(let value): self = .nanoseconds(value)
        case .never: return nil
        @unknown default: return nil
        }
    }

    /// The span between two CLOCK_MONOTONIC readings in nanoseconds (such as
    /// `DispatchTime.uptimeNanoseconds`), negative when `end` is before `start`.
    public static func between(nanoseconds start: UInt64, and end: UInt64) -> Duration {
        .nanoseconds(Int64(bitPattern: end &- start))
    }
}

extension Duration {
    /// Seconds as a decimal without losing the fraction: "0.5", "3600", "1.25"
    /// (WATCHKEEPER_BUDGET_SECONDS; a 500 ms budget is not 0).
    public var secondsText: String {
        let nanoseconds = max(0, nanosecondsClamped)
        let whole = nanoseconds / 1_000_000_000
        let fraction = nanoseconds % 1_000_000_000
        guard fraction > 0 else { return String(whole) }
        var digits = String(fraction)
        digits = String(repeating: "0", count: 9 - digits.count) + digits
        while digits.hasSuffix("0") { digits.removeLast() }
        return "\(whole).\(digits)"
    }
}
