import CWatchkeeperSystem
import Dispatch
import Logging
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// The descriptors of one owner's queue in one epoll instance of that queue, read by the one
/// dispatch source that owns it: the jobs' pidfds and pipes, the control socket's clients,
/// the etcd client's connections.
///
/// Why not a dispatch source each:
/// - A descriptor that reports EPOLLHUP crashes libdispatch's epoll backend. Its manager
///   thread turns the hang-up into a deletion that the source's own queue carries out while
///   the manager thread is still delivering the same event: the queue's thread unregisters
///   the source (and frees its muxnote), then the manager thread finds it unregistered and
///   finalizes it a second time, "Source finalized twice", a SIGILL in
///   `_dispatch_source_refs_finalize_unregistration` ← `_dispatch_source_merge_evt` ←
///   `_dispatch_event_loop_drain` (swift-corelibs-libdispatch's event_epoll.c,
///   `_dispatch_event_merge_hangup`; #949 is the same race). Every socket whose peer goes
///   away hangs up: a control client that closes (2 SIGILLs in 13 connect/close floods,
///   issue 36), a refused or reset etcd connection. Here the queue that handles an event is
///   the only one that ever touches the set, and a hang-up is an event like another.
/// - libdispatch installs and removes every source on its manager thread, so a job's four
///   descriptors cost eight round trips between the jobs queue's thread and that thread.
///   `watchkeeper-bench sources` measured 80-83 µs of CPU and 1.5 context switches per job
///   that way, against 51-54 µs and 0.01 with epoll_ctl from the jobs queue
///   (docs/measurements/performance.md).
///
/// Confined to its queue. Level-triggered: a descriptor left readable fires again on the
/// next pass, so a handler may stop early (yield the queue) and lose nothing.
// @unchecked Sendable: confined to its owner's queue (`queue`), where its read source fires.
final class DescriptorPoller: @unchecked Sendable {
    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    private let logger: Logger
    /// What the descriptors are, for the journal: "job descriptors", "control connections".
    let purpose: String
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
    /// One read buffer for every descriptor of the queue: a 64 KiB allocation per read (two
    /// or three per job at its end alone) sent glibc into malloc_consolidate, ~1.5 % of the
    /// daemon's CPU in a burst. A read nested in another's (never seen) gets a buffer of its own.
    private let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: DescriptorPoller.readSize, alignment: 16)
    private var readBufferInUse = false
    static let readSize = 65_536
    /// `owner` and `purpose` name the epoll instance in the dump's sources and the journal.
    init(queue: SubsystemQueue, sources: SourceRegistry, logger: Logger, owner: String, purpose: String) {
        self.queue = queue
        self.sources = sources
        self.logger = logger
        self.purpose = purpose
        refusals = ProblemAggregator(owner: owner, queue: queue, sources: sources, logger: logger)
        stats = sources.register(.read, owner: owner, target: "epoll of \(purpose)", on: queue)
        let fd: Int32
        switch valueOrErrno({ epoll_create1(Int32(EPOLL_CLOEXEC)) }) {
        case .success(let created): fd = created
        case .failure(let error):
            logger.warning("unable to create the epoll instance for \(purpose): \(errorText(error.rawValue)); each is polled every \(PolledDescriptor.fallbackInterval.compactDescription) instead")
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
        // Only a test's, or a closed etcd client's, goes away; the daemon's others live as
        // long as the process.
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
    /// EPOLL_CTL_DELs made since the start: a test's count of what a job's end asks of the kernel.
    private(set) var deletions: UInt64 = 0

    /// The epoll instance's descriptor (nil: each is polled by a timer), for a test to read
    /// the kernel's own list of what is in the set (/proc/self/fdinfo).
    var epollDescriptor: Int32? { epoll?.descriptor.rawValue }

    /// Takes `descriptor` into the set, inactive: `activate` starts delivery of `handler`
    /// (readable, or a hang-up or error), `cancel` takes it out and closes it (after
    /// `beforeClose`, then `afterClose`).
    func watch(_ descriptor: consuming OwnedFileDescriptor, owner: String, target: String,
               beforeClose: ((FileDescriptor) -> Void)? = nil, afterClose: (() -> Void)? = nil,
               handler: @escaping () -> Void) -> PolledDescriptor {
        watch(descriptor, owner: owner, target: target, interest: .readable, beforeClose: beforeClose, afterClose: afterClose) { _ in handler() }
    }

    /// The same for a descriptor whose owner also waits to write (a socket): `handler` is
    /// told what is ready; `interest` says what it waits for until `setInterest` changes it.
    func watch(_ descriptor: consuming OwnedFileDescriptor, owner: String, target: String, interest: PolledDescriptor.Interest,
               beforeClose: ((FileDescriptor) -> Void)? = nil, afterClose: (() -> Void)? = nil,
               handler: @escaping (PolledDescriptor.Readiness) -> Void) -> PolledDescriptor {
        lastToken &+= 1
        return PolledDescriptor(poller: self, token: lastToken, descriptor: descriptor.release(), owner: owner, target: target,
                                interest: interest, beforeClose: beforeClose, afterClose: afterClose, handler: handler)
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

    /// EPOLL_CTL_ADD, or EPOLL_CTL_MOD for one already in the set; the errno if epoll
    /// refuses the descriptor.
    fileprivate func set(_ entry: PolledDescriptor, events mask: UInt32, adding: Bool) -> Errno? {
        guard let epoll else { return .noFunction }
        var event = epoll_event()
        event.events = mask
        event.data.u64 = entry.token
        let operation = adding ? EPOLL_CTL_ADD : EPOLL_CTL_MOD
        if case .failure(let error) = nothingOrErrno({ epoll_ctl(epoll.descriptor.rawValue, Int32(operation), entry.descriptor.rawValue, &event) }) {
            return error
        }
        watched[entry.token] = entry
        return nil
    }

    /// EPOLL_CTL_DEL, also right before the descriptor's close: epoll drops a registration
    /// only when the last reference to the open file goes, and a spawned child holds a copy
    /// of the whole table until it reaches close_range, after the spawn has returned
    /// (Sources/CWatchkeeperSpawn/nowait.c). A registration left behind kept reporting
    /// EPOLLIN|EPOLLHUP for a number no longer watched, and the poller spun on it. Only
    /// EBADF or ENOENT could make it fail, and neither can happen to a descriptor we own
    /// and added.
    fileprivate func remove(_ entry: PolledDescriptor) {
        if let epoll {
            _ = epoll_ctl(epoll.descriptor.rawValue, Int32(EPOLL_CTL_DEL), entry.descriptor.rawValue, nil)
            deletions += 1
        }
        watched[entry.token] = nil
    }

    fileprivate func fallingBack(_ entry: PolledDescriptor, error: Errno) {
        let limit = (try? readSmallFile("/proc/sys/fs/epoll/max_user_watches"))?.split(whereSeparator: \.isWhitespace).first.map(String.init) ?? "unknown"
        refusals.report("unable to add \(purpose) to their epoll: \(errorText(error.rawValue)) (fs.epoll.max_user_watches=\(limit)); polling them every \(PolledDescriptor.fallbackInterval.compactDescription) instead",
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
            logger.error("unable to read the epoll of \(purpose): \(errorText(error.rawValue))")
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

/// One descriptor in a queue's epoll: the counterpart of a dispatch read (and write) source
/// whose cancel closes the fd, except that cancel acts at once (same queue, no manager thread).
// @unchecked Sendable: confined to its poller's queue, like the poller.
final class PolledDescriptor: @unchecked Sendable {
    /// How often a descriptor epoll refused (ENOMEM, fs.epoll.max_user_watches) is polled.
    static let fallbackInterval: Duration = .milliseconds(20)

    /// What the owner waits for.
    struct Interest: OptionSet, Sendable {
        let rawValue: UInt8
        static let readable = Interest(rawValue: 1)
        static let writable = Interest(rawValue: 2)

        var epollEvents: UInt32 {
            (contains(.readable) ? UInt32(EPOLLIN.rawValue) : 0) | (contains(.writable) ? UInt32(EPOLLOUT.rawValue) : 0)
        }
    }

    /// What an event says is ready. A hang-up or an error comes whatever the interest.
    struct Readiness: Sendable, Equatable {
        let readable: Bool
        let writable: Bool
        let hangUp: Bool
        let error: Bool

        init(epoll events: UInt32) {
            readable = events & UInt32(EPOLLIN.rawValue) != 0
            writable = events & UInt32(EPOLLOUT.rawValue) != 0
            hangUp = events & (UInt32(EPOLLHUP.rawValue) | UInt32(EPOLLRDHUP.rawValue)) != 0
            error = events & UInt32(EPOLLERR.rawValue) != 0
        }
    }

    fileprivate let token: UInt64
    /// Valid for syscalls until `cancel`; only `cancel` closes it.
    let descriptor: FileDescriptor
    fileprivate let owner: String
    fileprivate let target: String
    private weak var poller: DescriptorPoller?
    private var handler: ((Readiness) -> Void)?
    private var beforeClose: ((FileDescriptor) -> Void)?
    private var afterClose: (() -> Void)?
    /// `out`: not in the set (suspended by the owner, nothing of interest, or not activated).
    private enum State { case inactive, polled(UInt32), out, timerPolled(RegisteredTimer), cancelled }
    private var state = State.inactive
    private var pausedByOwner = false
    private(set) var interest: Interest

    fileprivate init(poller: DescriptorPoller, token: UInt64, descriptor: FileDescriptor, owner: String, target: String, interest: Interest,
                     beforeClose: ((FileDescriptor) -> Void)?, afterClose: (() -> Void)?, handler: @escaping (Readiness) -> Void) {
        self.poller = poller
        self.token = token
        self.descriptor = descriptor
        self.owner = owner
        self.target = target
        self.interest = interest
        self.beforeClose = beforeClose
        self.afterClose = afterClose
        self.handler = handler
    }

    deinit {
        // Polled descriptors are kept alive by the poller until cancelled, so only one
        // never activated, one out of the set, or one whose poller went first gets here open.
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
        state = .out
        update()
    }

    /// No events until `resume`, whatever the descriptor holds. Out of the set rather than
    /// masked: epoll reports a hang-up or an error whatever the mask says. Not counted: one
    /// resume undoes any number of suspends.
    func suspend() {
        pausedByOwner = true
        update()
    }

    /// Tries epoll again, also for a descriptor it refused before.
    func resume() {
        pausedByOwner = false
        update()
    }

    /// What the owner waits for from now on; nothing takes the descriptor out of the set
    /// (a hang-up then waits until it is interested again).
    func setInterest(_ wanted: Interest) {
        guard wanted != interest else { return }
        interest = wanted
        update()
    }

    /// Into the set, out of it, or its mask changed, as the owner's pause and interest say.
    private func update() {
        guard let poller else { return }
        let wanted = pausedByOwner ? 0 : interest.epollEvents
        switch state {
        case .inactive, .cancelled:
            return
        case .polled(let current):
            if wanted == 0 {
                poller.remove(self)
                state = .out
            } else if wanted != current {
                if poller.set(self, events: wanted, adding: false) == nil { state = .polled(wanted) }
            }
        case .out:
            guard wanted != 0 else { return }
            if let failure = poller.set(self, events: wanted, adding: true) {
                poller.fallingBack(self, error: failure)
                let timer = poller.makeFallbackTimer(for: self)
                timer.schedule(at: .now(), repeating: Self.fallbackInterval)
                state = .timerPolled(timer)
                return
            }
            state = .polled(wanted)
        case .timerPolled(let timer):
            if wanted == 0 {
                timer.cancel()
                state = .out
            }
        }
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
        case .out, .inactive:
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
        handler?(Readiness(epoll: events))
        // A hang-up or error stays reported while it lasts: an owner that did not take
        // the descriptor out would be called in a loop. Out of the set instead, until it resumes.
        if events & (UInt32(EPOLLHUP.rawValue) | UInt32(EPOLLERR.rawValue)) != 0, case .polled = state {
            suspend()
        }
    }

    fileprivate func pollFallback() {
        guard case .timerPolled = state else { return }
        var entry = pollfd(fd: descriptor.rawValue, events: Int16(interest.contains(.readable) ? POLLIN : 0) | Int16(interest.contains(.writable) ? POLLOUT : 0), revents: 0)
        guard poll(&entry, 1, 0) > 0, entry.revents != 0 else { return }
        var events: UInt32 = 0
        if entry.revents & Int16(POLLIN) != 0 { events |= UInt32(EPOLLIN.rawValue) }
        if entry.revents & Int16(POLLOUT) != 0 { events |= UInt32(EPOLLOUT.rawValue) }
        if entry.revents & Int16(POLLHUP) != 0 { events |= UInt32(EPOLLHUP.rawValue) }
        if entry.revents & Int16(POLLERR) != 0 { events |= UInt32(EPOLLERR.rawValue) }
        handler?(Readiness(epoll: events))
    }
}
