import CWatchkeeperSystem
import Dispatch
import DequeModule
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// What keeps clients from costing the daemon or each other anything: every buffer is
/// bounded, per connection and all together, and every wait has a deadline, so a
/// malformed, oversized, slow, silent or never-reading client is dropped, and root always
/// has a way in (docs/architecture.md, "The control socket").
public struct ControlLimits: Sendable {
    /// A call is a few hundred bytes; a longer one is refused.
    public var maxRequestBytes = 64 * 1024
    /// Calls sent ahead of their replies (Varlink allows pipelining; replies keep the order).
    public var maxQueuedCalls = 16
    /// Open connections; at the limit one idle, half-sent or not reading makes room.
    public var maxConnections = 256
    /// Connections one uid other than root may hold (a refused uid holds none).
    public var maxConnectionsPerUID = 64
    /// Of `maxConnections`, what only root may use (and one of `maxLargeCallsInFlight`).
    public var reservedForRoot = 8
    /// History, Dump and Metrics calls being answered at once, all connections together:
    /// each answer is large, built on its owner's queue and held until written.
    public var maxLargeCallsInFlight = 4
    /// Connections accepted per wake-up of the listener: the queue answers the others, and
    /// closes what was dropped, in between.
    public var acceptsPerEvent = 16
    /// Descriptors the control socket may hold, connections being closed included; at the
    /// limit it stops accepting until some are closed, so jobs, watches and the state file
    /// always have theirs.
    public var maxDescriptors = 320
    /// From the first byte of a call to its NUL.
    public var requestTimeout: Duration = .seconds(5)
    /// Between calls (`status --follow` calls once a second).
    public var idleTimeout: Duration = .seconds(60)
    /// A reply the client does not read.
    public var writeTimeout: Duration = .seconds(10)
    /// Replies not yet read on one connection (a dump of a large tree is a few MB).
    public var maxReplyBytes = 48 * 1024 * 1024
    /// Replies not yet read, all connections together: past it, the connections that have
    /// not read for longest are dropped until it holds. With the answers being built, this
    /// keeps 200 clients that never read within 100 MiB of idle.
    public var maxPendingReplyBytes = 48 * 1024 * 1024

    public init() {}
}

/// One client, confined to the control queue. Its socket is a descriptor of the control
/// queue's epoll (DescriptorPoller), never a dispatch source: a client that hangs up makes
/// it report EPOLLHUP, which libdispatch's epoll backend cannot take (issue 36). What it
/// waits for follows what it owes: readable while nothing is owed, writable while a reply
/// does not fit the socket buffer; `drop` closes it at once.
final class ControlConnection {
    let id: UInt64
    let peer: ControlPeer
    private let socket: PolledDescriptor
    /// Not reading while a reply waits to be read: a client gets no more answers than it
    /// takes (see `flush`).
    private(set) var paused = false
    /// Called on the queue when a reply that had to wait for the socket is all written.
    var onDrained: (() -> Void)?
    private var waitingToWrite = false
    private(set) var dropped = false

    var inbound: [UInt8] = []
    var queued: Deque<VarlinkCall> = []
    var inFlight: VarlinkCall?
    private var outbound: [UInt8] = []
    private var outboundOffset = 0
    /// Set once the client is to be closed after its last reply is written.
    private(set) var closing = false

    let openedAt: MonotonicInstant
    var lastActivity: MonotonicInstant
    var partialSince: MonotonicInstant?
    private(set) var writeBlockedSince: MonotonicInstant?
    var calls = 0

    /// `socket` is inactive; `activate` starts its events.
    init(id: UInt64, peer: ControlPeer, socket: PolledDescriptor, now: MonotonicInstant) {
        self.id = id
        self.peer = peer
        self.socket = socket
        self.openedAt = now
        self.lastActivity = now
    }

    var descriptor: FileDescriptor { socket.descriptor }
    var pendingReplyBytes: Int { outbound.count - outboundOffset }
    var isIdle: Bool { inFlight == nil && queued.isEmpty && pendingReplyBytes == 0 && partialSince == nil }

    func activate() {
        socket.activate()
    }

    /// The socket's events, from the server: room to write goes to `flush`; true when
    /// there is something to read (or a hang-up or error, which a read reports).
    func ready(_ readiness: PolledDescriptor.Readiness, now: MonotonicInstant) -> Bool {
        if readiness.writable && waitingToWrite { flush(now: now) }
        return !dropped && (readiness.readable || readiness.hangUp || readiness.error)
    }

    /// Appends a reply and writes what the socket takes now; the rest waits for room.
    /// False if the client is not reading and the backlog passed `limit`.
    func send(_ bytes: [UInt8], limit: Int, now: MonotonicInstant) -> Bool {
        guard !dropped else { return true }
        if outboundOffset > 0 && outboundOffset == outbound.count {
            outbound.removeAll(keepingCapacity: true)
            outboundOffset = 0
        }
        outbound += bytes
        if pendingReplyBytes > limit { return false }
        flush(now: now)
        return true
    }

    /// Writes until the socket is full or the backlog is empty. Errors (EPIPE: the client
    /// went away) close the connection on the next check, like any dead client.
    func flush(now: MonotonicInstant) {
        while pendingReplyBytes > 0 {
            let sent = valueOrErrno {
                outbound.withUnsafeBytes { buffer in
                    send_nosignal(descriptor.rawValue, buffer.baseAddress! + outboundOffset, pendingReplyBytes)
                }
            }
            switch sent {
            case .success(let written) where written > 0:
                outboundOffset += written
                lastActivity = now
                continue
            case .failure(.resourceTemporarilyUnavailable):
                waitForWritable(now: now)
                return
            case .success, .failure:
                break
            }
            // The peer is gone: nothing more can reach it.
            outbound.removeAll()
            outboundOffset = 0
            closing = true
            waitingToWrite = false
            updateInterest()
            return
        }
        let waited = writeBlockedSince != nil
        writeBlockedSince = nil
        // A burst's large reply does not keep its capacity for the connection's life.
        if outbound.capacity > 256 * 1024 {
            outbound = []
            outboundOffset = 0
        }
        if waitingToWrite {
            waitingToWrite = false
            updateInterest()
        }
        if waited { onDrained?() }
    }

    /// Stops reading until `resumeReading`: the client has a reply to read first.
    func pauseReading() {
        guard !paused, !closing, !dropped else { return }
        paused = true
        updateInterest()
    }

    func resumeReading() {
        guard paused else { return }
        paused = false
        updateInterest()
    }

    private func waitForWritable(now: MonotonicInstant) {
        if writeBlockedSince == nil { writeBlockedSince = now }
        // Keep only what is still to be written: a reply the socket took half of would
        // otherwise hold its whole size until the client reads the rest.
        if outboundOffset >= 64 * 1024 {
            outbound = Array(outbound[outboundOffset...])
            outboundOffset = 0
        }
        waitingToWrite = true
        updateInterest()
    }

    /// Readable while it may read, writable while a reply waits for room; neither takes
    /// the socket out of the epoll set.
    private func updateInterest() {
        guard !dropped else { return }
        var interest: PolledDescriptor.Interest = []
        if !paused && !closing { interest.insert(.readable) }
        if waitingToWrite { interest.insert(.writable) }
        socket.setInterest(interest)
    }

    /// No more reading: the client is refused, sent too much, or hung up; what it is owed
    /// is still written before `drop`.
    func stopReading() {
        closing = true
        paused = false
        updateInterest()
    }

    var finished: Bool { closing && pendingReplyBytes == 0 && inFlight == nil }

    /// What the admission and eviction rules see of it (ControlAdmission).
    var admissionView: ControlAdmission.Client {
        ControlAdmission.Client(id: id, uid: peer.uid, isIdle: isIdle, lastActivity: lastActivity, partialSince: partialSince,
                                writeBlockedSince: writeBlockedSince, pendingReplyBytes: pendingReplyBytes, closedAndDone: finished)
    }

    /// Out of the epoll set and closed, now.
    func drop() {
        guard !dropped else { return }
        dropped = true
        socket.cancel()
    }

    /// The one reply a client turned away at the door gets, if its socket takes it now;
    /// the descriptor closes as `fd` goes out of scope.
    static func turnAway(_ fd: consuming OwnedFileDescriptor, with reply: [UInt8]) {
        _ = reply.withUnsafeBytes { Glibc.send(fd.rawValue, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
    }
}

/// send(2) without SIGPIPE: a client that hangs up mid-reply must not kill the daemon
/// (SIGPIPE is not among the signals it blocks).
@inline(__always)
private func send_nosignal(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    Glibc.send(fd, buffer, count, Int32(MSG_NOSIGNAL))
}
