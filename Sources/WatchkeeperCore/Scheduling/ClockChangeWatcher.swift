import CWatchkeeperSystem
import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Tells its owner when the system clock is set (settimeofday, `date -s`, an NTP step, a
/// suspend that skipped time): a timerfd on CLOCK_REALTIME armed far in the future with
/// TFD_TIMER_CANCEL_ON_SET, whose read fails with ECANCELED at every such change.
///
/// Cron tasks need it because their timers wait for a wall-clock instant: after the clock
/// is set back by two hours, a task due in a minute would otherwise wait two hours and a
/// minute. How far the clock moved is the change in wall time minus monotonic time.
final class ClockChangeWatcher {
    private let source: FileDescriptorReadSource
    private var offset: Int64
    private let stats: SourceStats

    /// Fails with the errno of timerfd_create or timerfd_settime when no timerfd can be
    /// made (an old kernel, or no descriptors left): the caller says so, and cron tasks then
    /// keep their timers across clock changes.
    init(queue: SubsystemQueue, sources: SourceRegistry, onChange: @escaping (_ movedBySeconds: Int64) -> Void) throws(Errno) {
        let descriptor = OwnedFileDescriptor(adopting: try systemCall { timerfd_create(CLOCK_REALTIME, Int32(TFD_NONBLOCK | TFD_CLOEXEC)) })
        let raw = descriptor.rawValue
        try Self.arm(raw).get()
        offset = Self.wallMinusMonotonic()
        stats = sources.register(.read, owner: "tasks", target: "system clock changes (timerfd)", on: queue)
        source = descriptor.makeReadSource(queue: queue.queue)
        source.source.setEventHandler { [unowned self] in
            var expirations: UInt64 = 0
            let outcome = withUnsafeMutableBytes(of: &expirations) { NonBlockingRead.read(raw, into: $0) }
            // ECANCELED: the clock was set. Either way the timer is armed again: after a
            // year of uptime it expires, and a timer that is not armed hears no change.
            let wasSet = outcome == .failed(.canceled)
            guard wasSet || outcome == .bytes(MemoryLayout<UInt64>.size) else { return }
            _ = Self.arm(raw)
            guard wasSet else { return }
            stats.fired()
            let now = Self.wallMinusMonotonic()
            let moved = (now - offset) / 1_000_000_000
            offset = now
            onChange(moved)
        }
        source.activate()
    }

    /// A year from now, absolute, cancelled on any set of the clock.
    private static func arm(_ descriptor: Int32) -> Result<Void, Errno> {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var spec = itimerspec(it_interval: timespec(), it_value: timespec(tv_sec: now.tv_sec + 366 * 86_400, tv_nsec: 0))
        return nothingOrErrno { timerfd_settime(descriptor, Int32(TFD_TIMER_ABSTIME) | Int32(WK_TFD_TIMER_CANCEL_ON_SET), &spec, nil) }
    }

    private static func wallMinusMonotonic() -> Int64 {
        var wall = timespec()
        var monotonic = timespec()
        clock_gettime(CLOCK_REALTIME, &wall)
        clock_gettime(CLOCK_MONOTONIC, &monotonic)
        return (Int64(wall.tv_sec) - Int64(monotonic.tv_sec)) * 1_000_000_000 + Int64(wall.tv_nsec) - Int64(monotonic.tv_nsec)
    }
}
