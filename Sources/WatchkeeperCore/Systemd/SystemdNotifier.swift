import CWatchkeeperSystemd
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The sd_notify protocol (READY, STATUS, RELOADING, STOPPING, WATCHDOG,
/// EXTEND_TIMEOUT_USEC): one datagram to NOTIFY_SOCKET per message, sent by
/// `wk_notify` without libsystemd (CWatchkeeperSystemd). Without NOTIFY_SOCKET every
/// call is a no-op, so the daemon runs the same way in a terminal.
public final class SystemdNotifier: Sendable {
    public let isConnected: Bool
    /// NOTIFY_SOCKET: a path, or '@' and an abstract socket's name.
    private let socket: String?
    /// The last STATUS= line, so the dump can show what systemctl status shows.
    private let currentStatus = Mutex("")

    public init(environment: [String: String]) {
        let socket = environment["NOTIFY_SOCKET"] ?? ""
        self.socket = socket.isEmpty ? nil : socket
        isConnected = !socket.isEmpty
    }

    @discardableResult
    public func send(_ assignments: [(String, String)]) -> Bool {
        for (key, value) in assignments where key == "STATUS" {
            currentStatus.withLock { $0 = value }
        }
        guard let socket else { return false }
        let state = assignments.map { "\($0.0)=\($0.1)" }.joined(separator: "\n")
        return wk_notify(socket, state, state.utf8.count) > 0
    }

    public var status: String { currentStatus.withLock { $0 } }

    /// STATUS= is one line; systemctl status shows it verbatim.
    public func setStatus(_ line: String) {
        send([("STATUS", line.replacingNewlines())])
    }

    /// The watchdog interval systemd expects pings within, if it expects any of us.
    public static func watchdogInterval() -> Duration? {
        watchdogInterval(microseconds: getenv("WATCHDOG_USEC").map { String(cString: $0) },
                         pid: getenv("WATCHDOG_PID").map { String(cString: $0) }, ownPID: getpid())
    }

    /// What sd_watchdog_enabled(3) reads: WATCHDOG_USEC, a positive number of microseconds
    /// (not "infinity"), for this process unless WATCHDOG_PID names another one.
    static func watchdogInterval(microseconds: String?, pid: String?, ownPID: pid_t) -> Duration? {
        guard let microseconds, let value = UInt64(microseconds), value > 0, value != .max else { return nil }
        if let pid {
            guard let owner = pid_t(pid), owner > 0, owner == ownPID else { return nil }
        }
        return .microseconds(Int64(clamping: value))
    }
}

extension String {
    func replacingNewlines() -> String {
        String(self.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
    }
}
