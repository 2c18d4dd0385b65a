import CWatchkeeperSystem
import Synchronization

/// The sd_notify protocol (READY, STATUS, RELOADING, STOPPING, WATCHDOG,
/// EXTEND_TIMEOUT_USEC). Without NOTIFY_SOCKET every call is a no-op, so the
/// daemon runs the same way in a terminal. sd_notifyf is variadic and does not
/// import; we format the state string ourselves.
public final class SystemdNotifier: Sendable {
    public let isConnected: Bool
    /// The last STATUS= line, so the dump can show what systemctl status shows.
    private let currentStatus = Mutex("")

    public init(environment: [String: String]) {
        isConnected = !(environment["NOTIFY_SOCKET"] ?? "").isEmpty
    }

    @discardableResult
    public func send(_ assignments: [(String, String)]) -> Bool {
        for (key, value) in assignments where key == "STATUS" {
            currentStatus.withLock { $0 = value }
        }
        guard isConnected else { return false }
        let state = assignments.map { "\($0.0)=\($0.1)" }.joined(separator: "\n")
        return sd_notify(0, state) > 0
    }

    public var status: String { currentStatus.withLock { $0 } }

    /// STATUS= is one line; systemctl status shows it verbatim.
    public func setStatus(_ line: String) {
        send([("STATUS", line.replacingNewlines())])
    }

    /// The watchdog interval systemd expects pings within, if it expects any of us
    /// (sd_watchdog_enabled also checks WATCHDOG_PID against our pid).
    public static func watchdogInterval() -> Duration? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return .microseconds(Int64(microseconds))
    }
}

extension String {
    func replacingNewlines() -> String {
        String(self.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
    }
}
