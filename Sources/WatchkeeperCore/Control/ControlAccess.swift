import CWatchkeeperSystem
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Who is on the other end of a control connection, as the kernel vouches for it at
/// connect(): SO_PEERCRED's pid, uid and gid, and SO_PEERGROUPS' supplementary groups.
/// Not the file mode of the socket alone: that is one chmod away from open to everyone.
public struct ControlPeer: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    public var groups: [UInt32]

    public init(pid: Int32, uid: UInt32, gid: UInt32, groups: [UInt32]) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }

    static func of(_ socket: FileDescriptor) throws(Errno) -> ControlPeer {
        var credentials = wk_peer_credentials()
        try systemCall { wk_get_peer_credentials(socket.rawValue, &credentials) }
        var groups = [gid_t](repeating: 0, count: 64)
        var count = valueOrErrno { wk_get_peer_groups(socket.rawValue, &groups, Int32(groups.count)) }
        if case .failure(.outOfRange) = count {
            groups = [gid_t](repeating: 0, count: 65_536)
            count = valueOrErrno { wk_get_peer_groups(socket.rawValue, &groups, Int32(groups.count)) }
        }
        let received = (try? count.get()) ?? 0
        return ControlPeer(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid,
                           groups: received > 0 ? Array(groups.prefix(Int(received))) : [])
    }

    /// "uid 65534 (nobody), pid 4242 (python3)": user names and commands are the peer's to
    /// choose, so the caller escapes this before it reaches the log.
    var description: String {
        var text = "uid \(uid)"
        if let name = ControlAccess.userName(uid) { text += " (\(name))" }
        text += ", pid \(pid)"
        if let command = Self.command(of: pid) { text += " (\(command))" }
        return text
    }

    private static func command(of pid: Int32) -> String? {
        guard pid > 0, let file = fopen("/proc/\(pid)/comm", "r") else { return nil }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 64)
        guard fgets(&buffer, Int32(buffer.count), file) != nil else { return nil }
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }
}

/// Who may use the control socket, and for what: root, the daemon's own user and members of
/// `[daemon] control_group` (primary or supplementary) may call every method; members of
/// `[daemon] read_group` only those that change nothing (`ControlInterface.Method.readsOnly`),
/// so a monitoring user or a read-only Cockpit session can see without acting. A pure
/// value, so the rule is tested without sockets.
public struct ControlAccess: Sendable, Equatable {
    public enum Level: String, Sendable {
        /// Every method.
        case control
        /// Only the methods that change nothing.
        case read
    }

    public var daemonUID: UInt32
    public var group: (name: String, gid: UInt32)?
    public var readGroup: (name: String, gid: UInt32)?

    public init(daemonUID: UInt32, group: (name: String, gid: UInt32)?, readGroup: (name: String, gid: UInt32)? = nil) {
        self.daemonUID = daemonUID
        self.group = group
        self.readGroup = readGroup
    }

    public static func == (lhs: ControlAccess, rhs: ControlAccess) -> Bool {
        lhs.daemonUID == rhs.daemonUID && lhs.group?.name == rhs.group?.name && lhs.group?.gid == rhs.group?.gid
            && lhs.readGroup?.name == rhs.readGroup?.name && lhs.readGroup?.gid == rhs.readGroup?.gid
    }

    /// nil: refused at the door.
    public func level(of peer: ControlPeer) -> Level? {
        if peer.uid == 0 || peer.uid == daemonUID { return .control }
        func isMember(_ gid: UInt32) -> Bool { peer.gid == gid || peer.groups.contains(gid) }
        if let group, isMember(group.gid) { return .control }
        if let readGroup, isMember(readGroup.gid) { return .read }
        return nil
    }

    public func allows(_ peer: ControlPeer) -> Bool { level(of: peer) != nil }

    /// Whether `peer` may call `method`; a read-only peer is refused the methods that act.
    public func permits(_ method: ControlInterface.Method, for peer: ControlPeer) -> Bool {
        switch level(of: peer) {
        case .control?: return true
        case .read?: return method.readsOnly
        case nil: return false
        }
    }

    /// For the refusal in the journal and the client's message: who would be let in.
    public var whoMay: String {
        var text = whoMayAct + " may use it"
        if let readGroup { text += ", members of group \(readGroup.name) only to read" }
        return text
    }

    /// "only root, uid 998 (watchkeeper) and members of group wkadmin": who may call every method.
    public var whoMayAct: String {
        var text = "only root"
        if daemonUID != 0 { text += ", uid \(daemonUID)\(Self.userName(daemonUID).map { " (\($0))" } ?? "")" }
        if let group { text += " and members of group \(group.name)" } else { text += " (set [daemon] control_group to admit a group)" }
        return text
    }

    /// What the Status call tells its caller about itself: its level, and who may act, so a
    /// read-only client (a Cockpit page) can say why its buttons are missing.
    public func describe(for peer: ControlPeer) -> DumpValue {
        .object([
            .init("level", level(of: peer).map { .string($0.rawValue) } ?? .null),
            .init("uid", .int(Int64(peer.uid))),
            .init("control_group", group.map { .string($0.name) } ?? .null),
            .init("read_group", readGroup.map { .string($0.name) } ?? .null),
            .init("who_may_act", .string(whoMayAct)),
        ])
    }

    /// The gid of a group, or nil when the system has no such group.
    public static func groupID(named name: String) -> UInt32? { AccountNames.groupID(named: name) }

    public static func groupName(_ gid: UInt32) -> String? { AccountNames.groupName(gid) }

    public static func userName(_ uid: UInt32) -> String? { AccountNames.userName(uid) }
}

/// One journal line per refused uid per minute, with the count of the ones in between, so
/// a script retrying in a loop cannot flood the journal.
struct RefusalLog {
    private var last: [UInt32: (at: MonotonicInstant, suppressed: Int)] = [:]
    static let interval: Duration = .seconds(60)

    /// The suffix for the line to log now, or nil to stay quiet.
    mutating func record(uid: UInt32, now: MonotonicInstant) -> String? {
        if let entry = last[uid], now - entry.at < Self.interval {
            last[uid] = (entry.at, entry.suppressed + 1)
            return nil
        }
        let suppressed = last[uid]?.suppressed ?? 0
        last[uid] = (now, 0)
        if last.count > 1_000 { last = last.filter { now - $0.value.at < Self.interval } }
        return suppressed > 0 ? " (\(suppressed) more from this uid in the last minute not logged)" : ""
    }
}
