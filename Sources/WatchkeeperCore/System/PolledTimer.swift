import CWatchkeeperSystem
import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// What an owner needs of a one-shot timer on its queue: set it (again: the latest
/// setting wins) and clear it. A `RegisteredTimer` or a `PolledTimer`.
protocol QueueTimer: AnyObject {
    func schedule(after delay: Duration)
    func disarm()
}

/// A one-shot timer set and cleared by the thread that asks: a CLOCK_MONOTONIC timerfd in
/// its queue's `DescriptorPoller`, one timerfd_settime each time. A dispatch timer is set
/// by libdispatch's manager thread, and each setting writes that thread's eventfd and wakes
/// it; set once per job (the STATUS= summary), that wake came just after the job's exec
/// and could run on the job's CPU during its start-up (docs/measurements/latency-path.md,
/// "The summary timer after the exec").
///
/// Listed with the sources as a timer. Confined to the poller's queue, where it fires once
/// per setting; `cancel`, or its last reference going, closes the timerfd.
final class PolledTimer: QueueTimer {
    private let source: PolledDescriptor

    /// Fails with timerfd_create's errno (EMFILE: no descriptor left).
    init(poller: DescriptorPoller, sources: SourceRegistry, queue: SubsystemQueue, owner: String, target: String,
         handler: @escaping () -> Void) throws(Errno) {
        let descriptor = OwnedFileDescriptor(adopting: try systemCall { timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK | TFD_CLOEXEC)) })
        let raw = descriptor.rawValue
        let stats = sources.register(.timer, owner: owner, target: target, on: queue)
        source = poller.watch(descriptor, owner: owner, target: target, afterClose: { sources.unregister(stats) }) {
            // Level-triggered: the read clears it. Nothing to read (EAGAIN) means it was set
            // again after it expired, which clears the expiry: the new setting is the one.
            var expirations: UInt64 = 0
            guard withUnsafeMutableBytes(of: &expirations, { NonBlockingRead.read(raw, into: $0) }) == .bytes(MemoryLayout<UInt64>.size) else { return }
            stats.fired()
            handler()
        }
        source.activate()
    }

    deinit {
        source.cancel()
    }

    func schedule(after delay: Duration) {
        schedule(at: .now + delay)
    }

    /// At `deadline` on CLOCK_MONOTONIC; one already past fires at once.
    func schedule(at deadline: MonotonicInstant) {
        // 0 would clear the timer; an instant beyond Int64 is never.
        guard deadline.nanoseconds < UInt64(Int64.max) else { return disarm() }
        let nanoseconds = max(deadline.nanoseconds, 1)
        set(timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000)), absolute: true)
    }

    func disarm() {
        set(timespec(), absolute: false)
    }

    func cancel() {
        source.cancel()
    }

    private func set(_ value: timespec, absolute: Bool) {
        guard !source.isCancelled else { return }
        var spec = itimerspec(it_interval: timespec(), it_value: value)
        // Fails only for a bad descriptor or value (EBADF, EINVAL), which this cannot pass.
        _ = timerfd_settime(source.descriptor.rawValue, absolute ? Int32(TFD_TIMER_ABSTIME) : 0, &spec, nil)
    }
}

extension RegisteredTimer: QueueTimer {}
