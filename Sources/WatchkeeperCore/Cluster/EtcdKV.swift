/// The handful of etcd v3 calls the fleet needs, as typed values over `EtcdClient.call`:
/// ranges, a create-if-absent transaction, compare-and-put, deletes, leases and watches.
/// Keys and values are bytes on the wire (base64 in the gateway's JSON); here they are
/// strings, since every key and value the daemon writes is UTF-8.
public struct EtcdKeyValue: Sendable, Equatable {
    public let key: String
    public let value: String
    public let createRevision: Int64
    public let modRevision: Int64
    /// 0 when the key is not bound to a lease.
    public let lease: Int64

    init?(_ json: DumpValue) {
        guard let key = json["key"]?.stringValue.flatMap(Base64.decodeString) else { return nil }
        self.key = key
        value = json["value"]?.stringValue.flatMap(Base64.decodeString) ?? ""
        createRevision = json["create_revision"]?.int64Value ?? 0
        modRevision = json["mod_revision"]?.int64Value ?? 0
        lease = json["lease"]?.int64Value ?? 0
    }
}

public struct EtcdWatchEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable { case put, delete }
    public let kind: Kind
    public let kv: EtcdKeyValue
    /// What the key held before (the watch asks for it): how a deleted key is told apart.
    public let previous: EtcdKeyValue?
}

public enum EtcdCreateResult: Sendable, Equatable {
    /// The key was absent and is now ours, at this revision.
    case created(revision: Int64)
    /// Someone holds it: what it holds.
    case exists(EtcdKeyValue)
}

extension EtcdClient {
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

    /// A transaction's compare: `key`'s `target` (CREATE, MOD, LEASE) equals `value`.
    private static func compare(_ key: String, _ target: String, _ field: String, _ value: Int64) -> DumpValue {
        .object([DumpField("target", .string(target)), DumpField("key", Self.key(key)), DumpField(field, .string(String(value))),
                 DumpField("result", .string("EQUAL"))])
    }

    /// A transaction's put, bound to `lease` unless it is 0.
    private static func put(_ key: String, _ value: String, lease: Int64 = 0) -> DumpValue {
        var fields = [DumpField("key", Self.key(key)), DumpField("value", .string(Base64.encode(value)))]
        if lease != 0 { fields.append(DumpField("lease", .string(String(lease)))) }
        return .object([DumpField("request_put", .object(fields))])
    }

    private static func deleteOne(_ key: String) -> DumpValue {
        .object([DumpField("request_delete_range", .object([DumpField("key", Self.key(key))]))])
    }

    private static func txn(compare: [DumpValue], success: [DumpValue], failure: [DumpValue] = []) -> DumpValue {
        var fields = [DumpField("compare", .array(compare)), DumpField("success", .array(success))]
        if !failure.isEmpty { fields.append(DumpField("failure", .array(failure))) }
        return .object(fields)
    }

    public func get(_ key: String, timeout: Duration, completion: @escaping (Result<EtcdKeyValue?, EtcdError>) -> Void) {
        call("/v3/kv/range", .object([DumpField("key", Self.key(key))]), timeout: timeout) { result in
            completion(result.map { answer in answer["kvs"]?.arrayValue?.first.flatMap(EtcdKeyValue.init) })
        }
    }

    /// Keys under `prefix`, sorted by key, at most `limit` (0: all); with `keysOnly`, values
    /// are empty. Also the count of all keys under the prefix.
    public func list(prefix: String, limit: Int = 0, keysOnly: Bool = false, descending: Bool = false, timeout: Duration,
                     completion: @escaping (Result<(kvs: [EtcdKeyValue], count: Int64), EtcdError>) -> Void) {
        var fields = [DumpField("key", Self.key(prefix)), DumpField("range_end", .string(Base64.encode(Self.prefixEnd(prefix))))]
        if limit > 0 { fields.append(DumpField("limit", .string(String(limit)))) }
        if keysOnly { fields.append(DumpField("keys_only", .bool(true))) }
        if descending {
            fields.append(DumpField("sort_order", .string("DESCEND")))
            fields.append(DumpField("sort_target", .string("KEY")))
        }
        call("/v3/kv/range", .object(fields), timeout: timeout) { result in
            completion(result.map { answer in
                ((answer["kvs"]?.arrayValue ?? []).compactMap(EtcdKeyValue.init), answer["count"]?.int64Value ?? 0)
            })
        }
    }

    /// Creates `key` only if it does not exist (its create revision is 0), bound to
    /// `lease` (0: none); otherwise reads what is there. One transaction: the race between
    /// hosts is decided by etcd.
    public func create(_ key: String, value: String, lease: Int64, timeout: Duration,
                       completion: @escaping (Result<EtcdCreateResult, EtcdError>) -> Void) {
        createAll([(key, value)], lease: lease, timeout: timeout) { result in
            completion(result.flatMap { outcome in
                switch outcome {
                case .created(let revision): return .success(.created(revision: revision))
                case .exists(let found):
                    guard let kv = found.first else { return .failure(.server(self.endpointInUse, code: 10, message: "the key vanished during the claim; retry")) }
                    return .success(.exists(kv))
                }
            })
        }
    }

    public enum CreateAllResult: Sendable, Equatable {
        case created(revision: Int64)
        /// Those of the keys that exist (possibly none, if they vanished in between).
        case exists([EtcdKeyValue])
    }

    /// Creates every key only if none of them exists, all bound to `lease`; otherwise
    /// reads those that exist. One transaction.
    public func createAll(_ entries: [(key: String, value: String)], lease: Int64, timeout: Duration,
                          completion: @escaping (Result<CreateAllResult, EtcdError>) -> Void) {
        let body = Self.txn(compare: entries.map { Self.compare($0.key, "CREATE", "create_revision", 0) },
                            success: entries.map { Self.put($0.key, $0.value, lease: lease) },
                            failure: entries.map { .object([DumpField("request_range", .object([DumpField("key", Self.key($0.key))]))]) })
        call("/v3/kv/txn", body, timeout: timeout) { result in
            completion(result.map { answer in
                if answer["succeeded"] == .bool(true) {
                    return .created(revision: answer["header"]?["revision"]?.int64Value ?? 0)
                }
                let found = (answer["responses"]?.arrayValue ?? []).compactMap { response in
                    response["response_range"]?["kvs"]?.arrayValue?.first.flatMap(EtcdKeyValue.init)
                }
                return .exists(found)
            })
        }
    }

    /// If `key` is still at `modRevision`: runs `puts` (each bound to nothing) and deletes
    /// `deletes`. False if the key changed or went since.
    public func commit(ifKey key: String, atModRevision modRevision: Int64, puts: [(key: String, value: String)], deletes: [String],
                       timeout: Duration, completion: @escaping (Result<Bool, EtcdError>) -> Void) {
        guarded(Self.compare(key, "MOD", "mod_revision", modRevision), puts.map { Self.put($0.key, $0.value) } + deletes.map(Self.deleteOne),
                timeout: timeout) { completion($0.map { $0 != nil }) }
    }

    /// Puts `value` bound to `lease` if `key` is still at `modRevision`: the revision
    /// written, or nil if the key changed or went since.
    public func takeOver(_ key: String, value: String, ifModRevision modRevision: Int64, lease: Int64, timeout: Duration,
                         completion: @escaping (Result<Int64?, EtcdError>) -> Void) {
        guarded(Self.compare(key, "MOD", "mod_revision", modRevision), [Self.put(key, value, lease: lease)], timeout: timeout, completion: completion)
    }

    /// Deletes `key` if it is bound to no lease (an ended record, not a live claim).
    public func deleteUnleased(_ key: String, timeout: Duration, completion: @escaping (Result<Bool, EtcdError>) -> Void) {
        guarded(Self.compare(key, "LEASE", "lease", 0), [Self.deleteOne(key)], timeout: timeout) { completion($0.map { $0 != nil }) }
    }

    /// Deletes `key` only if its last change is `modRevision`.
    public func delete(_ key: String, ifModRevision modRevision: Int64, timeout: Duration, completion: @escaping (Result<Bool, EtcdError>) -> Void) {
        guarded(Self.compare(key, "MOD", "mod_revision", modRevision), [Self.deleteOne(key)], timeout: timeout) { completion($0.map { $0 != nil }) }
    }

    /// One compare, then `operations` if it holds: the revision the transaction made, or
    /// nil if the compare failed.
    private func guarded(_ compare: DumpValue, _ operations: [DumpValue], timeout: Duration,
                         completion: @escaping (Result<Int64?, EtcdError>) -> Void) {
        call("/v3/kv/txn", Self.txn(compare: [compare], success: operations), timeout: timeout) { result in
            completion(result.map { $0["succeeded"] == .bool(true) ? ($0["header"]?["revision"]?.int64Value ?? 0) : nil })
        }
    }

    public func grantLease(ttl: Duration, timeout: Duration, completion: @escaping (Result<(id: Int64, ttl: Int64), EtcdError>) -> Void) {
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

    /// One renewal: the TTL etcd reset the lease to, or 0 if the lease is gone.
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

    /// Watches every key under `prefix` from `revision` (0: from now) until `timeout`;
    /// `onEvents` gets each batch with the revision it brings the watcher to. A compacted
    /// start revision comes as `onCompacted` (the caller lists again).
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
}
