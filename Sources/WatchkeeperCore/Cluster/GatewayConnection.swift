import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// What moves bytes over a connected socket: the socket itself, or TLS over it. Both
/// answer the same way, so the connection drives them alike.
protocol GatewayStream: AnyObject {
    /// Connected at the TCP level; `.done(0)` once the stream can carry requests.
    func handshake() throws(GatewayFailure) -> StreamProgress
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(GatewayFailure) -> StreamProgress
    func write(_ bytes: UnsafeRawBufferPointer) throws(GatewayFailure) -> StreamProgress
}

enum StreamProgress: Equatable {
    case done(Int)
    case wantRead
    case wantWrite
    case closed
}

/// Why an exchange with an endpoint failed, worded for the operator.
public enum GatewayFailure: Error, Equatable, CustomStringConvertible {
    case resolve(String)
    case connect(Errno)
    case io(Errno)
    case tls(String)
    case closed
    case malformed(String)
    case timedOut(Duration)

    public var description: String {
        switch self {
        case .resolve(let reason): return "unable to resolve the host: \(reason)"
        case .connect(let code): return "unable to connect: \(code.description) (\(code.symbolicName))"
        case .io(let code): return "connection failed: \(code.description) (\(code.symbolicName))"
        case .tls(let reason): return "TLS failed: \(reason)"
        case .closed: return "the endpoint closed the connection"
        case .malformed(let reason): return "unreadable answer: \(reason)"
        case .timedOut(let limit): return "no answer within \(limit.compactDescription)"
        }
    }
}

final class PlainStream: GatewayStream {
    let descriptor: Int32

    init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    func handshake() throws(GatewayFailure) -> StreamProgress { .done(0) }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(GatewayFailure) -> StreamProgress {
        switch NonBlockingRead({ Glibc.recv(descriptor, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT)) }) {
        case .bytes(let count): return .done(count)
        case .wouldBlock: return .wantRead
        case .endOfFile: return .closed
        case .failed(let code): throw .io(code)
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(GatewayFailure) -> StreamProgress {
        switch valueOrErrno({ Glibc.send(descriptor, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }) {
        case .success(let count): return .done(count)
        case .failure(.resourceTemporarilyUnavailable): return .wantWrite
        case .failure(let code): throw .io(code)
        }
    }
}

/// One keep-alive HTTP/1.1 connection to one etcd endpoint, on the cluster client's
/// queue: a non-blocking socket in that queue's epoll (DescriptorPoller), waiting to read,
/// and to write while a connect or a write waits. Not a dispatch source: a refused connect
/// or a reset reports EPOLLHUP, which libdispatch's epoll backend cannot take (issue 36).
/// One exchange at a time; the caller keeps the deadline and closes the connection when
/// it passes.
// @unchecked Sendable: confined to the cluster queue, in its DescriptorPoller.
final class GatewayConnection: @unchecked Sendable {
    enum Event {
        case head(status: Int)
        case body([UInt8])
        case end
        case failed(GatewayFailure)
    }

    private enum State {
        case connecting
        case handshaking
        case open
        case closed
    }

    let endpoint: EtcdEndpoint
    private let socket: PolledDescriptor
    private var state = State.connecting
    private var stream: GatewayStream
    private var outbound: [UInt8] = []
    /// Kept for the connection's life: a read event does not allocate.
    private var readBuffer = [UInt8](repeating: 0, count: 16 * 1024)
    private var outboundOffset = 0
    private var parser: HTTPResponseParser?
    private var onEvent: ((Event) -> Void)?
    /// Made once the socket is connected: TLS needs the connected fd.
    private let makeSecureStream: ((Int32) throws(GatewayFailure) -> GatewayStream)?
    private(set) var exchanges = 0
    var reusable: Bool { state != .closed }

    /// Starts connecting to `address`. The first exchange may be sent at once: it is
    /// written when the connection (and TLS) is up.
    init(endpoint: EtcdEndpoint, address: SocketAddress, poller: DescriptorPoller, queue: DispatchQueue,
         secureStream: ((Int32) throws(GatewayFailure) -> GatewayStream)?) throws(GatewayFailure) {
        self.endpoint = endpoint
        self.makeSecureStream = secureStream
        let descriptor: Int32
        do {
            descriptor = try systemCall { Glibc.socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        } catch {
            throw .connect(error)
        }
        var one: Int32 = 1
        _ = setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let owned = OwnedFileDescriptor(adopting: descriptor)
        let connectResult = address.withPointer { pointer, length in
            nothingOrErrno { Glibc.connect(descriptor, pointer, length) }
        }
        let handler = WeakPump()
        socket = poller.watch(owned, owner: "cluster", target: "connection to \(endpoint)", interest: .readable) { _ in handler.connection?.pump() }
        stream = PlainStream(descriptor: descriptor)
        switch connectResult {
        case .success:
            state = .handshaking
        case .failure(.nowInProgress):
            state = .connecting
        case .failure(let code):
            socket.cancel()
            state = .closed
            throw .connect(code)
        }
        handler.connection = self
        socket.activate()
        if state == .connecting {
            wantWritable()
        } else {
            queue.async { [weak self] in self?.pump() }
        }
    }

    /// The socket's handler holds the connection weakly: one its client let go is simply gone.
    private final class WeakPump {
        weak var connection: GatewayConnection?
    }

    deinit {
        if state != .closed { close() }
    }

    /// Sends one request; `onEvent` gets the head, body pieces and end, or one failure.
    func send(_ request: [UInt8], onEvent: @escaping (Event) -> Void) {
        precondition(self.onEvent == nil, "one exchange at a time on a gateway connection")
        guard state != .closed else {
            onEvent(.failed(.closed))
            return
        }
        outbound = request
        outboundOffset = 0
        parser = HTTPResponseParser(maxBody: 64 * 1024 * 1024)
        self.onEvent = onEvent
        exchanges += 1
        if state == .open { pump() }
    }

    /// Closes the socket; an exchange in flight is not told (the caller closed it).
    func close() {
        guard state != .closed else { return }
        state = .closed
        onEvent = nil
        parser = nil
        socket.cancel()
    }

    private func fail(_ failure: GatewayFailure) {
        let handler = onEvent
        close()
        handler?(.failed(failure))
    }

    private func wantWritable() {
        socket.setInterest([.readable, .writable])
    }

    private func writableNotNeeded() {
        socket.setInterest(.readable)
    }

    /// Moves the connection on as far as it can go now: connect, handshake, write, read.
    private func pump() {
        do throws(GatewayFailure) {
            var needWrite = false
            if state == .connecting {
                var error: Int32 = 0
                var length = socklen_t(MemoryLayout<Int32>.size)
                _ = getsockopt(socket.descriptor.rawValue, SOL_SOCKET, SO_ERROR, &error, &length)
                if error == EINPROGRESS || error == EALREADY {
                    wantWritable()
                    return
                }
                guard error == 0 else { throw .connect(Errno(rawValue: error)) }
                // A read event can come before the write event; only a connected socket
                // has a peer.
                var peer = sockaddr_storage()
                var peerLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
                let connected = withUnsafeMutablePointer(to: &peer) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(socket.descriptor.rawValue, $0, &peerLength) == 0 }
                }
                guard connected else {
                    wantWritable()
                    return
                }
                state = .handshaking
                if let makeSecureStream { stream = try makeSecureStream(socket.descriptor.rawValue) }
            }
            if state == .handshaking {
                switch try stream.handshake() {
                case .done: state = .open
                case .wantRead:
                    writableNotNeeded()
                    return
                case .wantWrite:
                    wantWritable()
                    return
                case .closed: throw .closed
                }
            }
            guard state == .open else { return }
            while outboundOffset < outbound.count {
                let offset = outboundOffset
                let progress = try outbound.withUnsafeBytes { bytes in
                    Result { () throws(GatewayFailure) in try stream.write(UnsafeRawBufferPointer(rebasing: bytes[offset...])) }
                }.get()
                switch progress {
                case .done(let count): outboundOffset += count
                case .wantWrite:
                    needWrite = true
                case .wantRead: break
                case .closed: throw .closed
                }
                if case .done = progress { continue }
                break
            }
            if outboundOffset >= outbound.count && !outbound.isEmpty {
                outbound = []
                outboundOffset = 0
            }
            try readAvailable()
            if state == .closed { return }
            if needWrite { wantWritable() } else { writableNotNeeded() }
        } catch {
            fail(error)
        }
    }

    private func readAvailable() throws(GatewayFailure) {
        while state != .closed {
            let progress = try readBuffer.withUnsafeMutableBytes { bytes in
                Result { () throws(GatewayFailure) in try stream.read(into: bytes) }
            }.get()
            switch progress {
            case .done(let count):
                guard var parser else {
                    // Nothing asked: an idle keep-alive connection the server closed or wrote to.
                    throw .malformed("data on an idle connection")
                }
                let events: [HTTPResponseParser.Event]
                do {
                    events = try parser.feed(readBuffer[0..<count])
                } catch {
                    throw .malformed(error.description)
                }
                self.parser = parser
                for event in events { deliver(event, keepAlive: parser.keepAlive) }
            case .wantRead, .wantWrite:
                return
            case .closed:
                if var parser, let end = parser.closed() {
                    self.parser = parser
                    deliver(end, keepAlive: false)
                }
                if onEvent != nil { throw .closed }
                close()
                return
            }
        }
    }

    private func deliver(_ event: HTTPResponseParser.Event, keepAlive: Bool) {
        guard let handler = onEvent else { return }
        switch event {
        case .head(let status): handler(.head(status: status))
        case .body(let bytes): if !bytes.isEmpty { handler(.body(bytes)) }
        case .end:
            onEvent = nil
            parser = nil
            if !keepAlive { close() }
            handler(.end)
        }
    }
}

/// An IPv4 or IPv6 socket address, as getaddrinfo or inet_pton gives it.
struct SocketAddress: Sendable, CustomStringConvertible {
    private var storage = sockaddr_storage()
    private let length: socklen_t
    let family: Int32

    init?(numericHost host: String, port: UInt16) {
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            family = AF_INET
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutableBytes(of: &storage) { raw in withUnsafeBytes(of: v4) { raw.copyMemory(from: $0) } }
            return
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            family = AF_INET6
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            withUnsafeMutableBytes(of: &storage) { raw in withUnsafeBytes(of: v6) { raw.copyMemory(from: $0) } }
            return
        }
        return nil
    }

    init(copying address: UnsafePointer<sockaddr>, length: socklen_t) {
        self.length = min(length, socklen_t(MemoryLayout<sockaddr_storage>.size))
        family = Int32(address.pointee.sa_family)
        withUnsafeMutableBytes(of: &storage) { raw in raw.copyMemory(from: UnsafeRawBufferPointer(start: address, count: Int(self.length))) }
    }

    func withPointer<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
        withUnsafeBytes(of: storage) { raw in body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length) }
    }

    var description: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        withUnsafeBytes(of: storage) { raw in
            if family == AF_INET {
                var address = raw.load(as: sockaddr_in.self).sin_addr
                _ = inet_ntop(AF_INET, &address, &text, socklen_t(text.count))
            } else {
                var address = raw.load(as: sockaddr_in6.self).sin6_addr
                _ = inet_ntop(AF_INET6, &address, &text, socklen_t(text.count))
            }
        }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// getaddrinfo, which may block on DNS: called off every owner's queue.
    static func resolve(host: String, port: UInt16) -> Result<[SocketAddress], GatewayFailure> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let first = list else {
            return .failure(.resolve(String(cString: gai_strerror(status))))
        }
        defer { freeaddrinfo(first) }
        var addresses: [SocketAddress] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            if let address = entry.pointee.ai_addr { addresses.append(SocketAddress(copying: address, length: entry.pointee.ai_addrlen)) }
            cursor = entry.pointee.ai_next
        }
        return addresses.isEmpty ? .failure(.resolve("no address")) : .success(addresses)
    }
}

/// TLS over the connected socket (an https:// endpoint), through the dlopen'ed libssl.
final class SecureStream: GatewayStream {
    private let session: TLSSession

    init(session: TLSSession) {
        self.session = session
    }

    private static func map(_ progress: TLSSession.Progress) -> StreamProgress {
        switch progress {
        case .done(let count): return .done(count)
        case .wantRead: return .wantRead
        case .wantWrite: return .wantWrite
        case .closed: return .closed
        }
    }

    func handshake() throws(GatewayFailure) -> StreamProgress {
        do { return Self.map(try session.handshake()) } catch { throw .tls(error.description) }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(GatewayFailure) -> StreamProgress {
        do { return Self.map(try session.read(into: buffer)) } catch { throw .tls(error.description) }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(GatewayFailure) -> StreamProgress {
        do { return Self.map(try session.write(bytes)) } catch { throw .tls(error.description) }
    }
}

/// The client's TLS context, made on first use (which loads libssl) and kept: a daemon
/// whose endpoints are all http:// never loads it.
// @unchecked Sendable: confined to the cluster queue, with its client.
final class SecureStreamFactory: @unchecked Sendable {
    private let caFile: String?
    private let certFile: String?
    private let keyFile: String?
    // Confined to the cluster queue, where connections are made.
    private var context: Result<TLSContext, TLSError>?

    init(caFile: String?, certFile: String?, keyFile: String?) {
        self.caFile = caFile
        self.certFile = certFile
        self.keyFile = keyFile
    }

    func stream(for endpoint: EtcdEndpoint, descriptor: Int32) throws(GatewayFailure) -> GatewayStream {
        if context == nil {
            context = Result { () throws(TLSError) in try TLSContext.make(caFile: caFile, certFile: certFile, keyFile: keyFile) }
        }
        switch context! {
        case .failure(let error): throw .tls(error.description)
        case .success(let context):
            do {
                return SecureStream(session: try TLSSession(context: context, fd: descriptor, serverName: endpoint.host))
            } catch {
                throw .tls(error.description)
            }
        }
    }
}
