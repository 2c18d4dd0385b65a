/// Who gets a connection slot, which connection makes room for it, and which connections
/// go when a bound is passed (a deadline of their own, or the unread replies of all
/// clients together): a pure value over what the server knows of each connection, so that
/// every rule is a row of a table (ControlAdmissionTests). Root always has a way in: the
/// last `reservedForRoot` slots are its own, no per-uid limit holds it, and its
/// connections make room only for root. Who may connect at all is `ControlAccess`'s.
struct ControlAdmission {
    /// A connection as these rules see it.
    struct Client: Equatable {
        let id: UInt64
        let uid: UInt32
        /// Nothing queued, in flight or owed.
        var isIdle = true
        var lastActivity: MonotonicInstant
        /// Since when the call it is sending has not ended with its NUL.
        var partialSince: MonotonicInstant?
        /// Since when a reply waits for the client to read it.
        var writeBlockedSince: MonotonicInstant?
        var pendingReplyBytes = 0
        /// It said its last word and everything it was owed is written.
        var closedAndDone = false
    }

    enum Decision: Equatable {
        case admit
        /// At the connection limit, `id` goes to make room.
        case admitEvicting(id: UInt64, Eviction)
        case refuse(Refusal)
    }

    enum Refusal: Equatable {
        /// The uid holds `maxConnectionsPerUID` already.
        case perUIDLimit
        /// Every slot it may use is taken and none may make room.
        case connectionLimit
    }

    /// Why a connection made room, in the order they are picked.
    enum Eviction: String, Equatable {
        case idle
        case halfSent = "half-sent call"
        case replyNotRead = "reply not read"
    }

    /// Why the sweep ends a connection, in the order they are checked.
    enum Expiry: Equatable {
        case requestTimeout
        case writeTimeout
        case idleTimeout
        /// Nothing is left to do for it: its close was only waiting for its last reply.
        case done
    }

    let limits: ControlLimits

    /// A peer that passed ControlAccess, with these connections open.
    func admit(uid: UInt32, among clients: [Client]) -> Decision {
        let isRoot = uid == 0
        if !isRoot, clients.lazy.filter({ $0.uid == uid }).count >= limits.maxConnectionsPerUID {
            return .refuse(.perUIDLimit)
        }
        let room = isRoot ? limits.maxConnections : limits.maxConnections - limits.reservedForRoot
        guard clients.count >= room else { return .admit }
        guard let (id, why) = evictionCandidate(forRoot: isRoot, among: clients) else { return .refuse(.connectionLimit) }
        return .admitEvicting(id: id, why)
    }

    /// The connection idle longest, else the one whose call has been half-sent longest,
    /// else the one that has not read its reply for longest; a tie goes to the oldest.
    private func evictionCandidate(forRoot: Bool, among clients: [Client]) -> (UInt64, Eviction)? {
        let candidates = clients.filter { forRoot || $0.uid != 0 }
        func earliest(_ since: (Client) -> MonotonicInstant?) -> UInt64? {
            candidates.compactMap { client in since(client).map { (client.id, $0) } }.min { ($0.1, $0.0) < ($1.1, $1.0) }?.0
        }
        if let id = earliest({ $0.isIdle ? $0.lastActivity : nil }) { return (id, .idle) }
        if let id = earliest(\.partialSince) { return (id, .halfSent) }
        if let id = earliest(\.writeBlockedSince) { return (id, .replyNotRead) }
        return nil
    }

    /// All connections' unread replies together stay within `maxPendingReplyBytes`: past it,
    /// the connections that have not read for longest go, with what they held, until it
    /// holds. Empty while within it.
    func overReplyBudget(_ clients: [Client]) -> [UInt64] {
        var pending = clients.reduce(0) { $0 + $1.pendingReplyBytes }
        guard pending > limits.maxPendingReplyBytes else { return [] }
        let never = MonotonicInstant(nanoseconds: .max)
        let stalled = clients.filter { $0.pendingReplyBytes > 0 }.sorted {
            ($0.writeBlockedSince ?? never, $0.id) < ($1.writeBlockedSince ?? never, $1.id)
        }
        var dropped: [UInt64] = []
        for client in stalled where pending > limits.maxPendingReplyBytes {
            pending -= client.pendingReplyBytes
            dropped.append(client.id)
        }
        return dropped
    }

    /// The connections past a deadline at `now`, each with the first rule it broke.
    func expired(_ clients: [Client], now: MonotonicInstant) -> [(id: UInt64, expiry: Expiry)] {
        clients.sorted { $0.id < $1.id }.compactMap { client in
            if let since = client.partialSince, now - since > limits.requestTimeout { return (client.id, .requestTimeout) }
            if let since = client.writeBlockedSince, now - since > limits.writeTimeout { return (client.id, .writeTimeout) }
            if client.isIdle, now - client.lastActivity > limits.idleTimeout { return (client.id, .idleTimeout) }
            if client.closedAndDone { return (client.id, .done) }
            return nil
        }
    }
}
