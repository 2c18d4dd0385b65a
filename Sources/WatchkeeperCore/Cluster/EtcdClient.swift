import DequeModule
import Dispatch
import Logging

/// What a call to etcd came to, for the operator: which endpoint, and why.
public enum EtcdError: Error, Equatable, CustomStringConvertible {
    /// The endpoint could not be reached or did not answer in time.
    case unreachable(EtcdEndpoint, GatewayFailure)
    /// etcd answered with an error (gRPC code and message, as the gateway forwards them).
    case server(EtcdEndpoint, code: Int, message: String)
    /// The client is being shut down.
    case closed

    public var description: String {
        switch self {
        case .unreachable(let endpoint, let failure): return "etcd at \(endpoint): \(failure)"
        case .server(let endpoint, let code, let message): return "etcd at \(endpoint) refused the call: \(message) (code \(code))"
        case .closed: return "the etcd client is closed"
        }
    }

    /// The server lost or never had quorum, or is unreachable: worth another endpoint.
    var isTransient: Bool {
        switch self {
        case .unreachable: return true
        case .server(_, let code, _): return code == 14 || code == 4 || code == 2
        case .closed: return false
        }
    }

    var isInvalidToken: Bool {
        if case .server(_, _, let message) = self { return message.contains(utf8: "invalid auth token") }
        return false
    }
}

/// etcd's v3 API through its JSON gateway (docs/measurements/etcd-client.md), on the
/// cluster queue. Calls go in lanes, each with a keep-alive connection of its own and one
/// call at a time, so a slow claim never delays a lease renewal: `lease`, `calls` and
/// `watch`. Every call has a deadline; when it passes the call fails and its connection
/// is closed (an answer still on its way cannot be matched to the next call). A refused
/// connection moves to the next endpoint at once, within the call's deadline.
// @unchecked Sendable: confined to the cluster queue (`queue`).
public final class EtcdClient: @unchecked Sendable {
    /// `lease` and `watch` have a connection each, and so do `records` (the ends of runs,
    /// written at once, never behind a claim); claims and the rest share `calls`
    /// connections (four), each call going to the one with the least queued.
    public enum Lane: Hashable, Sendable {
        case lease, watch, records
        case calls(Int)

        static let callLanes = 4
        static var all: [Lane] { [.lease, .watch, .records] + (0..<callLanes).map { .calls($0) } }

        var name: String {
            switch self {
            case .lease: return "lease"
            case .watch: return "watch"
            case .records: return "records"
            case .calls(let index): return "calls \(index)"
            }
        }
    }

    public struct Options: Sendable {
        public var endpoints: [EtcdEndpoint]
        public var username: String?
        public var password: String?
        /// Makes the TLS stream for an https endpoint over a connected socket.
        var secureStream: (@Sendable (EtcdEndpoint, Int32) throws(GatewayFailure) -> GatewayStream)?

        public init(endpoints: [EtcdEndpoint], username: String? = nil, password: String? = nil) {
            self.endpoints = endpoints
            self.username = username
            self.password = password
        }
    }

    /// A call: one POST and its answer, or a stream of answers (a watch).
    // @unchecked Sendable: confined to the cluster queue, with its client.
    private final class Call: @unchecked Sendable {
        let path: String
        let body: [UInt8]
        let deadline: MonotonicInstant
        let timeout: Duration
        let started: MonotonicInstant
        let completion: (Result<DumpValue, EtcdError>) -> Void
        let onMessage: ((DumpValue) -> Void)?
        var status = 0
        var answer: [UInt8] = []
        var splitter = JSONObjectSplitter(maxObject: 16 * 1024 * 1024)
        var attempts = 0
        var authenticated = false
        var done = false

        init(path: String, body: [UInt8], timeout: Duration, onMessage: ((DumpValue) -> Void)?,
             completion: @escaping (Result<DumpValue, EtcdError>) -> Void) {
            self.path = path
            self.body = body
            self.timeout = timeout
            started = .now
            deadline = started + timeout
            self.onMessage = onMessage
            self.completion = completion
        }
    }

    // @unchecked Sendable: confined to the cluster queue, with its client.
    private final class LaneState: @unchecked Sendable {
        var connection: GatewayConnection?
        var waiting: Deque<Call> = []
        var inFlight: Call?
        var timer: RegisteredTimer?
        var resolving = false
    }

    public let queue: SubsystemQueue
    private let options: Options
    private let sources: SourceRegistry
    private var lanes: [Lane: LaneState] = [:]
    /// Index into `options.endpoints` of the endpoint in use; moves on a failure.
    public private(set) var endpointIndex = 0
    private var token: String?
    private var closed = false
    /// Latencies of answered calls, for the dump and metrics (a ring).
    public private(set) var latencies = LatencyRing(capacity: 256)
    public private(set) var callsFailed: UInt64 = 0
    public private(set) var lastFailure: EtcdError?
    private let resolver = DispatchQueue(label: "watchkeeper.cluster.resolve")
    /// Every connection's socket, in the cluster queue's epoll.
    private let poller: DescriptorPoller

    public init(options: Options, queue: SubsystemQueue, sources: SourceRegistry, logger: Logger = Logger(label: "watchkeeper")) {
        precondition(!options.endpoints.isEmpty, "an etcd client needs at least one endpoint")
        self.options = options
        self.queue = queue
        self.sources = sources
        self.poller = DescriptorPoller(queue: queue, sources: sources, logger: logger, owner: "cluster", purpose: "etcd connections")
        for lane in Lane.all { lanes[lane] = LaneState() }
    }

    public var endpointInUse: EtcdEndpoint { options.endpoints[endpointIndex] }

    /// POSTs `body` to `path` (e.g. /v3/kv/range) and gives the answer's JSON, on the
    /// cluster queue.
    public func call(_ path: String, _ body: DumpValue, lane: Lane? = nil, timeout: Duration,
                     completion: @escaping (Result<DumpValue, EtcdError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        enqueue(Call(path: path, body: Array(body.json.utf8), timeout: timeout, onMessage: nil, completion: completion), lane: lane ?? leastBusyCallLane())
    }

    /// A streaming call (a watch): each message as it comes, then the completion when the
    /// stream ends, fails or reaches `timeout` (a stream is renewed by its owner).
    public func stream(_ path: String, _ body: DumpValue, timeout: Duration, onMessage: @escaping (DumpValue) -> Void,
                       completion: @escaping (Result<DumpValue, EtcdError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        enqueue(Call(path: path, body: Array(body.json.utf8), timeout: timeout, onMessage: onMessage, completion: completion), lane: .watch)
    }

    /// Fails every call and closes every connection.
    public func close() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        closed = true
        for (_, lane) in lanes {
            lane.timer?.cancel()
            lane.timer = nil
            lane.connection?.close()
            lane.connection = nil
            let calls = (lane.inFlight.map { [$0] } ?? []) + Array(lane.waiting)
            lane.inFlight = nil
            lane.waiting.removeAll()
            for call in calls where !call.done {
                call.done = true
                call.completion(.failure(.closed))
            }
        }
    }

    /// Drops a lane's connection, failing its call: a stream its owner wants ended.
    public func reset(_ lane: Lane) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard let state = lanes[lane] else { return }
        state.connection?.close()
        state.connection = nil
        if let call = state.inFlight {
            state.inFlight = nil
            finish(call, .failure(.unreachable(endpointInUse, .closed)), lane: lane)
        }
    }


    // MARK: Lanes

    private func leastBusyCallLane() -> Lane {
        (0..<Lane.callLanes).map { Lane.calls($0) }.min { load($0) < load($1) }!
    }

    private func load(_ lane: Lane) -> Int {
        guard let state = lanes[lane] else { return .max }
        return state.waiting.count + (state.inFlight == nil ? 0 : 1)
    }

    private func enqueue(_ call: Call, lane: Lane) {
        guard !closed else {
            call.done = true
            call.completion(.failure(.closed))
            return
        }
        lanes[lane]!.waiting.append(call)
        startNext(lane)
    }

    private func startNext(_ lane: Lane) {
        let state = lanes[lane]!
        guard state.inFlight == nil, !state.resolving else { return }
        while let next = state.waiting.first, next.deadline <= .now {
            state.waiting.removeFirst()
            finish(next, .failure(.unreachable(endpointInUse, .timedOut(next.timeout))), lane: lane, startNext: false)
        }
        guard let call = state.waiting.popFirst() else { return }
        // Authenticate first when etcd auth is configured and no token is held.
        if options.username != nil, token == nil, call.path != "/v3/auth/authenticate" {
            state.waiting.prepend(call)
            let body = DumpValue.object([DumpField("name", .string(options.username ?? "")), DumpField("password", .string(options.password ?? ""))])
            let login = Call(path: "/v3/auth/authenticate", body: Array(body.json.utf8), timeout: max(.zero, call.deadline - .now), onMessage: nil) { [weak self] result in
                guard let self else { return }
                if case .success(let answer) = result, let value = answer["token"]?.stringValue { self.token = value }
                if case .failure(let error) = result, let waiting = state.waiting.first {
                    // The call that needed the token fails with the login's reason.
                    state.waiting.removeFirst()
                    self.finish(waiting, .failure(error), lane: lane, startNext: false)
                }
            }
            state.inFlight = login
            send(login, lane: lane)
            return
        }
        state.inFlight = call
        send(call, lane: lane)
    }

    private func send(_ call: Call, lane: Lane) {
        let state = lanes[lane]!
        armTimer(lane, at: call.deadline)
        if let connection = state.connection, connection.reusable, connection.endpoint == endpointInUse {
            write(call, on: connection, lane: lane)
            return
        }
        state.connection?.close()
        state.connection = nil
        let endpoint = endpointInUse
        if let address = SocketAddress(numericHost: endpoint.host, port: endpoint.port) {
            connect(call, to: endpoint, address: address, lane: lane)
            return
        }
        // A host name: getaddrinfo may block on DNS, so it runs off this queue; the call's
        // deadline still holds, and a late answer finds the call gone.
        state.resolving = true
        resolver.async { [weak self] in
            let result = SocketAddress.resolve(host: endpoint.host, port: endpoint.port)
            self?.queue.async { [weak self] in
                guard let self else { return }
                state.resolving = false
                guard state.inFlight === call, !call.done else {
                    self.startNext(lane)
                    return
                }
                switch result {
                case .success(let addresses): self.connect(call, to: endpoint, address: addresses[0], lane: lane)
                case .failure(let failure): self.transportFailed(call, failure, lane: lane, retryable: true)
                }
            }
        }
    }

    private func connect(_ call: Call, to endpoint: EtcdEndpoint, address: SocketAddress, lane: Lane) {
        let state = lanes[lane]!
        let secure = options.secureStream
        do {
            let connection = try GatewayConnection(endpoint: endpoint, address: address, poller: poller, queue: queue.queue,
                                                   secureStream: endpoint.secure ? { fd throws(GatewayFailure) in
                                                       guard let secure else { throw .tls("no TLS settings for \(endpoint)") }
                                                       return try secure(endpoint, fd)
                                                   } : nil)
            state.connection = connection
            write(call, on: connection, lane: lane)
        } catch {
            transportFailed(call, error, lane: lane, retryable: true)
        }
    }

    private func write(_ call: Call, on connection: GatewayConnection, lane: Lane) {
        var head = "POST \(call.path) HTTP/1.1\r\nHost: \(connection.endpoint.hostHeader)\r\nContent-Type: application/json\r\nContent-Length: \(call.body.count)\r\n"
        if let token, call.path != "/v3/auth/authenticate" { head += "Authorization: \(token)\r\n" }
        head += "\r\n"
        let fresh = connection.exchanges == 0
        connection.send(Array(head.utf8) + call.body) { [weak self, weak connection] event in
            guard let self else { return }
            switch event {
            case .head(let status):
                call.status = status
            case .body(let bytes):
                if let onMessage = call.onMessage, call.status == 200 {
                    let (objects, tooLarge) = call.splitter.feed(bytes)
                    for object in objects {
                        if let value = try? DumpValue.parse(json: object) { onMessage(value) }
                    }
                    if tooLarge {
                        connection?.close()
                        self.transportFailed(call, .malformed("a streamed message over 16 MiB"), lane: lane, retryable: false)
                    }
                } else {
                    call.answer += bytes
                    if call.answer.count > 64 * 1024 * 1024 {
                        connection?.close()
                        self.transportFailed(call, .malformed("an answer over 64 MiB"), lane: lane, retryable: false)
                    }
                }
            case .end:
                self.answered(call, lane: lane)
            case .failed(let failure):
                // A reused keep-alive connection the server had closed: not the endpoint's
                // fault, and the request never reached it.
                let stale = !fresh && failure == .closed && call.status == 0
                self.transportFailed(call, failure, lane: lane, retryable: stale || Self.beforeSending(failure))
            }
        }
    }

    private static func beforeSending(_ failure: GatewayFailure) -> Bool {
        switch failure {
        case .connect, .resolve: return true
        default: return false
        }
    }

    private func answered(_ call: Call, lane: Lane) {
        guard lanes[lane]!.inFlight === call, !call.done else { return }
        let endpoint = lanes[lane]!.connection?.endpoint ?? endpointInUse
        if call.status == 200 {
            if call.onMessage != nil {
                finish(call, .success(.null), lane: lane)
                return
            }
            switch Result(catching: { () throws(DumpValue.ParseError) in try DumpValue.parse(json: call.answer) }) {
            case .success(let value): finish(call, .success(value), lane: lane)
            case .failure(let error): finish(call, .failure(.unreachable(endpoint, .malformed(error.description))), lane: lane)
            }
            return
        }
        let parsed = try? DumpValue.parse(json: call.answer)
        let message = (parsed?["message"]?.stringValue ?? parsed?["error"]?.stringValue).map { Self.oneLine($0) }
            ?? Self.summary(ofBody: call.answer, status: call.status)
        let code = parsed?["code"].flatMap { $0.int64Value }.map(Int.init) ?? -call.status
        let error = EtcdError.server(endpoint, code: code, message: message)
        if error.isInvalidToken, !call.authenticated {
            // The token expired (etcd's simple tokens live 5 minutes): log in again once.
            token = nil
            call.authenticated = true
            let state = lanes[lane]!
            state.inFlight = nil
            state.waiting.prepend(call)
            startNext(lane)
            return
        }
        if error.isTransient { moveEndpoint(from: endpoint) }
        finish(call, .failure(error), lane: lane)
    }

    private func transportFailed(_ call: Call, _ failure: GatewayFailure, lane: Lane, retryable: Bool) {
        let state = lanes[lane]!
        guard state.inFlight === call, !call.done else { return }
        let endpoint = state.connection?.endpoint ?? endpointInUse
        state.connection?.close()
        state.connection = nil
        if case .closed = failure, retryable, call.attempts == 0 {
            // Same endpoint again: only the idle connection was stale.
            call.attempts += 1
            send(call, lane: lane)
            return
        }
        moveEndpoint(from: endpoint)
        call.attempts += 1
        if retryable, call.attempts < options.endpoints.count + 1, call.deadline > .now {
            send(call, lane: lane)
            return
        }
        finish(call, .failure(.unreachable(endpoint, failure)), lane: lane)
    }

    /// The next endpoint in the list, once per failure of the one in use (a second lane
    /// failing on the same endpoint does not move on twice).
    private func moveEndpoint(from failed: EtcdEndpoint) {
        guard options.endpoints.count > 1, endpointInUse == failed else { return }
        endpointIndex = (endpointIndex + 1) % options.endpoints.count
    }

    private func finish(_ call: Call, _ result: Result<DumpValue, EtcdError>, lane: Lane, startNext next: Bool = true) {
        guard !call.done else { return }
        call.done = true
        let state = lanes[lane]!
        if state.inFlight === call {
            state.inFlight = nil
            state.timer?.schedule(at: .distantFuture)
        }
        switch result {
        // A watch is a stream that lasts its whole life: not a call's latency.
        case .success: if call.onMessage == nil { latencies.append(.now - call.started) }
        case .failure(let error):
            callsFailed += 1
            lastFailure = error
        }
        call.completion(result)
        if next { startNext(lane) }
    }

    private func armTimer(_ lane: Lane, at deadline: MonotonicInstant) {
        let state = lanes[lane]!
        if state.timer == nil {
            state.timer = sources.makeTimer(owner: "etcd client", target: "\(lane.name) call deadline", on: queue) { [weak self] in
                self?.deadlinePassed(lane)
            }
        }
        state.timer?.schedule(at: deadline.dispatchTime)
    }

    private func deadlinePassed(_ lane: Lane) {
        let state = lanes[lane]!
        guard let call = state.inFlight else {
            startNext(lane)
            return
        }
        guard call.deadline <= .now else {
            armTimer(lane, at: call.deadline)
            return
        }
        let endpoint = state.connection?.endpoint ?? endpointInUse
        state.connection?.close()
        state.connection = nil
        if call.onMessage != nil {
            // A stream's deadline is its planned end, not a failure of the endpoint.
            finish(call, .success(.null), lane: lane)
            return
        }
        moveEndpoint(from: endpoint)
        finish(call, .failure(.unreachable(endpoint, .timedOut(call.timeout))), lane: lane)
    }
}

/// The last N durations, for a median without keeping every call.
public struct LatencyRing: Sendable {
    private var values: [Duration] = []
    private var next = 0
    public let capacity: Int
    public private(set) var count: UInt64 = 0
    public private(set) var total: Duration = .zero

    public init(capacity: Int) {
        self.capacity = capacity
    }

    public mutating func append(_ value: Duration) {
        count += 1
        total += value
        if values.count < capacity {
            values.append(value)
        } else {
            values[next] = value
            next = (next + 1) % capacity
        }
    }

    public func percentile(_ fraction: Double) -> Duration? {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * fraction + 0.5))]
    }
}

extension DumpValue {
    /// etcd's int64 fields come as JSON strings (proto3 JSON); small ones sometimes as numbers.
    var int64Value: Int64? {
        switch self {
        case .int(let value): return value
        case .string(let text): return Int64(text)
        case .double(let value): return Int64(exactly: value)
        default: return nil
        }
    }
}
