import CWatchkeeperSystem
import Dispatch
import Logging
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Every job's descriptors (its pidfd, its stdout and stderr pipes, its progress pipe) in
/// one epoll instance of the jobs queue, read by the one dispatch source that owns it.
///
/// Why not a dispatch read source each: libdispatch on Linux installs and removes every
/// source on its manager thread, so a job's four descriptors cost eight round trips between
/// the jobs queue's thread and that thread. `watchkeeper-bench sources` measured 80-83 µs of
/// CPU and 1.5 context switches per job that way, against 51-54 µs and 0.01 with epoll_ctl
/// from the jobs queue (docs/measurements/performance.md). It also takes the daemon out of
/// libdispatch #949 (a hang-up seen on the manager thread while the queue cancels): here the
/// queue that handles an event is the only one that ever touches the set.
///
/// Confined to the jobs queue. Level-triggered: a descriptor left readable fires again on
/// the next pass, so a handler may stop early (yield the queue) and lose nothing.
final class JobDescriptorPoller: @unchecked Sendable {
    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    private let logger: Logger
    /// The epoll instance's source, or nil when epoll_create1 failed: then every
    /// descriptor is polled by a timer (see `PolledDescriptor`).
    private var epoll: FileDescriptorReadSource?
    /// By token, never by fd: a handler may close a descriptor and open another with the
    /// same number while later events of the same epoll_wait are still to be delivered.
    private var watched: [UInt64: PolledDescriptor] = [:]
    private var lastToken: UInt64 = 0
    private let events = UnsafeMutableBufferPointer<epoll_event>.allocate(capacity: 64)
    private let stats: SourceStats
    /// Descriptors epoll refuses: one warning per cause a minute, with a count.
    private let refusals: ProblemAggregator
    /// One read buffer for every job's pipes: a 64 KiB allocation per read (two or three
    /// per job at its end alone) sent glibc into malloc_consolidate, ~1.5 % of the daemon's
    /// CPU in a burst. A read nested in another's (never seen) gets a buffer of its own.
    private let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: JobDescriptorPoller.readSize, alignment: 16)
    private var readBufferInUse = false
    static let readSize = 65_536

    init(queue: SubsystemQueue, sources: SourceRegistry, logger: Logger) {
        self.queue = queue
        self.sources = sources
        self.logger = logger
        refusals = ProblemAggregator(owner: "jobs", queue: queue, sources: sources, logger: logger)
        stats = sources.register(.read, owner: "jobs", target: "epoll of every job's pidfd, output and progress pipes", on: queue)
        let fd: Int32
        switch valueOrErrno({ epoll_create1(Int32(EPOLL_CLOEXEC)) }) {
        case .success(let created): fd = created
        case .failure(let error):
            logger.warning("unable to create the epoll instance for job descriptors: \(errorText(error.rawValue)); each job's descriptors will be polled every \(PolledDescriptor.fallbackInterval.compactDescription) instead")
            return
        }
        let source = OwnedFileDescriptor(adopting: fd).makeReadSource(queue: queue.queue, afterClose: { [sources, stats] in
            sources.unregister(stats)
        })
        source.source.setEventHandler { [weak self] in self?.deliverReadyEvents(epoll: fd) }
        epoll = source
        source.activate()
    }

    deinit {
        // Only a test's context goes away; the daemon's lives as long as the process.
        epoll?.cancel()
        events.deallocate()
        readBuffer.deallocate()
    }

    /// `body` with a buffer of `readSize` bytes, valid only during the call.
    func withReadBuffer<Result>(_ body: (UnsafeMutableRawBufferPointer) -> Result) -> Result {
        guard !readBufferInUse else {
            let own = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.readSize, alignment: 16)
            defer { own.deallocate() }
            return body(own)
        }
        readBufferInUse = true
        defer { readBufferInUse = false }
        return body(readBuffer)
    }

    /// Number of descriptors in epoll now.
    var count: Int { watched.count }

    /// Takes `descriptor` into the set, inactive: `activate` starts delivery of `handler`,
    /// `cancel` takes it out and closes it (after `beforeClose`, then `afterClose`).
    func watch(_ descriptor: consuming OwnedFileDescriptor, owner: String, target: String,
               beforeClose: ((FileDescriptor) -> Void)? = nil, afterClose: (() -> Void)? = nil,
               handler: @escaping () -> Void) -> PolledDescriptor {
        lastToken &+= 1
        return PolledDescriptor(poller: self, token: lastToken, descriptor: descriptor.release(), owner: owner, target: target,
                                beforeClose: beforeClose, afterClose: afterClose, handler: handler)
    }

    /// EPOLL_CTL_ADD; the errno if epoll refuses the descriptor.
    fileprivate func add(_ entry: PolledDescriptor) -> Errno? {
        guard let epoll else { return .noFunction }
        var event = epoll_event()
        event.events = UInt32(EPOLLIN.rawValue)
        event.data.u64 = entry.token
        if case .failure(let error) = nothingOrErrno({ epoll_ctl(epoll.descriptor.rawValue, Int32(EPOLL_CTL_ADD), entry.descriptor.rawValue, &event) }) {
            return error
        }
        watched[entry.token] = entry
        return nil
    }

    /// EPOLL_CTL_DEL. Only EBADF or ENOENT could make it fail, and neither can happen to a
    /// descriptor we own and added; its close would take it out of the set regardless.
    fileprivate func remove(_ entry: PolledDescriptor) {
        if let epoll { _ = epoll_ctl(epoll.descriptor.rawValue, Int32(EPOLL_CTL_DEL), entry.descriptor.rawValue, nil) }
        watched[entry.token] = nil
    }

    /// A pipe's read end, its write end kept open until `cancel` closes both, so the read
    /// end never reports a hang-up while watched (the job holds its own copy of the write end).
    func watch(_ pipe: consuming OwnedPipe, owner: String, target: String, afterClose: @escaping () -> Void,
               handler: @escaping () -> Void) -> PolledDescriptor {
        let writer = pipe.writeEnd.release()
        return watch(pipe.readEnd, owner: owner, target: target, afterClose: {
            OwnedFileDescriptor.closeLastReference(writer)
            afterClose()
        }, handler: handler)
    }

    fileprivate func fallingBack(_ entry: PolledDescriptor, error: Errno) {
        let limit = (try? readSmallFile("/proc/sys/fs/epoll/max_user_watches"))?.split(whereSeparator: \.isWhitespace).first.map(String.init) ?? "unknown"
        refusals.report("unable to add job descriptors to the jobs' epoll: \(errorText(error.rawValue)) (fs.epoll.max_user_watches=\(limit)); polling them every \(PolledDescriptor.fallbackInterval.compactDescription) instead",
                        example: "the \(entry.target) of \(entry.owner)")
    }

    fileprivate func makeFallbackTimer(for entry: PolledDescriptor) -> RegisteredTimer {
        sources.makeTimer(owner: entry.owner, target: "\(entry.target): poll every \(PolledDescriptor.fallbackInterval.compactDescription) (epoll refused it)", on: queue) { [weak entry] in
            entry?.pollFallback()
        }
    }

    private func deliverReadyEvents(epoll: Int32) {
        stats.fired()
        let count: Int32
        switch valueOrErrno({ epoll_wait(epoll, events.baseAddress, Int32(events.count), 0) }) {
        case .success(let ready) where ready > 0: count = ready
        case .success: return
        case .failure(let error):
            logger.error("unable to read the jobs' epoll: \(errorText(error.rawValue))")
            return
        }
        for index in 0..<Int(count) {
            let event = events[index]
            // Gone: cancelled by an earlier handler of this same pass.
            guard let entry = watched[event.data.u64] else { continue }
            entry.deliver(events: event.events)
        }
    }
}

/// One descriptor in the jobs' epoll: the counterpart of a dispatch read source whose
/// cancel closes the fd, except that cancel acts at once (same queue, no manager thread).
final class PolledDescriptor: @unchecked Sendable {
    /// How often a descriptor epoll refused (ENOMEM, fs.epoll.max_user_watches) is polled.
    static let fallbackInterval: Duration = .milliseconds(20)

    fileprivate let token: UInt64
    /// Valid for syscalls until `cancel`; only `cancel` closes it.
    let descriptor: FileDescriptor
    fileprivate let owner: String
    fileprivate let target: String
    private weak var poller: JobDescriptorPoller?
    private var handler: (() -> Void)?
    private var beforeClose: ((FileDescriptor) -> Void)?
    private var afterClose: (() -> Void)?
    /// `paused`: out of the set, by the owner's suspend or before activation's ADD.
    private enum State { case inactive, polled, paused, timerPolled(RegisteredTimer), cancelled }
    private var state = State.inactive
    private var pausedByOwner = false

    fileprivate init(poller: JobDescriptorPoller, token: UInt64, descriptor: FileDescriptor, owner: String, target: String,
                     beforeClose: ((FileDescriptor) -> Void)?, afterClose: (() -> Void)?, handler: @escaping () -> Void) {
        self.poller = poller
        self.token = token
        self.descriptor = descriptor
        self.owner = owner
        self.target = target
        self.beforeClose = beforeClose
        self.afterClose = afterClose
        self.handler = handler
    }

    deinit {
        // Polled descriptors are kept alive by the poller until cancelled, so only one
        // never activated, or one whose poller (a test's) went first, gets here open.
        switch state {
        case .cancelled: return
        case .timerPolled(let timer): timer.cancel()
        default: break
        }
        OwnedFileDescriptor.closeLastReference(descriptor)
    }

    var isCancelled: Bool {
        if case .cancelled = state { return true }
        return false
    }

    func activate() {
        guard case .inactive = state else { return }
        state = .paused
        if !pausedByOwner { enterEpoll() }
    }

    /// No events until `resume`, whatever the descriptor holds. Out of the set rather than
    /// masked: epoll reports a hang-up or an error whatever the mask says. Not counted: one
    /// resume undoes any number of suspends.
    func suspend() {
        pausedByOwner = true
        switch state {
        case .polled: poller?.remove(self)
        case .timerPolled(let timer): timer.cancel()
        default: return
        }
        state = .paused
    }

    /// Tries epoll again, also for a descriptor it refused before.
    func resume() {
        pausedByOwner = false
        guard case .paused = state else { return }
        enterEpoll()
    }

    private func enterEpoll() {
        guard let poller else { return }
        if let failure = poller.add(self) {
            poller.fallingBack(self, error: failure)
            let timer = poller.makeFallbackTimer(for: self)
            timer.schedule(at: .now(), repeating: Self.fallbackInterval)
            state = .timerPolled(timer)
            return
        }
        state = .polled
    }

    /// Out of the set, then `beforeClose`, close, `afterClose`, all before this returns.
    /// Twice is harmless.
    func cancel() {
        let previous = state
        state = .cancelled
        switch previous {
        case .cancelled:
            return
        case .polled:
            poller?.remove(self)
        case .timerPolled(let timer):
            timer.cancel()
        case .paused, .inactive:
            break
        }
        handler = nil
        let beforeClose = self.beforeClose, afterClose = self.afterClose
        self.beforeClose = nil
        self.afterClose = nil
        beforeClose?(descriptor)
        OwnedFileDescriptor.closeLastReference(descriptor)
        afterClose?()
    }

    fileprivate func deliver(events: UInt32) {
        handler?()
        // A hang-up or error stays reported while it lasts: an owner that did not take
        // the descriptor out would be called in a loop. Out of the set instead, until it resumes.
        if events & (UInt32(EPOLLHUP.rawValue) | UInt32(EPOLLERR.rawValue)) != 0, case .polled = state {
            suspend()
        }
    }

    fileprivate func pollFallback() {
        guard case .timerPolled = state else { return }
        var entry = pollfd(fd: descriptor.rawValue, events: Int16(POLLIN), revents: 0)
        guard poll(&entry, 1, 0) > 0, entry.revents != 0 else { return }
        handler?()
    }
}
