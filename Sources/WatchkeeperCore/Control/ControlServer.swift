import CWatchkeeperSystem
import Dispatch
import Logging
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

public typealias ControlReply = @Sendable (Result<[DumpField], VarlinkError>) -> Void

/// Who answers the calls of io.watchkeeper.Control: the daemon, which asks each owner on
/// its own queue. `reply` may be called from any queue, once.
public protocol ControlBackend: AnyObject, Sendable {
    func handle(_ method: ControlInterface.Method, parameters: DumpValue, peer: ControlPeer, reply: @escaping ControlReply)
}

/// The control socket, `<runtime_dir>/control.sock`: a Unix stream socket speaking
/// Varlink, on its own queue (ControlListener; each client in the queue's epoll, since a
/// client that closes hangs up, which libdispatch's epoll backend cannot take:
/// DescriptorPoller). Every connection is checked with SO_PEERCRED before anything it sends
/// is read; calls are answered one at a time per connection, in order, without ever
/// blocking this queue on another subsystem. Connections are not in the SourceRegistry
/// (200 clients would be 200 lines of every dump); the dump's `control` section lists them.
// @unchecked Sendable: confined to the control queue (`queue`).
public final class ControlServer: DumpContributor, @unchecked Sendable {
    public let queue: SubsystemQueue
    private let sources: SourceRegistry
    private let logger: Logger
    private let backend: ControlBackend
    public let limits: ControlLimits
    /// Who gets a slot, who makes room, who goes at a bound: the rules, as a value.
    private let admission: ControlAdmission
    /// Every client's socket.
    private let poller: DescriptorPoller

    // Confined to `queue`.
    private let listener: ControlListener
    private var access: ControlAccess
    private var problem: String?
    private var connections: [UInt64: ControlConnection] = [:]
    private var nextID: UInt64 = 1
    private var sweepTimer: RegisteredTimer?
    private var sweepArmed = false
    private var scratch = [UInt8](repeating: 0, count: 64 * 1024)
    private var refusals = RefusalLog()
    private var counters = Counters()
    private var slots: LargeCallSlots
    /// Accepted descriptors not closed yet.
    private var descriptorsHeld = 0
    /// Set when replies of some size were dropped or written: the sweep gives freed memory
    /// back to the system once little is pending.
    private var trimDue = false

    struct Counters {
        var accepted: UInt64 = 0
        var refused: UInt64 = 0
        var calls: UInt64 = 0
        var errors: UInt64 = 0
        var dropped: [String: UInt64] = [:]
        var acceptFailures: UInt64 = 0
        var peakPendingReplyBytes = 0
    }

    public init(queue: SubsystemQueue, sources: SourceRegistry, logger: Logger, backend: ControlBackend, limits: ControlLimits = ControlLimits()) {
        self.queue = queue
        self.sources = sources
        self.logger = logger
        self.backend = backend
        self.limits = limits
        self.admission = ControlAdmission(limits: limits)
        self.access = ControlAccess(daemonUID: geteuid(), group: nil)
        self.slots = LargeCallSlots(limit: limits.maxLargeCallsInFlight)
        self.listener = ControlListener(queue: queue, sources: sources, logger: logger)
        self.poller = DescriptorPoller(queue: queue, sources: sources, logger: logger, owner: "control", purpose: "control connections")
    }

    public var dumpSectionName: String { "control" }
    public var dumpQueue: SubsystemQueue { queue }

    public static func socketPath(runtimeDirectory: String) -> String { DaemonSettings.controlSocketPath(runtimeDirectory: runtimeDirectory) }

    /// Start, and every reload: binds `path` (replacing a stale socket), or re-applies the
    /// group and mode when only they changed. A failure is logged and leaves the daemon
    /// without a control socket; signals and the journal still work.
    public func apply(path: String, group: String?, readGroup: String? = nil) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        func resolve(_ name: String?, _ key: String) -> (name: String, gid: UInt32)? {
            guard let name else { return nil }
            guard let gid = ControlAccess.groupID(named: name) else {
                logger.warning("\(key) \(name) no longer exists; its members may not use the control socket")
                return nil
            }
            return (name, gid)
        }
        access = ControlAccess(daemonUID: geteuid(), group: resolve(group, "control_group"), readGroup: resolve(readGroup, "read_group"))
        if path != listener.path {
            listener.close()
            do {
                try listener.open(at: path) { [unowned self] in self.acceptAll() }
                problem = nil
            } catch {
                problem = error.message
                logger.error("\(error.message); `watchkeeper status` and the other control commands will not work until this is fixed and the daemon reloaded")
                return
            }
        }
        do {
            try listener.setOwnership(group: access.group?.gid ?? getegid(), openToAll: access.readGroup != nil)
        } catch {
            logger.warning("\(error.unable("set the group and mode of \(path)"))")
        }
    }

    /// At stop: the socket file goes with the daemon, unless another has replaced it.
    public func stop() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        listener.close()
        for connection in connections.values { connection.drop() }
        connections.removeAll()
        sweepTimer?.cancel()
    }

    // MARK: Connections

    /// At most `acceptsPerEvent` a turn (the listener stays readable, so the source fires
    /// again), and none while the descriptors held are at their bound.
    private func acceptAll() {
        for _ in 0 ..< limits.acceptsPerEvent {
            guard descriptorsHeld < limits.maxDescriptors else {
                // Until connections being closed give their descriptors back (`descriptorClosed`).
                if !listener.isPaused { counters.dropped["descriptor limit (accepting paused)", default: 0] += 1 }
                listener.pause(.descriptors)
                return
            }
            let fd: Int32
            switch listener.accept() {
            case .success(let accepted): fd = accepted
            case .failure(let failure):
                switch failure {
                case .resourceTemporarilyUnavailable, .badFileDescriptor: return
                case .connectionAbort: continue
                default:
                    // EMFILE/ENFILE: the pending connection stays readable, so without a pause
                    // this handler would spin. Pause accepting for a second; say so once.
                    counters.acceptFailures += 1
                    if counters.acceptFailures == 1 || counters.acceptFailures % 100 == 0 {
                        logger.error("\(failure.unable("accept a control connection")) (\(counters.acceptFailures) time(s) so far); accepting again in 1s")
                    }
                    listener.pause(.failure)
                    return
                }
            }
            admit(OwnedFileDescriptor(adopting: fd))
        }
    }

    private func descriptorClosed() {
        descriptorsHeld -= 1
        if descriptorsHeld < limits.maxDescriptors { listener.resume(.descriptors) }
    }

    /// SO_PEERCRED at once: a refused peer gets PermissionDenied and is closed before it can
    /// hold a slot; then ControlAdmission's rules (per-uid limit, root's reserve, who makes
    /// room at the limit).
    private func admit(_ fd: consuming OwnedFileDescriptor) {
        let now = MonotonicInstant.now
        let peer = try? ControlPeer.of(fd.descriptor)
        guard let peer, access.allows(peer) else {
            counters.refused += 1
            logRefusal(peer: peer, now: now)
            answerAndClose(fd, ControlInterface.ErrorName.permissionDenied.error([
                .init("uid", .int(Int64(peer?.uid ?? UInt32.max))),
                .init("group", access.group.map { .string($0.name) } ?? .null),
            ]))
            return
        }
        switch admission.admit(uid: peer.uid, among: connections.values.map(\.admissionView)) {
        case .admit:
            break
        case .admitEvicting(let id, let why):
            if let evicted = connections[id] {
                drop(evicted, reason: ("evicted at the connection limit", "\(why.rawValue), evicted to make room at the connection limit"))
            }
        case .refuse(.perUIDLimit):
            counters.dropped["per-uid connection limit", default: 0] += 1
            answerAndClose(fd, ControlInterface.ErrorName.tooManyRequests.error([.init("limit", .int(Int64(limits.maxConnectionsPerUID)))]))
            return
        case .refuse(.connectionLimit):
            counters.dropped["connection limit", default: 0] += 1
            answerAndClose(fd, ControlInterface.ErrorName.tooManyRequests.error([.init("limit", .int(Int64(limits.maxConnections)))]))
            return
        }
        let id = nextID
        nextID += 1
        descriptorsHeld += 1
        let socket = poller.watch(fd, owner: "control", target: "connection \(id)", interest: .readable,
                                  afterClose: { [weak self] in self?.descriptorClosed() }) { [unowned self] readiness in
            self.ready(id, readiness)
        }
        let connection = ControlConnection(id: id, peer: peer, socket: socket, now: now)
        connections[id] = connection
        counters.accepted += 1
        connection.onDrained = { [unowned self] in self.drained(id) }
        connection.activate()
        armSweep()
    }

    private func answerAndClose(_ fd: consuming OwnedFileDescriptor, _ error: VarlinkError) {
        counters.errors += 1
        ControlConnection.turnAway(fd, with: VarlinkReply.error(error).encoded)
    }

    /// The journal says who it was and who may connect, once a minute per uid.
    private func logRefusal(peer: ControlPeer?, now: MonotonicInstant) {
        let who = peer.map { LineEscaping.escaped($0.description) } ?? "a peer whose credentials could not be read"
        if let line = refusals.record(uid: peer?.uid ?? UInt32.max, now: now) {
            logger.warning("refused a control connection from \(who): \(access.whoMay)\(line)",
                           metadata: [JournalFields.messageIDKey: .string(MessageID.controlRefused.rawValue), "peer_uid": .stringConvertible(peer?.uid ?? 0)])
        }
    }

    private func ready(_ id: UInt64, _ readiness: PolledDescriptor.Readiness) {
        guard let connection = connections[id] else { return }
        guard connection.ready(readiness, now: .now) else {
            finishIfDone(connection)
            return
        }
        // A client that hung up sends nothing more, and the poller takes its socket out of
        // the set after this: what it sent is read to the end now, unless a call stops it.
        while readable(connection), readiness.hangUp, !connection.dropped, !connection.closing, !connection.paused {}
    }

    /// One read; true if it brought bytes.
    @discardableResult
    private func readable(_ connection: ControlConnection) -> Bool {
        guard !connection.dropped else { return false }
        let now = MonotonicInstant.now
        let count: Int
        switch scratch.withUnsafeMutableBytes({ NonBlockingRead.read(connection.descriptor.rawValue, into: $0) }) {
        case .bytes(let read): count = read
        case .wouldBlock: return false
        case .failed(let error):
            drop(connection, reason: ("read failed", error.unable("read from the client")))
            return false
        case .endOfFile:
            // The client hung up (or shut its side): answer what it already asked, then close.
            connection.stopReading()
            finishIfDone(connection)
            return false
        }
        connection.lastActivity = now
        var start = 0
        scratch.withUnsafeBytes { buffer in
            while start < count, let nul = memchr(buffer.baseAddress! + start, 0, count - start) {
                let end = buffer.baseAddress!.distance(to: UnsafeRawPointer(nul))
                connection.inbound += buffer[start ..< end]
                let message = connection.inbound
                connection.inbound.removeAll(keepingCapacity: true)
                connection.partialSince = nil
                start = end + 1
                received(message, on: connection)
                if connection.closing { return }
            }
            if start < count, !connection.closing {
                connection.inbound += buffer[start ..< count]
                if connection.partialSince == nil { connection.partialSince = now }
            }
        }
        if !connection.closing, connection.inbound.count > limits.maxRequestBytes {
            fail(connection, ControlInterface.ErrorName.requestTooLarge.error([.init("limit", .int(Int64(limits.maxRequestBytes)))]))
        }
        pump(connection)
        return true
    }

    private func received(_ message: [UInt8], on connection: ControlConnection) {
        guard message.count <= limits.maxRequestBytes else {
            fail(connection, ControlInterface.ErrorName.requestTooLarge.error([.init("limit", .int(Int64(limits.maxRequestBytes)))]))
            return
        }
        switch VarlinkCall.decode(message) {
        case .failure(let error):
            fail(connection, error)
        case .success(let call):
            guard connection.queued.count < limits.maxQueuedCalls else {
                fail(connection, ControlInterface.ErrorName.tooManyRequests.error([.init("limit", .int(Int64(limits.maxQueuedCalls)))]))
                return
            }
            connection.queued.append(call)
        }
    }

    /// The last word to a misbehaving client: the error, then the connection closes.
    private func fail(_ connection: ControlConnection, _ error: VarlinkError) {
        counters.errors += 1
        counters.dropped[String(error.name.split(separator: ".").last ?? ""), default: 0] += 1
        connection.queued.removeAll()
        connection.stopReading()
        if connection.inFlight == nil {
            write(VarlinkReply.error(error).encoded, to: connection)
        }
        finishIfDone(connection)
    }

    /// Starts the next queued call when none is in flight, its last reply has been read,
    /// and a slot is free. Reading stops while anything is owed to the client: it gets no
    /// more answers than it takes, so one that never reads costs one reply, not 64 MiB.
    private func pump(_ connection: ControlConnection) {
        while connection.inFlight == nil, connection.pendingReplyBytes == 0, !connection.dropped, let call = connection.queued.first {
            let large = LargeCallSlots.isLarge(call)
            guard !large || slots.take(for: connection.id, root: connection.peer.uid == 0) else { break }
            connection.queued.removeFirst()
            connection.inFlight = call
            connection.calls += 1
            counters.calls += 1
            let id = connection.id
            ControlDispatch.dispatch(call, peer: connection.peer, access: access, backend: backend) { [unowned self] result in
                self.queue.async {
                    if large { self.slots.release() }
                    self.replied(id, result)
                    if large { self.serveSlotWaiters() }
                }
            }
        }
        if connection.inFlight != nil || connection.pendingReplyBytes > 0 || !connection.queued.isEmpty {
            connection.pauseReading()
        } else {
            connection.resumeReading()
        }
        finishIfDone(connection)
    }

    private func serveSlotWaiters() {
        var passes = slots.waiting.count
        while passes > 0, slots.inFlight < slots.limit, let id = slots.popWaiting() {
            passes -= 1
            if let connection = connections[id] { pump(connection) }
        }
    }

    /// A reply that waited for the socket is written: the client may have the next.
    private func drained(_ id: UInt64) {
        guard let connection = connections[id] else { return }
        pump(connection)
    }

    private func replied(_ id: UInt64, _ result: Result<[DumpField], VarlinkError>) {
        guard let connection = connections[id], let call = connection.inFlight else { return }
        connection.inFlight = nil
        if !call.oneway {
            let reply: VarlinkReply
            switch result {
            case .success(let fields): reply = .parameters(fields)
            case .failure(let error):
                counters.errors += 1
                reply = .error(error)
            }
            write(reply.encoded, to: connection)
        }
        pump(connection)
    }

    private func write(_ bytes: [UInt8], to connection: ControlConnection) {
        if !connection.send(bytes, limit: limits.maxReplyBytes, now: .now) {
            drop(connection, reason: ("replies not read", "over \(limits.maxReplyBytes) bytes of replies not read"))
            trimDue = true
            return
        }
        if bytes.count >= 64 * 1024 { trimDue = true }
        enforceReplyBudget()
    }

    /// Unread replies of all connections together.
    private var pendingReplyBytes: Int { connections.values.reduce(0) { $0 + $1.pendingReplyBytes } }

    /// All connections' unread replies together stay within `maxPendingReplyBytes`
    /// (ControlAdmission.overReplyBudget).
    private func enforceReplyBudget() {
        let pending = pendingReplyBytes
        counters.peakPendingReplyBytes = max(counters.peakPendingReplyBytes, pending)
        guard pending > limits.maxPendingReplyBytes else { return }
        for id in admission.overReplyBudget(connections.values.map(\.admissionView)) {
            guard let connection = connections[id] else { continue }
            drop(connection, reason: ("reply memory", "replies not read while all clients' unread replies passed \(limits.maxPendingReplyBytes / (1 << 20)) MiB"))
        }
        trimDue = true
    }

    private func finishIfDone(_ connection: ControlConnection) {
        if connection.finished { drop(connection, reason: nil) }
    }

    private func drop(_ connection: ControlConnection, reason: (key: String, detail: String)?) {
        if connection.pendingReplyBytes > 0 { trimDue = true }
        connection.drop()
        connections[connection.id] = nil
        if let reason {
            counters.dropped[reason.key, default: 0] += 1
            logger.debug("closed control connection \(connection.id) from \(LineEscaping.escaped(connection.peer.description)): \(reason.detail)")
        }
    }

    // MARK: Deadlines

    private func armSweep() {
        guard !sweepArmed, !connections.isEmpty || trimDue else { return }
        if sweepTimer == nil {
            sweepTimer = sources.makeTimer(owner: "control", target: "control connection deadlines", on: queue) { [unowned self] in
                self.sweepArmed = false
                self.sweep()
            }
        }
        sweepArmed = true
        sweepTimer?.schedule(after: .seconds(1))
    }

    /// Once a second while any client is connected: drop the ones past a deadline.
    private func sweep() {
        for (id, expiry) in admission.expired(connections.values.map(\.admissionView), now: .now) {
            guard let connection = connections[id] else { continue }
            switch expiry {
            case .requestTimeout:
                drop(connection, reason: ("request timeout", "request not finished within \(limits.requestTimeout.compactDescription)"))
            case .writeTimeout:
                drop(connection, reason: ("write timeout", "reply not read within \(limits.writeTimeout.compactDescription)"))
            case .idleTimeout:
                drop(connection, reason: ("idle timeout", "idle for \(limits.idleTimeout.compactDescription)"))
            case .done:
                drop(connection, reason: nil)
            }
        }
        // Replies are large, short-lived allocations on whichever thread ran the queue:
        // freed, glibc keeps them in its arenas unless asked to give them back.
        if trimDue, pendingReplyBytes < 1 << 20 {
            trimDue = false
            _ = malloc_trim(0)
        }
        armSweep()
    }

    // MARK: Dump

    public func describeForDump() -> DumpValue {
        let now = MonotonicInstant.now
        let open = connections.values.sorted { $0.id < $1.id }
        return .object([
            .init("socket", listener.path.map { .string($0) } ?? .null),
            .init("problem", problem.map { .string($0) } ?? .null),
            .init("group", access.group.map { .string($0.name) } ?? .null),
            .init("read_group", access.readGroup.map { .string($0.name) } ?? .null),
            .init("connections", .int(Int64(connections.count))),
            .init("max_connections", .int(Int64(limits.maxConnections))),
            .init("accepted", .int(Int64(counters.accepted))),
            .init("refused", .int(Int64(counters.refused))),
            .init("calls", .int(Int64(counters.calls))),
            .init("error_replies", .int(Int64(counters.errors))),
            .init("accept_failures", .int(Int64(counters.acceptFailures))),
            .init("large_calls_in_flight", .int(Int64(slots.inFlight))),
            .init("peak_large_calls_in_flight", .int(Int64(slots.peak))),
            .init("calls_waiting_for_a_slot", .int(Int64(slots.waiting.count))),
            .init("descriptors", .int(Int64(descriptorsHeld))),
            .init("max_descriptors", .int(Int64(limits.maxDescriptors))),
            .init("pending_reply_bytes", .int(Int64(pendingReplyBytes))),
            .init("peak_pending_reply_bytes", .int(Int64(counters.peakPendingReplyBytes))),
            .init("max_pending_reply_bytes", .int(Int64(limits.maxPendingReplyBytes))),
            .init("dropped", .object(counters.dropped.sorted { $0.key < $1.key }.map { .init($0.key, .int(Int64($0.value))) })),
            .init("open", .array(open.prefix(20).map { connection in
                .object([
                    .init("id", .int(Int64(connection.id))),
                    .init("uid", .int(Int64(connection.peer.uid))),
                    .init("pid", .int(Int64(connection.peer.pid))),
                    .init("age_s", .double((now - connection.openedAt).secondsDouble)),
                    .init("calls", .int(Int64(connection.calls))),
                    .init("in_flight", connection.inFlight.map { .string($0.method) } ?? .null),
                ])
            })),
        ])
    }
}
