import CWatchkeeperSystem
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The daemon's own log entries on their way out, written by a queue of their own: the
/// caller, on whatever owner's queue, hands its entry over and goes on. sd_journal_sendv
/// blocks while journald's queue is full (a journald stopped or behind a slow disk), and a
/// write to a stderr pipe nobody drains blocks for good; either used to hold the queue that
/// logged, so a stalled journal withheld the watchdog and stopped the jobs' timers.
///
/// Bounded: entries wait up to `maxBytes` in all (one larger entry, a big state dump, is
/// still taken when nothing else waits). Past that they are dropped and counted, and the
/// first entry written after says how many. The writer is not one of the watchdog's
/// queues: a journal that does not read is not cured by systemd restarting us.
final class LogOutbox: Sendable {
    enum Entry: Sendable {
        /// Native fields for sd_journal_sendv; `fallback` is what stderr shows if the
        /// journal is not there.
        case journal([(name: String, value: [UInt8])], fallback: @Sendable () -> String)
        case stderr([UInt8])
        /// The outbox's own report of entries it dropped, in the sink's form.
        case dropReport(String)
    }

    static let maxBytes = 8 << 20

    private struct State {
        var entries: [Entry] = []
        var bytes = 0
        /// The writer is on its way or writing: new entries need no wake-up.
        var writing = false
        /// Since when the writer has been in its current batch: its age is how long the sink
        /// has taken nothing.
        var batchStartedAt: MonotonicInstant?
        var droppedEntries: UInt64 = 0
        var droppedBytes: UInt64 = 0
        /// Dropped since the last report line.
        var unreported: (entries: UInt64, bytes: UInt64) = (0, 0)
        var written: UInt64 = 0
    }

    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "watchkeeper.log")
    private let write: @Sendable ([Entry]) -> Void
    /// A woken writer waits this long before taking what is queued: a burst's entries (a
    /// run record per job) then go out in a few writes instead of a wake-up and a write
    /// each, which cost the 20,000-file burst 15 % more daemon CPU than writing them on the
    /// jobs queue had. At 1 ms most records of a burst still woke the writer on their own
    /// (0.75 wake-ups, sleeps and writes per job); whoever waits for what is queued (a hook
    /// for its run's record, the stop, the ready line) ends the wait at once (`hurry`).
    static let gathering: Duration = .milliseconds(5)
    /// Written by `afterWritten` and `flush`: the gathering ends now. An eventfd, so that the
    /// wait is poll(2)'s relative timeout on the monotonic clock: a semaphore's timed wait
    /// is an absolute CLOCK_REALTIME deadline, which a clock set back would stretch. -1 when
    /// none could be made: the writer then sleeps the gathering out.
    private let hurryDescriptor: Int32

    private let gatheringFor: Duration

    /// `write`: the blocking write of entries in order, run only on the outbox's queue.
    /// `gathering`: a test's longer wait.
    init(gathering: Duration = LogOutbox.gathering, write: @escaping @Sendable ([Entry]) -> Void) {
        self.gatheringFor = gathering
        self.write = write
        hurryDescriptor = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
    }

    deinit {
        if hurryDescriptor >= 0 { close(hurryDescriptor) }
    }

    private func hurry() {
        guard hurryDescriptor >= 0 else { return }
        var one: UInt64 = 1
        _ = Glibc.write(hurryDescriptor, &one, MemoryLayout<UInt64>.size)
    }

    /// Up to `gatheringFor`, or until `hurry`. A hurry from while nothing gathered only
    /// cuts the next gathering short.
    private func gather() {
        let milliseconds = Int32(clamping: gatheringFor.nanosecondsClamped / 1_000_000)
        guard hurryDescriptor >= 0 else {
            usleep(useconds_t(milliseconds) * 1_000)
            return
        }
        var entry = pollfd(fd: hurryDescriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&entry, 1, milliseconds) > 0 else { return }
        var value: UInt64 = 0
        _ = read(hurryDescriptor, &value, MemoryLayout<UInt64>.size)
    }

    /// Queues `entry` (`size` bytes) and returns at once, or drops it when `maxBytes`
    /// already wait.
    func submit(_ entry: Entry, size: Int) {
        let wake = state.withLock { state -> Bool in
            if state.bytes + size > Self.maxBytes && !state.entries.isEmpty {
                state.droppedEntries += 1
                state.droppedBytes += UInt64(size)
                state.unreported.entries += 1
                state.unreported.bytes += UInt64(size)
                return false
            }
            state.entries.append(entry)
            state.bytes += size
            guard !state.writing else { return false }
            state.writing = true
            return true
        }
        if wake { queue.async { self.writeAll() } }
    }

    private func writeAll() {
        gather()
        while true {
            let taken = state.withLock { state -> (entries: [Entry], bytes: Int, dropped: (entries: UInt64, bytes: UInt64))? in
                guard !state.entries.isEmpty else {
                    state.writing = false
                    state.batchStartedAt = nil
                    return nil
                }
                let batch = (state.entries, state.bytes, state.unreported)
                state.entries = []
                state.unreported = (0, 0)
                state.batchStartedAt = .now
                return batch
            }
            guard let taken else { return }
            if taken.dropped.entries > 0 {
                write([.dropReport("dropped \(taken.dropped.entries) log entries (\(taken.dropped.bytes) bytes): the log sink took nothing while \(Self.maxBytes >> 20) MiB waited")])
            }
            write(taken.entries)
            state.withLock { state in
                state.bytes -= taken.bytes
                state.written += UInt64(taken.entries.count)
            }
        }
    }

    /// Runs `body` on the writer's queue once everything submitted before the call is
    /// written (the writer drains all that is queued before it returns): a hook starts only
    /// after its run's record is out.
    func afterWritten(_ body: @escaping @Sendable () -> Void) {
        queue.async(execute: body)
        hurry()
    }

    /// Waits up to `timeout` for what is queued to be written: before the process exits,
    /// and in tests. False when entries still wait (the sink is stuck).
    @discardableResult
    func flush(within timeout: Duration) -> Bool {
        if state.withLock({ !$0.writing && $0.entries.isEmpty }) { return true }
        // Behind whatever the queue is writing: the writer drains everything queued before
        // it returns, so this runs once all that was submitted before the call is out.
        let written = DispatchSemaphore(value: 0)
        queue.async { written.signal() }
        hurry()
        return written.wait(timeout: (MonotonicInstant.now + timeout).dispatchTime) == .success
    }

    /// For the dump: what waits, what was lost, and how long the sink has been blocking.
    func describe(now: MonotonicInstant = .now) -> DumpValue {
        state.withLock { state in
            .object([
                .init("waiting_entries", .int(Int64(state.entries.count))),
                .init("waiting_bytes", .int(Int64(state.bytes))),
                .init("written_entries", .int(Int64(state.written))),
                .init("dropped_entries", .int(Int64(state.droppedEntries))),
                .init("dropped_bytes", .int(Int64(state.droppedBytes))),
                .init("writing_for_s", state.batchStartedAt.map { .double((now - $0).secondsDouble) } ?? .null),
            ])
        }
    }
}
