/// The seam between the fleet's logic and the world (issue 35), defined here and nowhere
/// else: `FleetStore` is etcd as the fleet uses it, `FleetClock` is time and timers, and
/// `FleetQueue` is a turn on an owner's queue. In the daemon they are `EtcdClient` (etcd's
/// JSON gateway), `DispatchFleetClock` (the monotonic and wall clocks, registered timers on
/// the cluster queue) and `SubsystemQueue`; in the deterministic simulation
/// (Sources/FleetSimulation) a simulated etcd, a simulated clock and the simulation's event
/// loop. `FleetMember` and everything that decides a claim, a fence or a record see only
/// these protocols, so the simulation runs the daemon's own code.

/// etcd's calls as the fleet makes them: one range, one transaction, the lease's grant,
/// renewal and revocation, one watch of a prefix. Every completion runs on the caller's
/// turn (the member's queue). Calls fail with an `EtcdError` when no answer came in
/// `timeout`: a transaction may still have been applied (its answer was lost).
public protocol FleetStore: AnyObject {
    /// The endpoint calls go to now, for the log and the dump.
    var endpointDescription: String { get }
    func range(_ request: EtcdRange, timeout: Duration, completion: @escaping (Result<EtcdRangeResult, EtcdError>) -> Void)
    /// `urgent`: a record of a run's end, which must not wait behind claims.
    func txn(_ request: EtcdTxn, urgent: Bool, timeout: Duration, completion: @escaping (Result<EtcdTxnResult, EtcdError>) -> Void)
    func grantLease(ttl: Duration, timeout: Duration, completion: @escaping (Result<EtcdLeaseGrant, EtcdError>) -> Void)
    /// One renewal: the TTL etcd reset the lease to, or 0 if it no longer has the lease.
    func keepAlive(lease: Int64, timeout: Duration, completion: @escaping (Result<Int64, EtcdError>) -> Void)
    func revokeLease(_ lease: Int64, timeout: Duration, completion: @escaping (Result<Void, EtcdError>) -> Void)
    /// Every change under `prefix` from `fromRevision` (0: from now) until `timeout`, each
    /// batch with the revision it brings the watcher to (every event of one revision comes in
    /// one batch); a start revision already compacted away comes as `onCompacted`.
    func watch(prefix: String, fromRevision: Int64, timeout: Duration, onEvents: @escaping ([EtcdWatchEvent], Int64) -> Void,
               onCompacted: @escaping (Int64) -> Void, completion: @escaping (Result<Void, EtcdError>) -> Void)
    /// Ends the watch now (its completion still comes).
    func endWatch()
    /// Fails every call in flight and closes every connection.
    func close()
}

/// Now, on both clocks, and timers that fire on the owner's turn.
public protocol FleetClock: AnyObject {
    var now: MonotonicInstant { get }
    var wallNow: WallTime { get }
    func makeTimer(target: String, _ handler: @escaping () -> Void) -> any FleetTimer
}

public protocol FleetTimer: AnyObject {
    /// Fires once at `deadline` (an earlier schedule is replaced).
    func schedule(at deadline: MonotonicInstant)
    func cancel()
}

/// A turn on an owner's serial queue: where the fleet's answers and news are delivered.
public protocol FleetQueue: AnyObject, Sendable {
    func async(_ work: @escaping @Sendable () -> Void)
}

extension SubsystemQueue: FleetQueue {}

// MARK: The values of the calls

/// One key or every key under a prefix (etcd's RangeRequest).
public struct EtcdRange: Sendable, Equatable {
    public var key: String
    public var prefix: Bool
    /// At most this many keys (0: all).
    public var limit: Int
    public var keysOnly: Bool
    /// Newest key first.
    public var descending: Bool

    public init(key: String, prefix: Bool = false, limit: Int = 0, keysOnly: Bool = false, descending: Bool = false) {
        self.key = key
        self.prefix = prefix
        self.limit = limit
        self.keysOnly = keysOnly
        self.descending = descending
    }
}

public struct EtcdRangeResult: Sendable, Equatable {
    public var kvs: [EtcdKeyValue]
    /// Every key the range covers, however many `limit` returned.
    public var count: Int64

    public init(kvs: [EtcdKeyValue], count: Int64) {
        self.kvs = kvs
        self.count = count
    }
}

/// One compare of a transaction: a key's create revision, last modification or lease
/// equals a value (a key that does not exist has 0 for all three).
public struct EtcdCompare: Sendable, Equatable {
    public enum Target: Sendable, Equatable {
        case createRevision(Int64)
        case modRevision(Int64)
        case lease(Int64)
    }

    public var key: String
    public var target: Target

    public init(_ key: String, _ target: Target) {
        self.key = key
        self.target = target
    }
}

public enum EtcdOperation: Sendable, Equatable {
    /// Bound to `lease`, or to nothing when it is 0.
    case put(key: String, value: String, lease: Int64)
    case delete(key: String)
    case range(key: String)
}

/// etcd's Txn: if every compare holds, `success`, else `failure`, atomically, at one revision.
public struct EtcdTxn: Sendable, Equatable {
    public var compare: [EtcdCompare]
    public var success: [EtcdOperation]
    public var failure: [EtcdOperation]

    public init(compare: [EtcdCompare], success: [EtcdOperation], failure: [EtcdOperation] = []) {
        self.compare = compare
        self.success = success
        self.failure = failure
    }
}

public struct EtcdTxnResult: Sendable, Equatable {
    public var succeeded: Bool
    /// The store's revision after the transaction.
    public var revision: Int64
    /// What each `range` of the branch taken found, in order.
    public var ranges: [[EtcdKeyValue]]

    public init(succeeded: Bool, revision: Int64, ranges: [[EtcdKeyValue]]) {
        self.succeeded = succeeded
        self.revision = revision
        self.ranges = ranges
    }
}

/// A granted lease: its ID and the TTL etcd gave it, in seconds.
public typealias EtcdLeaseGrant = (id: Int64, ttl: Int64)
