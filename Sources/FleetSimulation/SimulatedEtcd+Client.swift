import WatchkeeperCore

/// The wires between the hosts and etcd: a delay each way (now and then a slow one), an
/// answer now and then lost after etcd applied the call, and partitions per host (nothing
/// goes either way until it heals; an open watch stream stalls and resumes, as TCP does).
public final class SimNetwork {
    let loop: SimLoop
    private var cut: Set<Int> = []
    /// Probability that an answer is lost after the call was applied.
    public var lostAnswers = 0.01
    /// Probability of a slow leg (tens to hundreds of milliseconds).
    public var slowLegs = 0.02
    public private(set) var answersLost = 0

    init(loop: SimLoop) {
        self.loop = loop
    }

    func isCut(_ host: Int) -> Bool { cut.contains(host) }
    func cut(_ host: Int) { cut.insert(host) }
    func heal(_ host: Int) { cut.remove(host) }

    /// One leg's delay, in nanoseconds.
    func latency() -> Int64 {
        loop.random.chance(slowLegs) ? loop.random.nanos(0.03...0.6) : loop.random.nanos(0.0002...0.003)
    }

    func loseAnswer() -> Bool {
        guard loop.random.chance(lostAnswers) else { return false }
        answersLost += 1
        return true
    }
}

extension SimulatedEtcd {
    /// One host's view of etcd, as the fleet's `FleetStore`: each call crosses the network,
    /// is applied when it arrives (if it arrives and etcd has quorum), and is answered, or
    /// fails at its deadline, on the host's cluster turn. Calls of a crashed incarnation
    /// never answer.
    public final class Client: FleetStore {
        let etcd: SimulatedEtcd
        let host: Int
        let alive: () -> Bool
        /// The host's cluster queue: where answers are delivered.
        let turn: SimQueue
        private var closed = false
        /// Calls not answered yet: `close()` fails them, as the daemon's client does.
        private var inFlight: [Int: (EtcdError) -> Void] = [:]
        private var nextCall = 0
        private var watcher: Watcher?
        private var watchDone: ((Result<Void, EtcdError>) -> Void)?
        static let endpoint = try! EtcdEndpoint.parse("http://etcd.sim:2379")

        init(etcd: SimulatedEtcd, host: Int, turn: SimQueue, alive: @escaping () -> Bool) {
            self.etcd = etcd
            self.host = host
            self.turn = turn
            self.alive = alive
        }

        public var endpointDescription: String { Self.endpoint.description }

        private var loop: SimLoop { etcd.loop }
        private var network: SimNetwork { etcd.network }

        /// Sends `apply` across the network; its answer comes back across it, or the call
        /// fails at `timeout`. `apply` runs at etcd when (if) the request arrives.
        private func call<T>(timeout: Duration, _ apply: @escaping () -> Result<T, EtcdError>, completion: @escaping (Result<T, EtcdError>) -> Void) {
            guard !closed else { return turn.enqueue { completion(.failure(.closed)) } }
            var answered = false
            nextCall += 1
            let id = nextCall
            let finish: (Result<T, EtcdError>) -> Void = { [weak self] result in
                guard let self, !answered, self.alive() else { return }
                answered = true
                self.inFlight[id] = nil
                completion(result)
            }
            inFlight[id] = { finish(.failure($0)) }
            let deadline = loop.now + Int64(timeout.nanosecondsClamped)
            // The call's deadline timer (a turn of the cluster queue of its own), armed when
            // the answer will not come in time: the request or the answer goes nowhere.
            let timedOut: () -> Void = { [weak self] in
                self?.loop.schedule(at: deadline) { finish(.failure(.unreachable(Self.endpoint, .timedOut(timeout)))) }
            }
            let there = network.latency(), back = network.latency()
            guard !network.isCut(host) else { return timedOut() }
            if loop.now + there + back >= deadline { timedOut() }
            let arrived: () -> Void = { [weak self] in
                guard let self else { return }
                let result = apply()
                guard !self.network.loseAnswer() else { return timedOut() }
                guard self.loop.now + back < deadline else { return timedOut() }
                self.loop.after(back) { [weak self] in
                    // The answer's arrival is a turn of the cluster queue (the connection's source).
                    guard let self, !self.network.isCut(self.host) else { return timedOut() }
                    finish(result)
                }
            }
            loop.after(there) { [weak self] in
                guard let self, !self.network.isCut(self.host) else { return timedOut() }
                if self.etcd.electing {
                    timedOut()
                    return self.etcd.awaitLeader(arrived)
                }
                guard self.etcd.hasQuorum else { return timedOut() }
                arrived()
            }
        }

        public func range(_ request: EtcdRange, timeout: Duration, completion: @escaping (Result<EtcdRangeResult, EtcdError>) -> Void) {
            call(timeout: timeout, { [etcd] in .success(etcd.range(request)) }, completion: completion)
        }

        public func txn(_ request: EtcdTxn, urgent: Bool, timeout: Duration, completion: @escaping (Result<EtcdTxnResult, EtcdError>) -> Void) {
            call(timeout: timeout, { [etcd] in
                do throws(Failure) {
                    return .success(try etcd.txn(request))
                } catch {
                    return .failure(.server(Self.endpoint, code: 5, message: "etcdserver: requested lease not found"))
                }
            }, completion: completion)
        }

        public func grantLease(ttl: Duration, timeout: Duration, completion: @escaping (Result<EtcdLeaseGrant, EtcdError>) -> Void) {
            let seconds = max(1, ttl.nanosecondsClamped / 1_000_000_000)
            call(timeout: timeout, { [etcd] in .success((etcd.grant(ttl: seconds), seconds)) }, completion: completion)
        }

        public func keepAlive(lease: Int64, timeout: Duration, completion: @escaping (Result<Int64, EtcdError>) -> Void) {
            call(timeout: timeout, { [etcd] in .success(etcd.keepAlive(lease)) }, completion: completion)
        }

        public func revokeLease(_ lease: Int64, timeout: Duration, completion: @escaping (Result<Void, EtcdError>) -> Void) {
            call(timeout: timeout, { [etcd] in
                etcd.revoke(lease)
                return .success(())
            }, completion: completion)
        }

        /// A watch: opened when the request reaches etcd; a cut host's request fails after a
        /// connect timeout; the stream ends (successfully) at `timeout`, as the daemon's does.
        public func watch(prefix: String, fromRevision: Int64, timeout: Duration, onEvents: @escaping ([EtcdWatchEvent], Int64) -> Void,
                          onCompacted: @escaping (Int64) -> Void, completion: @escaping (Result<Void, EtcdError>) -> Void) {
            guard !closed else { return turn.enqueue { completion(.failure(.closed)) } }
            let watcher = Watcher(host: host, prefix: prefix) { [weak self] events, revision in
                guard let self, self.alive() else { return }
                onEvents(events, revision)
            }
            self.watcher = watcher
            watchDone = completion
            guard !network.isCut(host), etcd.hasQuorum || etcd.electing else {
                loop.after(loop.random.nanos(0.5...3)) { [weak self, weak watcher] in
                    guard let self, let watcher, self.watcher === watcher else { return }
                    self.endStream(.failure(.unreachable(Self.endpoint, .timedOut(.seconds(3)))))
                }
                return
            }
            loop.after(network.latency()) { [weak self, weak watcher] in
                guard let self, let watcher, self.watcher === watcher, self.alive() else { return }
                self.etcd.openWatch(watcher, fromRevision: fromRevision)
            }
            loop.after(Int64(timeout.nanosecondsClamped)) { [weak self, weak watcher] in
                guard let self, let watcher, self.watcher === watcher else { return }
                self.endStream(.success(()))
            }
        }

        private func endStream(_ result: Result<Void, EtcdError>) {
            guard let watcher else { return }
            etcd.closeWatch(watcher)
            self.watcher = nil
            let done = watchDone
            watchDone = nil
            if alive() { turn.enqueue { done?(result) } }
        }

        public func endWatch() {
            guard let watcher else { return }
            etcd.closeWatch(watcher)
            self.watcher = nil
            let done = watchDone
            watchDone = nil
            done?(.failure(.unreachable(Self.endpoint, .closed)))
        }

        public func close() {
            closed = true
            let calls = inFlight.sorted { $0.key < $1.key }.map(\.value)
            inFlight.removeAll()
            for fail in calls { fail(.closed) }
            if let watcher { etcd.closeWatch(watcher) }
            watcher = nil
            watchDone = nil
        }

        /// The incarnation died: its watch goes with it.
        func drop() {
            close()
        }
    }
}
