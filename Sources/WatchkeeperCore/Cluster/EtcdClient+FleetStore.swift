/// `EtcdClient` as the fleet's `FleetStore`: the typed calls as etcd v3's JSON gateway
/// takes them (keys and values are bytes on the wire, base64 in the JSON; here they are
/// strings, since every key and value the daemon writes is UTF-8).
public struct EtcdKeyValue: Sendable, Equatable {
    public let key: String
    public let value: String
    public let createRevision: Int64
    public let modRevision: Int64
    /// 0 when the key is not bound to a lease.
    public let lease: Int64

    public init(key: String, value: String, createRevision: Int64, modRevision: Int64, lease: Int64) {
        self.key = key
        self.value = value
        self.createRevision = createRevision
        self.modRevision = modRevision
        self.lease = lease
    }

    init?(_ json: DumpValue) {
        guard let key = json["key"]?.stringValue.flatMap(Base64.decodeString) else { return nil }
        self.init(key: key, value: json["value"]?.stringValue.flatMap(Base64.decodeString) ?? "",
                  createRevision: json["create_revision"]?.int64Value ?? 0, modRevision: json["mod_revision"]?.int64Value ?? 0,
                  lease: json["lease"]?.int64Value ?? 0)
    }
}

public struct EtcdWatchEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable { case put, delete }
    public let kind: Kind
    public let kv: EtcdKeyValue
    /// What the key held before (the watch asks for it): how a deleted key is told apart.
    public let previous: EtcdKeyValue?

    public init(kind: Kind, kv: EtcdKeyValue, previous: EtcdKeyValue?) {
        self.kind = kind
        self.kv = kv
        self.previous = previous
    }
}

extension EtcdClient: FleetStore {
    /// The shape `createAll` answers in (the benchmark names it so).
    public typealias CreateAllResult = EtcdCreateAllResult

    public var endpointDescription: String { endpointInUse.description }

    /// The end of the range of every key that starts with `prefix` (etcd's prefix rule:
    /// the last byte that is not 0xff, plus one).
    static func prefixEnd(_ prefix: String) -> [UInt8] {
        var bytes = Array(prefix.utf8)
        while let last = bytes.last {
            if last < 0xff {
                bytes[bytes.count - 1] = last + 1
                return bytes
            }
            bytes.removeLast()
        }
        return [0]
    }

    private static func key(_ text: String) -> DumpValue { .string(Base64.encode(text)) }

    static func json(_ compare: EtcdCompare) -> DumpValue {
        let (target, field, value): (String, String, Int64)
        switch compare.target {
        case .createRevision(let revision): (target, field, value) = ("CREATE", "create_revision", revision)
        case .modRevision(let revision): (target, field, value) = ("MOD", "mod_revision", revision)
        case .lease(let lease): (target, field, value) = ("LEASE", "lease", lease)
        }
        return .object([DumpField("target", .string(target)), DumpField("key", key(compare.key)), DumpField(field, .string(String(value))),
                        DumpField("result", .string("EQUAL"))])
    }

    static func json(_ operation: EtcdOperation) -> DumpValue {
        switch operation {
        case .put(let key, let value, let lease):
            var fields = [DumpField("key", Self.key(key)), DumpField("value", .string(Base64.encode(value)))]
            if lease != 0 { fields.append(DumpField("lease", .string(String(lease)))) }
            return .object([DumpField("request_put", .object(fields))])
        case .delete(let key):
            return .object([DumpField("request_delete_range", .object([DumpField("key", Self.key(key))]))])
        case .range(let key):
            return .object([DumpField("request_range", .object([DumpField("key", Self.key(key))]))])
        }
    }

    public func range(_ request: EtcdRange, timeout: Duration, completion: @escaping (Result<EtcdRangeResult, EtcdError>) -> Void) {
        var fields = [DumpField("key", Self.key(request.key))]
        if request.prefix { fields.append(DumpField("range_end", .string(Base64.encode(Self.prefixEnd(request.key))))) }
        if request.limit > 0 { fields.append(DumpField("limit", .string(String(request.limit)))) }
        if request.keysOnly { fields.append(DumpField("keys_only", .bool(true))) }
        if request.descending {
            fields.append(DumpField("sort_order", .string("DESCEND")))
            fields.append(DumpField("sort_target", .string("KEY")))
        }
        call("/v3/kv/range", .object(fields), timeout: timeout) { result in
            completion(result.map { answer in
                EtcdRangeResult(kvs: (answer["kvs"]?.arrayValue ?? []).compactMap(EtcdKeyValue.init), count: answer["count"]?.int64Value ?? 0)
            })
        }
    }

    public func txn(_ request: EtcdTxn, urgent: Bool, timeout: Duration, completion: @escaping (Result<EtcdTxnResult, EtcdError>) -> Void) {
        var fields = [DumpField("compare", .array(request.compare.map(Self.json))), DumpField("success", .array(request.success.map(Self.json)))]
        if !request.failure.isEmpty { fields.append(DumpField("failure", .array(request.failure.map(Self.json)))) }
        call("/v3/kv/txn", .object(fields), lane: urgent ? .records : nil, timeout: timeout) { result in
            completion(result.map { answer in
                // Fields at their zero value are left out: a failed compare has no "succeeded".
                let ranges = (answer["responses"]?.arrayValue ?? []).compactMap { response -> [EtcdKeyValue]? in
                    guard let range = response["response_range"] else { return nil }
                    return (range["kvs"]?.arrayValue ?? []).compactMap(EtcdKeyValue.init)
                }
                return EtcdTxnResult(succeeded: answer["succeeded"] == .bool(true), revision: answer["header"]?["revision"]?.int64Value ?? 0,
                                     ranges: ranges)
            })
        }
    }

    public func grantLease(ttl: Duration, timeout: Duration, completion: @escaping (Result<EtcdLeaseGrant, EtcdError>) -> Void) {
        let seconds = max(1, ttl.nanosecondsClamped / 1_000_000_000)
        call("/v3/lease/grant", .object([DumpField("TTL", .string(String(seconds)))]), lane: .lease, timeout: timeout) { result in
            completion(result.flatMap { answer in
                guard let id = answer["ID"]?.int64Value, id != 0 else {
                    return .failure(.server(self.endpointInUse, code: 0, message: answer["error"]?.stringValue ?? "no lease granted"))
                }
                return .success((id, answer["TTL"]?.int64Value ?? seconds))
            })
        }
    }

    public func keepAlive(lease: Int64, timeout: Duration, completion: @escaping (Result<Int64, EtcdError>) -> Void) {
        call("/v3/lease/keepalive", .object([DumpField("ID", .string(String(lease)))]), lane: .lease, timeout: timeout) { result in
            completion(result.map { answer in
                // A stream endpoint answers {"result": {...}}; take either form.
                let body = answer["result"] ?? answer
                return body["TTL"]?.int64Value ?? 0
            })
        }
    }

    public func revokeLease(_ lease: Int64, timeout: Duration, completion: @escaping (Result<Void, EtcdError>) -> Void) {
        call("/v3/lease/revoke", .object([DumpField("ID", .string(String(lease)))]), lane: .lease, timeout: timeout) { result in
            completion(result.map { _ in () })
        }
    }

    public func watch(prefix: String, fromRevision revision: Int64, timeout: Duration,
                      onEvents: @escaping ([EtcdWatchEvent], Int64) -> Void, onCompacted: @escaping (Int64) -> Void,
                      completion: @escaping (Result<Void, EtcdError>) -> Void) {
        var create = [DumpField("key", Self.key(prefix)), DumpField("range_end", .string(Base64.encode(Self.prefixEnd(prefix))))]
        create.append(DumpField("prev_kv", .bool(true)))
        if revision > 0 { create.append(DumpField("start_revision", .string(String(revision)))) }
        stream("/v3/watch", .object([DumpField("create_request", .object(create))]), timeout: timeout, onMessage: { message in
            let result = message["result"] ?? message
            if let compacted = result["compact_revision"]?.int64Value, compacted > 0 {
                onCompacted(compacted)
                return
            }
            let headerRevision = result["header"]?["revision"]?.int64Value ?? 0
            let events = (result["events"]?.arrayValue ?? []).compactMap { event -> EtcdWatchEvent? in
                guard let kv = event["kv"].flatMap(EtcdKeyValue.init) else { return nil }
                return EtcdWatchEvent(kind: event["type"]?.stringValue == "DELETE" ? .delete : .put, kv: kv,
                                      previous: event["prev_kv"].flatMap(EtcdKeyValue.init))
            }
            onEvents(events, headerRevision)
        }, completion: { result in completion(result.map { _ in () }) })
    }

    public func endWatch() {
        reset(.watch)
    }
}
