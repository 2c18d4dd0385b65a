import Logging

/// The `[daemon]` table: settings of the process itself, as opposed to the
/// `[[watch]]` rules and `[[task]]` entries it runs.
public struct DaemonSettings: Equatable, Sendable {
    public var logLevel: Logger.Level = .info
    /// How long running work may go on after SIGTERM before it is expired.
    public var shutdownGrace: Duration = .seconds(30)
    /// Where state.json, the latest dump, is written.
    public var runtimeDirectory: String
    /// Persistent state: task history and the file ledger.
    public var stateDirectory: String
    /// How long one component may take to describe itself before the dump reports it stuck.
    public var dumpComponentTimeout: Duration = .seconds(2)
    /// How many recent warnings and errors the dump keeps.
    public var recentProblems: Int = 50
    /// Jobs running at once, across all tasks and watches; the rest wait by priority.
    public var maxJobs: Int = 4
    /// Members of this group may use the control socket besides root and the daemon's user.
    public var controlGroup: String?
    /// Members of this group may call the control socket's methods that change nothing.
    public var readGroup: String?
    /// The Prometheus text file written every `metricsInterval` (node_exporter's textfile
    /// collector reads it); nil: none is written, `watchkeeper metrics` still shows them.
    public var metricsFile: String?
    public var metricsInterval: Duration = .seconds(15)

    /// Under systemd, RuntimeDirectory= and StateDirectory= arrive as environment
    /// variables (several paths are colon-separated; the first is ours).
    public init(environment: [String: String] = [:]) {
        func firstPath(_ name: String) -> String? {
            guard let value = environment[name], !value.isEmpty else { return nil }
            return String(value.split(separator: ":", omittingEmptySubsequences: true).first ?? Substring(value))
        }
        runtimeDirectory = firstPath("RUNTIME_DIRECTORY") ?? "/run/watchkeeper"
        stateDirectory = firstPath("STATE_DIRECTORY") ?? "/var/lib/watchkeeper"
    }

    /// The control socket in a runtime directory (a Unix socket's path holds at most 108 bytes).
    public static func controlSocketPath(runtimeDirectory: String) -> String { runtimeDirectory + "/control.sock" }
}

/// A validated configuration file. `generation` counts successful loads in this process.
public struct Configuration: Sendable {
    public var path: String
    public var daemon: DaemonSettings
    public var tasks: [TaskSettings]
    public var watches: [WatchSettings]
    /// nil without a `[cluster]` table: no etcd client, no lease, nothing loaded.
    public var cluster: ClusterSettings?

    public init(path: String, daemon: DaemonSettings, tasks: [TaskSettings] = [], watches: [WatchSettings] = [], cluster: ClusterSettings? = nil) {
        self.path = path
        self.daemon = daemon
        self.tasks = tasks
        self.watches = watches
        self.cluster = cluster
    }
}
