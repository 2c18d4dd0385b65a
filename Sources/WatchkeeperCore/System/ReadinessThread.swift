import CWatchkeeperSystem
import Synchronization
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// A thread of its own, blocked in poll(2) on one descriptor and on an eventfd that stops
/// it, that calls `onReady` in itself each time the descriptor is ready.
///
/// What it is for: a kernel event fd's wake-up without libdispatch's hop. A read source's
/// readiness comes out of epoll on libdispatch's manager thread, which then wakes a worker
/// for the source's queue (a futex wake and a context switch per wake-up, a clone and a
/// fresh stack when idle workers have exited after 5 s) before the handler can read. Here
/// the thread that polled runs the handler: its owner calls `queue.sync` from `onReady`, and
/// libdispatch runs a sync block on a serial queue in the calling thread (it takes the
/// queue's lock with this thread's id when the queue is idle, `_dispatch_barrier_sync_f_inline`;
/// when it is busy this thread waits for it and then runs the block itself,
/// `_dispatch_sync_f_slow`). So the handler runs on the owner's queue, as a source's would.
///
/// The thread owns the descriptor and the eventfd once started and closes both when it
/// ends: only it knows when it no longer polls them. `stop()` signals and returns; it never
/// waits for the thread, which may itself be waiting for the queue `stop()` is called on.
/// Every signal is blocked in the thread from its first instruction
/// (pthread_attr_setsigmask_np): the daemon's handled signals must stay blocked in every
/// thread for their signalfd, and whatever thread starts this one (main, a dispatch worker),
/// its mask is not inherited by accident.
///
/// Driven by one owner: `start` and `stop` are called serially (on the owner's queue).
// @unchecked Sendable: `start` and `stop` are serial (one owner); the thread touches only its Runner.
public final class ReadinessThread: @unchecked Sendable {
    /// The polled descriptor and the stop eventfd: whoever drops the last reference closes both.
    private final class Descriptors: Sendable {
        let polled: OwnedFileDescriptor
        let stop: OwnedFileDescriptor

        init(polled: consuming OwnedFileDescriptor, stop: consuming OwnedFileDescriptor) {
            self.polled = polled
            self.stop = stop
        }
    }

    /// For the owner's system calls (watches, marks) until `stop()`; the thread closes it after.
    public let descriptor: FileDescriptor
    private let stopEvent: FileDescriptor
    private let events: Int16
    /// Until `start()` hands them to the thread; closed by `stop()` when it never did.
    private var descriptors: Descriptors?
    private var runner: Runner?
    private var stopped = false

    /// Takes `descriptor` and makes the stop eventfd; no thread until `start`. `events` is
    /// poll(2)'s: POLLIN for a kernel event fd.
    public init(polling descriptor: consuming OwnedFileDescriptor, for events: Int16) throws(Errno) {
        let stop = OwnedFileDescriptor(adopting: try systemCall { eventfd(0, Int32(EFD_CLOEXEC)) })
        self.descriptor = descriptor.descriptor
        self.stopEvent = stop.descriptor
        self.events = events
        self.descriptors = Descriptors(polled: descriptor, stop: stop)
    }

    deinit {
        stop()
    }

    /// The kernel's id of the thread while it runs, 0 before it runs and once it has closed
    /// the descriptors: for the tests (which thread ran a handler, when it ended) and perf.
    public var threadID: Int32 { runner?.threadID.load(ordering: .acquiring) ?? 0 }

    /// Creates the thread, named `name` (15 bytes at most show), which calls `onReady` with
    /// the descriptor's revents at each readiness, and `onPollFailure` if poll(2) itself fails
    /// (EINVAL, ENOMEM; then it waits for `stop()`, polling nothing). Once; later calls and
    /// calls after `stop` do nothing. Fails with pthread_create's errno (EAGAIN: out of threads).
    public func start(name: String, onReady: @escaping @Sendable (Int16) -> Void,
                      onPollFailure: @escaping @Sendable (Errno) -> Void) throws(Errno) {
        guard !stopped, let descriptors else { return }
        let runner = Runner(descriptors: descriptors, events: events, name: name, onReady: onReady, onPollFailure: onPollFailure)
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        let masked = wk_pthread_attr_block_every_signal(&attributes)
        guard masked == 0 else { throw Errno(rawValue: masked) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let context = Unmanaged.passRetained(runner).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, &attributes, { context in
            Unmanaged<Runner>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, context)
        guard created == 0 else {
            Unmanaged<Runner>.fromOpaque(context).release()
            throw Errno(rawValue: created)
        }
        self.descriptors = nil
        self.runner = runner
    }

    /// Stops for good, without waiting: the thread ends at its next poll (after the
    /// `onReady` it may be in) and closes the descriptor; never started, it is closed here.
    public func stop() {
        guard !stopped else { return }
        stopped = true
        guard descriptors == nil else {
            descriptors = nil
            return
        }
        var one: UInt64 = 1
        let stop = stopEvent.rawValue
        // Only this writes to the eventfd, once, so its counter cannot overflow and the write
        // cannot block; EBADF is excluded by the one-owner rule (the thread closes it only
        // after this write).
        if case .failure(let failure) = valueOrErrno({ write(stop, &one, MemoryLayout<UInt64>.size) }) {
            preconditionFailure(failure.unable("stop the reader thread of fd \(descriptor.rawValue)"))
        }
    }

    /// What the thread holds; touched only by the thread once it runs (`threadID` is atomic).
    // @unchecked Sendable: handed to the new thread, which alone touches `descriptors` from then on.
    private final class Runner: @unchecked Sendable {
        let threadID = Atomic<Int32>(0)
        private var descriptors: Descriptors?
        private let events: Int16
        private let name: String
        private let onReady: @Sendable (Int16) -> Void
        private let onPollFailure: @Sendable (Errno) -> Void

        init(descriptors: Descriptors, events: Int16, name: String, onReady: @escaping @Sendable (Int16) -> Void,
             onPollFailure: @escaping @Sendable (Errno) -> Void) {
            self.descriptors = descriptors
            self.events = events
            self.name = name
            self.onReady = onReady
            self.onPollFailure = onPollFailure
        }

        func run() {
            _ = wk_pthread_set_name(String(name.utf8.prefix(15)) ?? "")
            threadID.store(wk_gettid(), ordering: .releasing)
            defer {
                descriptors = nil
                threadID.store(0, ordering: .releasing)
            }
            guard let descriptors else { return }
            let stop = descriptors.stop.rawValue
            var fds = [pollfd(fd: descriptors.polled.rawValue, events: events, revents: 0),
                       pollfd(fd: stop, events: Int16(POLLIN), revents: 0)]
            while true {
                switch valueOrErrno({ poll(&fds, nfds_t(fds.count), -1) }) {
                case .success:
                    // Stop first: what is still queued at a stop is dropped, as a cancelled
                    // source's would be.
                    if fds[1].revents != 0 { return }
                    if fds[0].revents != 0 { onReady(fds[0].revents) }
                case .failure(let failure):
                    onPollFailure(failure)
                    // Keep both fds until the stop (a blocking read of the eventfd), so
                    // that `stop()` never writes to a closed one.
                    var count: UInt64 = 0
                    _ = valueOrErrno { read(stop, &count, MemoryLayout<UInt64>.size) }
                    return
                }
            }
        }
    }
}
