/// The shapes of the fleet's calls, built on `FleetStore.range` and `.txn` once for every
/// store: the daemon's etcd client and the simulation's etcd run the same transactions.
public enum EtcdCreateAllResult: Sendable, Equatable {
    case created(revision: Int64)
    /// Those of the keys that exist (possibly none, if they vanished in between).
    case exists([EtcdKeyValue])
}

extension FleetStore {
    public func get(_ key: String, timeout: Duration, completion: @escaping (Result<EtcdKeyValue?, EtcdError>) -> Void) {
        range(EtcdRange(key: key), timeout: timeout) { completion($0.map(\.kvs.first)) }
    }

    /// Keys under `prefix`, sorted by key, at most `limit` (0: all); with `keysOnly`, values
    /// are empty. Also the count of all keys under the prefix.
    public func list(prefix: String, limit: Int = 0, keysOnly: Bool = false, descending: Bool = false, timeout: Duration,
                     completion: @escaping (Result<EtcdRangeResult, EtcdError>) -> Void) {
        range(EtcdRange(key: prefix, prefix: true, limit: limit, keysOnly: keysOnly, descending: descending), timeout: timeout, completion: completion)
    }

    /// Creates every key only if none of them exists, all bound to `lease` (0: none);
    /// otherwise reads those that exist. One transaction: the race between hosts is etcd's.
    public func createAll(_ entries: [(key: String, value: String)], lease: Int64, timeout: Duration,
                          completion: @escaping (Result<EtcdCreateAllResult, EtcdError>) -> Void) {
        let request = EtcdTxn(compare: entries.map { EtcdCompare($0.key, .createRevision(0)) },
                              success: entries.map { .put(key: $0.key, value: $0.value, lease: lease) },
                              failure: entries.map { .range(key: $0.key) })
        txn(request, urgent: false, timeout: timeout) { result in
            completion(result.map { answer in
                answer.succeeded ? .created(revision: answer.revision) : .exists(answer.ranges.compactMap(\.first))
            })
        }
    }

    /// `key` if absent, else what it holds (`createAll` of one key).
    public func create(_ key: String, value: String, lease: Int64, timeout: Duration,
                       completion: @escaping (Result<EtcdCreateAllResult, EtcdError>) -> Void) {
        createAll([(key, value)], lease: lease, timeout: timeout, completion: completion)
    }

    /// If `key` is still at `modRevision`: runs `puts` (each bound to `lease`, 0: nothing)
    /// and deletes `deletes`. False if the key changed or went since.
    public func commit(ifKey key: String, atModRevision modRevision: Int64, puts: [(key: String, value: String)], lease: Int64 = 0,
                       deletes: [String], urgent: Bool = false, timeout: Duration, completion: @escaping (Result<Bool, EtcdError>) -> Void) {
        let operations = puts.map { EtcdOperation.put(key: $0.key, value: $0.value, lease: lease) } + deletes.map { .delete(key: $0) }
        txn(EtcdTxn(compare: [EtcdCompare(key, .modRevision(modRevision))], success: operations), urgent: urgent, timeout: timeout) {
            completion($0.map(\.succeeded))
        }
    }

    /// Puts `entries` bound to `lease` if `key` is still at `modRevision` and every key of
    /// `absent` does not exist: the revision written, or what the keys hold now.
    public func claimOver(_ key: String, atModRevision modRevision: Int64, entries: [(key: String, value: String)], absent: [String],
                          lease: Int64, timeout: Duration, completion: @escaping (Result<EtcdCreateAllResult, EtcdError>) -> Void) {
        let request = EtcdTxn(compare: [EtcdCompare(key, .modRevision(modRevision))] + absent.map { EtcdCompare($0, .createRevision(0)) },
                              success: entries.map { .put(key: $0.key, value: $0.value, lease: lease) },
                              failure: entries.map { .range(key: $0.key) })
        txn(request, urgent: false, timeout: timeout) { result in
            completion(result.map { answer in
                answer.succeeded ? .created(revision: answer.revision) : .exists(answer.ranges.compactMap(\.first))
            })
        }
    }

    /// Deletes `key` if it is bound to no lease (an ended record, not a live claim).
    public func deleteUnleased(_ key: String, timeout: Duration, completion: @escaping (Result<Bool, EtcdError>) -> Void) {
        txn(EtcdTxn(compare: [EtcdCompare(key, .lease(0))], success: [.delete(key: key)]), urgent: false, timeout: timeout) {
            completion($0.map(\.succeeded))
        }
    }

    /// Deletes `key` (and `also`) only if `key`'s last change is `modRevision`.
    public func delete(_ key: String, ifModRevision modRevision: Int64, also: [String] = [], urgent: Bool = false, timeout: Duration,
                       completion: @escaping (Result<Bool, EtcdError>) -> Void) {
        txn(EtcdTxn(compare: [EtcdCompare(key, .modRevision(modRevision))], success: ([key] + also).map { .delete(key: $0) }),
            urgent: urgent, timeout: timeout) { completion($0.map(\.succeeded)) }
    }
}
