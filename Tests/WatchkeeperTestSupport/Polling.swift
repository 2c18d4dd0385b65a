#if canImport(XCTest)
import Foundation
import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

// For what gives no event to wait on: a file another process writes, a daemon's stderr, a
// dump taken on another queue. The deadline is on the monotonic clock, so a wall clock
// stepped during a test neither cuts a wait short nor stretches it.

/// How much longer every deadline here is: a sanitizer build runs several times slower, and
/// `make sanitize` sets WATCHKEEPER_TEST_DEADLINE_SCALE (a deadline is a bound on a wait,
/// never a measurement, so stretching it changes no verdict but a slow one).
public let testDeadlineScale: Double = ProcessInfo.processInfo.environment["WATCHKEEPER_TEST_DEADLINE_SCALE"]
    .flatMap(Double.init).map { max(1, $0) } ?? 1

/// What a memory bound in a test allows on top, in bytes: under AddressSanitizer freed memory
/// waits in a quarantine (to catch a use after free) and stays resident, so a daemon that
/// streams 30 MB through small buffers peaks at its bound plus the quarantine. `make
/// sanitize` caps the quarantine (ASAN_OPTIONS quarantine_size_mb) and sets
/// WATCHKEEPER_TEST_MEMORY_ALLOWANCE_MB to the same size; elsewhere it is 0.
public let testMemoryAllowanceBytes: Int = ProcessInfo.processInfo.environment["WATCHKEEPER_TEST_MEMORY_ALLOWANCE_MB"]
    .flatMap(Int.init).map { max(0, $0) * 1_048_576 } ?? 0

/// The first value `probe` gives that is not nil, asked at once and then every `interval`,
/// or nil once `timeout` seconds (times `testDeadlineScale`) have passed without one.
public func waitForValue<Value>(
    _ timeout: TimeInterval, every interval: Duration = .milliseconds(20), _ probe: () throws -> Value?
) rethrows -> Value? {
    let deadline = MonotonicInstant.now + .seconds(timeout * testDeadlineScale)
    let (seconds, attoseconds) = interval.components
    let pause = useconds_t(seconds * 1_000_000 + attoseconds / 1_000_000_000_000)
    while true {
        if let value = try probe() { return value }
        if MonotonicInstant.now >= deadline { return nil }
        usleep(pause)
    }
}

/// Lets `seconds` (times `testDeadlineScale`) pass: the window in which a test shows that
/// something does NOT happen (a second job for one file, a run of an excluded file). What
/// a test expects to happen is waited for with `waitFor` instead; a pause is no way to
/// wait for an event. Scaled like every deadline, so that under a sanitizer, where the
/// daemon is several times slower, the window is as long in the daemon's terms.
public func letTimePass(_ seconds: TimeInterval) {
    let deadline = MonotonicInstant.now + .seconds(seconds * testDeadlineScale)
    // In steps, so that a signal cutting one short (EINTR) does not cut the window.
    while case let now = MonotonicInstant.now, now < deadline {
        usleep(useconds_t(min(100_000, (deadline.nanoseconds - now.nanoseconds) / 1_000 + 1)))
    }
}

/// Whether `condition` came to hold within `timeout` seconds, asked at once and then every
/// `interval`.
public func waitFor(
    _ timeout: TimeInterval, every interval: Duration = .milliseconds(20), _ condition: () throws -> Bool
) rethrows -> Bool {
    try waitForValue(timeout, every: interval) { try condition() ? true : nil } ?? false
}
#endif
