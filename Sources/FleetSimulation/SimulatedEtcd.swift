import WatchkeeperCore

/// etcd as the fleet sees it, on the simulation's clock: one store of keys with revisions,
/// leases that expire when their TTL passes without a renewal (all their keys deleted at one
/// revision, as etcd's lessor does), transactions applied atomically at one revision, and
/// watches that replay history from a revision and then follow it. Without quorum nothing is
/// applied and no lease expires; when quorum returns every lease's TTL starts again (etcd's
/// new leader refreshes them). Hosts reach it through `SimulatedEtcd.Client`, which puts the
/// network (latency, partitions, lost answers) in between.
public final class SimulatedEtcd {
    let loop: SimLoop
    public private(set) var revision: Int64 = 1
    private(set) var kvs: [String: EtcdKeyValue] = [:]
    struct Lease {
        let ttl: Int64
        var expiresAt: Int64
        var keys: Set<String> = []
    }
    private(set) var leases: [Int64: Lease] = [:]
    private var nextLease: Int64 = 0x7000
    /// Every revision's events, for watches that start in the past, and when it was made.
    private(set) var history: [(revision: Int64, events: [EtcdWatchEvent])] = []
    private(set) var revisionTimes: [Int64: Int64] = [:]
    var watchers: [Watcher] = []
    public private(set) var hasQuorum = true
    /// When each lease ended at etcd and how, for the simulation's own checks.
    public private(set) var leaseEnds: [Int64: (at: Int64, expired: Bool)] = [:]
    public private(set) var leaseStarts: [Int64: Int64] = [:]

    final class Watcher {
        let host: Int
        let prefix: String
        let deliver: ([EtcdWatchEvent], Int64) -> Void
        var open = true
        /// Batches waiting for the host's link (a partition stalls a stream; it resumes after).
        var stalled: [([EtcdWatchEvent], Int64)] = []
        var lastDelivery: Int64 = 0

        init(host: Int, prefix: String, deliver: @escaping ([EtcdWatchEvent], Int64) -> Void) {
            self.host = host
            self.prefix = prefix
            self.deliver = deliver
        }
    }

    public init(loop: SimLoop) {
        self.loop = loop
    }

    // MARK: Quorum

    public func loseQuorum() { hasQuorum = false }

    /// A new leader being elected (the old one killed, two members of three left): nothing
    /// is applied meanwhile, but a request that arrives waits for the new leader and is
    /// applied then, as etcd's do (its server waits for a leader within the request's own
    /// timeout: raft's node takes no proposal while it knows no leader); the caller may have
    /// given up by then (an answer lost). A real server may drop a request whose caller gave
    /// up before the leader came; applying it anyway is the harder case, and a request already
    /// in the old leader's log is applied late indeed.
    public private(set) var electing = false
    private var awaitingLeader: [() -> Void] = []

    public func startElection() {
        electing = true
        hasQuorum = false
    }

    public func electLeader() {
        electing = false
        regainQuorum()
        let waiting = awaitingLeader
        awaitingLeader = []
        for request in waiting { request() }
    }

    func awaitLeader(_ request: @escaping () -> Void) { awaitingLeader.append(request) }

    public func regainQuorum() {
        hasQuorum = true
        for id in leases.keys.sorted() {
            leases[id]!.expiresAt = max(leases[id]!.expiresAt, loop.now + leases[id]!.ttl)
            armExpiry(id)
        }
    }

    // MARK: Leases

    func grant(ttl seconds: Int64) -> Int64 {
        nextLease += 1 + Int64(loop.random.int(0...7))
        leases[nextLease] = Lease(ttl: seconds * 1_000_000_000, expiresAt: loop.now + seconds * 1_000_000_000)
        leaseStarts[nextLease] = loop.now
        armExpiry(nextLease)
        return nextLease
    }

    /// The TTL reset, in seconds, or 0 if there is no such lease.
    func keepAlive(_ id: Int64) -> Int64 {
        guard leases[id] != nil else { return 0 }
        leases[id]!.expiresAt = loop.now + leases[id]!.ttl
        armExpiry(id)
        return leases[id]!.ttl / 1_000_000_000
    }

    func revoke(_ id: Int64, expired: Bool = false) {
        guard let lease = leases.removeValue(forKey: id) else { return }
        leaseEnds[id] = (loop.now, expired)
        var events: [EtcdWatchEvent] = []
        for key in lease.keys.sorted() {
            guard let previous = kvs.removeValue(forKey: key) else { continue }
            events.append(EtcdWatchEvent(kind: .delete, kv: EtcdKeyValue(key: key, value: "", createRevision: 0, modRevision: revision + 1, lease: 0),
                                         previous: previous))
        }
        if !events.isEmpty { commit(events) }
    }

    private func armExpiry(_ id: Int64) {
        guard let at = leases[id]?.expiresAt else { return }
        loop.schedule(at: at) { [weak self] in
            guard let self, self.hasQuorum, let lease = self.leases[id], lease.expiresAt <= self.loop.now else { return }
            self.revoke(id, expired: true)
        }
    }

    public func leaseExists(_ id: Int64) -> Bool { leases[id] != nil }

    // MARK: Keys

    enum Failure: Error { case leaseNotFound }

    func range(_ request: EtcdRange) -> EtcdRangeResult {
        var matched: [EtcdKeyValue]
        if request.prefix {
            matched = kvs.values.filter { $0.key.hasPrefix(request.key) }.sorted { $0.key < $1.key }
        } else {
            matched = kvs[request.key].map { [$0] } ?? []
        }
        let count = Int64(matched.count)
        if request.descending { matched.reverse() }
        if request.limit > 0 { matched = Array(matched.prefix(request.limit)) }
        if request.keysOnly {
            matched = matched.map { EtcdKeyValue(key: $0.key, value: "", createRevision: $0.createRevision, modRevision: $0.modRevision, lease: $0.lease) }
        }
        return EtcdRangeResult(kvs: matched, count: count)
    }

    func txn(_ request: EtcdTxn) throws(Failure) -> EtcdTxnResult {
        let holds = request.compare.allSatisfy { compare in
            let kv = kvs[compare.key]
            switch compare.target {
            case .createRevision(let value): return (kv?.createRevision ?? 0) == value
            case .modRevision(let value): return (kv?.modRevision ?? 0) == value
            case .lease(let value): return (kv?.lease ?? 0) == value
            }
        }
        let operations = holds ? request.success : request.failure
        for case .put(_, _, let lease) in operations where lease != 0 && leases[lease] == nil { throw .leaseNotFound }
        var ranges: [[EtcdKeyValue]] = []
        var events: [EtcdWatchEvent] = []
        let next = revision + 1
        for operation in operations {
            switch operation {
            case .range(let key):
                ranges.append(kvs[key].map { [$0] } ?? [])
            case .put(let key, let value, let lease):
                let previous = kvs[key]
                if let old = previous?.lease, old != 0 { leases[old]?.keys.remove(key) }
                let kv = EtcdKeyValue(key: key, value: value, createRevision: previous?.createRevision ?? next, modRevision: next, lease: lease)
                kvs[key] = kv
                if lease != 0 { leases[lease]?.keys.insert(key) }
                events.append(EtcdWatchEvent(kind: .put, kv: kv, previous: previous))
            case .delete(let key):
                guard let previous = kvs.removeValue(forKey: key) else { continue }
                if previous.lease != 0 { leases[previous.lease]?.keys.remove(key) }
                events.append(EtcdWatchEvent(kind: .delete, kv: EtcdKeyValue(key: key, value: "", createRevision: 0, modRevision: next, lease: 0),
                                             previous: previous))
            }
        }
        if !events.isEmpty { commit(events) }
        return EtcdTxnResult(succeeded: holds, revision: revision, ranges: ranges)
    }

    /// One revision: its events go to the history and to every open watch of their prefix.
    private func commit(_ events: [EtcdWatchEvent]) {
        revision += 1
        history.append((revision, events))
        revisionTimes[revision] = loop.now
        for watcher in watchers where watcher.open {
            let mine = events.filter { $0.kv.key.hasPrefix(watcher.prefix) }
            if !mine.isEmpty { send(mine, revision, to: watcher) }
        }
    }

    // MARK: Watches

    /// A watch from `fromRevision` (0: from now): the history since then, then what comes.
    func openWatch(_ watcher: Watcher, fromRevision: Int64) {
        watchers.append(watcher)
        if fromRevision > 0 {
            for entry in history where entry.revision >= fromRevision {
                let mine = entry.events.filter { $0.kv.key.hasPrefix(watcher.prefix) }
                if !mine.isEmpty { send(mine, entry.revision, to: watcher) }
            }
        }
    }

    func closeWatch(_ watcher: Watcher) {
        watcher.open = false
        watcher.stalled.removeAll()
        watchers.removeAll { $0 === watcher }
    }

    /// Down the watcher's stream, in order, after the network's delay; held while its host
    /// is cut off.
    var network: SimNetwork!

    private func send(_ events: [EtcdWatchEvent], _ revision: Int64, to watcher: Watcher) {
        if network.isCut(watcher.host) || !watcher.stalled.isEmpty {
            watcher.stalled.append((events, revision))
            return
        }
        let at = max(loop.now + network.latency(), watcher.lastDelivery)
        watcher.lastDelivery = at
        loop.schedule(at: at) { [weak watcher] in
            guard let watcher, watcher.open else { return }
            watcher.deliver(events, revision)
        }
    }

    /// A host's link is back: its stalled streams go on.
    func resume(host: Int) {
        for watcher in watchers where watcher.host == host && watcher.open && !watcher.stalled.isEmpty {
            let batches = watcher.stalled
            watcher.stalled.removeAll()
            for (events, revision) in batches { send(events, revision, to: watcher) }
        }
    }

    /// Every key, for the end of a run (the simulation's invariants).
    public var allKeys: [EtcdKeyValue] { kvs.values.sorted { $0.key < $1.key } }
}
