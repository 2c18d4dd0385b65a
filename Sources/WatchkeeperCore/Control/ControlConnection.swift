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

/// One client, confined to the control queue. Its read source owns the socket; a write
/// source exists only while a reply does not fit the socket buffer, and is suspended
/// rather than cancelled in between, so the fd is closed once, after both are gone.
final class ControlConnection {
    let id: UInt64
    let peer: ControlPeer
    private let reader: FileDescriptorReadSource
    private var readSuspended = false
    /// Not reading while a reply waits to be read: a client gets no more answers than it
    /// takes (see `flush`).
    private(set) var paused = false
    /// Called on the queue when a reply that had to wait for the socket is all written.
    var onDrained: (() -> Void)?
    private var writer: DispatchSourceWrite?
    private var writeSuspended = false
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

    init(id: UInt64, peer: ControlPeer, reader: FileDescriptorReadSource, now: MonotonicInstant) {
        self.id = id
        self.peer = peer
        self.reader = reader
        self.openedAt = now
        self.lastActivity = now
    }

    var descriptor: FileDescriptor { reader.descriptor }
    var pendingReplyBytes: Int { outbound.count - outboundOffset }
    var isIdle: Bool { inFlight == nil && queued.isEmpty && pendingReplyBytes == 0 && partialSince == nil }

    func activate(onReadable: @escaping () -> Void) {
        reader.source.setEventHandler(handler: onReadable)
        reader.activate()
    }

    /// Appends a reply and writes what the socket takes now; the rest waits for a write
    /// source. False if the client is not reading and the backlog passed `limit`.
    func send(_ bytes: [UInt8], limit: Int, queue: DispatchQueue, now: MonotonicInstant) -> Bool {
        guard !dropped else { return true }
        if outboundOffset > 0 && outboundOffset == outbound.count {
            outbound.removeAll(keepingCapacity: true)
            outboundOffset = 0
        }
        outbound += bytes
        if pendingReplyBytes > limit { return false }
        flush(queue: queue, now: now)
        return true
    }

    /// Writes until the socket is full or the backlog is empty. Errors (EPIPE: the client
    /// went away) close the connection on the next check, like any dead client.
    func flush(queue: DispatchQueue, now: MonotonicInstant) {
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
                waitForWritable(queue: queue, now: now)
                return
            case .success, .failure:
                break
            }
            // The peer is gone: nothing more can reach it.
            outbound.removeAll()
            outboundOffset = 0
            closing = true
            return
        }
        let waited = writeBlockedSince != nil
        writeBlockedSince = nil
        // A burst's large reply does not keep its capacity for the connection's life.
        if outbound.capacity > 256 * 1024 {
            outbound = []
            outboundOffset = 0
        }
        if let writer, !writeSuspended {
            writer.suspend()
            writeSuspended = true
        }
        if waited { onDrained?() }
    }

    /// Stops reading until `resumeReading`: the client has a reply to read first.
    func pauseReading() {
        guard !paused, !closing, !dropped else { return }
        paused = true
        if !readSuspended {
            reader.source.suspend()
            readSuspended = true
        }
    }

    func resumeReading() {
        guard paused else { return }
        paused = false
        if readSuspended && !closing && !dropped {
            reader.source.resume()
            readSuspended = false
        }
    }

    private func waitForWritable(queue: DispatchQueue, now: MonotonicInstant) {
        if writeBlockedSince == nil { writeBlockedSince = now }
        // Keep only what is still to be written: a reply the socket took half of would
        // otherwise hold its whole size until the client reads the rest.
        if outboundOffset >= 64 * 1024 {
            outbound = Array(outbound[outboundOffset...])
            outboundOffset = 0
        }
        if writer == nil {
            let source = DispatchSource.makeWriteSource(fileDescriptor: descriptor.rawValue, queue: queue)
            // Weak: a connection dropped while an event was already on its way is simply gone.
            source.setEventHandler { [weak self] in
                self?.flush(queue: queue, now: .now)
            }
            writer = source
            source.activate()
        } else if writeSuspended {
            writer?.resume()
            writeSuspended = false
        }
    }

    /// No more reading: the client is refused, sent too much, or hung up; what it is owed
    /// is still written before `drop`.
    func stopReading() {
        closing = true
        paused = false
        guard !readSuspended, !dropped else { return }
        reader.source.suspend()
        readSuspended = true
    }

    var finished: Bool { closing && pendingReplyBytes == 0 && inFlight == nil }

    /// Closes the socket: the write source (if any) is cancelled first, and the read
    /// source, whose cancel handler closes the fd, only once that cancellation is done.
    func drop() {
        guard !dropped else { return }
        dropped = true
        if readSuspended {
            reader.source.resume()
            readSuspended = false
        }
        guard let writer else {
            reader.cancel()
            return
        }
        let reader = self.reader
        writer.setCancelHandler { reader.cancel() }
        if writeSuspended {
            writer.resume()
            writeSuspended = false
        }
        writer.cancel()
        self.writer = nil
    }
}

/// send(2) without SIGPIPE: a client that hangs up mid-reply must not kill the daemon
/// (SIGPIPE is not among the signals it blocks).
@inline(__always)
private func send_nosignal(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    Glibc.send(fd, buffer, count, Int32(MSG_NOSIGNAL))
}
