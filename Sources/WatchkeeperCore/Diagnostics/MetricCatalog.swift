/// Every metric watchkeeper exports, with its help text: the one list the factory takes the
/// HELP lines from, docs/fleet.md describes, and the alert rules' test checks names against.
/// Counters end in `_total`, times in `_seconds`, as Prometheus' naming conventions ask.
public enum MetricCatalog {
    public enum Kind: String, Sendable {
        case counter
        case gauge
        case histogram
    }

    public struct Family: Sendable, Equatable {
        public let name: String
        public let kind: Kind
        public let help: String
        /// The label names of every series, in order.
        public let labels: [String]
    }

    // Recorded by the job engine, at the single place each run's record is journaled.
    public static let jobs = Family(name: "watchkeeper_jobs_total", kind: .counter,
        help: "Job records by task or watch rule and outcome (ok, failed, expired, skipped-overlap, missed, cancelled), as journaled; the SIGUSR1 dump's jobs.groups[].outcomes",
        labels: ["kind", "name", "outcome"])
    public static let lastSuccess = Family(name: "watchkeeper_job_last_success_timestamp_seconds", kind: .gauge,
        help: "When a run of the task or watch rule last ended ok, in seconds since the epoch; 0 if none has since the daemon started",
        labels: ["kind", "name"])
    public static let lastFailure = Family(name: "watchkeeper_job_last_failure_timestamp_seconds", kind: .gauge,
        help: "When a run of the task or watch rule last failed or expired, in seconds since the epoch; 0 if none has since the daemon started",
        labels: ["kind", "name"])
    public static let duration = Family(name: "watchkeeper_job_duration_seconds", kind: .histogram,
        help: "How long runs that started took, from spawn to exit, expiry sequence included",
        labels: ["kind", "name"])
    public static let startLatency = Family(name: "watchkeeper_job_start_latency_seconds", kind: .histogram,
        help: "From the file's last event (settle window included) or the task's scheduled instant to the start of the first attempt",
        labels: ["kind", "name"])
    public static let expirations = Family(name: "watchkeeper_job_expirations_total", kind: .counter,
        help: "Runs that expired, by reason: budget (it ran out), shutdown (shutdown_grace ran out), replaced (overlap = replace)",
        labels: ["kind", "name", "reason"])
    public static let hooks = Family(name: "watchkeeper_hooks_total", kind: .counter,
        help: "on_failure and on_success hooks that ended, by hook and result: ok, failed (non-zero exit or a signal), expired (killed after its budget), unstarted (could not be started), cancelled (the daemon stopped first)",
        labels: ["hook", "result"])

    // Read from their owners each time the metrics are written or rendered.
    public static let running = Family(name: "watchkeeper_jobs_running", kind: .gauge,
        help: "Jobs running now, across all tasks and watch rules", labels: [])
    public static let waiting = Family(name: "watchkeeper_jobs_waiting", kind: .gauge,
        help: "Jobs waiting for a max_jobs slot or their group's limit", labels: [])
    public static let overflows = Family(name: "watchkeeper_inotify_overflows_total", kind: .counter,
        help: "Times the kernel's inotify event queue overflowed; each one rescans every watched tree", labels: [])
    public static let rescans = Family(name: "watchkeeper_watch_rescans_total", kind: .counter,
        help: "Full rescans of the watch rule's tree after an overflow, since the rule was set up", labels: ["watch"])
    public static let filesSettling = Family(name: "watchkeeper_watch_files_settling", kind: .gauge,
        help: "Files of the watch rule waiting for their settle window to end", labels: ["watch"])
    public static let directoriesWatched = Family(name: "watchkeeper_watch_directories_watched", kind: .gauge,
        help: "Directories of the watch rule with an inotify watch in place", labels: ["watch"])
    public static let directoriesUnwatched = Family(name: "watchkeeper_watch_directories_unwatched", kind: .gauge,
        help: "Directories of the watch rule that could not be watched (watch limit, permissions) and are scanned instead",
        labels: ["watch"])
    public static let rootMissing = Family(name: "watchkeeper_watch_root_missing", kind: .gauge,
        help: "1 while the watch rule's root directory is missing or unusable, else 0", labels: ["watch"])
    public static let pingsWithheld = Family(name: "watchkeeper_watchdog_pings_withheld_total", kind: .counter,
        help: "Watchdog ticks on which a subsystem queue had not answered its probe, so no WATCHDOG=1 was sent", labels: [])
    public static let pingsSent = Family(name: "watchkeeper_watchdog_pings_sent_total", kind: .counter,
        help: "WATCHDOG=1 pings sent to systemd", labels: [])
    public static let reloadSuccessful = Family(name: "watchkeeper_config_last_reload_successful", kind: .gauge,
        help: "1 if the last configuration reload was applied (or none was asked for), 0 if the file was refused", labels: [])
    public static let reloadSuccessTime = Family(name: "watchkeeper_config_last_reload_success_timestamp_seconds", kind: .gauge,
        help: "When the configuration in force was read (start or reload), in seconds since the epoch", labels: [])
    public static let generation = Family(name: "watchkeeper_config_generation", kind: .gauge,
        help: "Successful configuration loads in this process: 1 at start, +1 per applied reload", labels: [])
    // The fleet (docs/fleet.md), with [cluster] only.
    public static let fleetFires = Family(name: "watchkeeper_fleet_fires_total", kind: .counter,
        help: "Fires of fleet tasks by where they went: ran_here, ran_elsewhere (another host claimed it), taken_over (from a host whose lease expired mid-run), held (no etcd quorum when due)",
        labels: ["task", "outcome"])
    public static let fleetHeld = Family(name: "watchkeeper_fleet_held", kind: .gauge,
        help: "1 while this host has no etcd lease to claim fires with (fleet tasks are held, not run), else 0", labels: [])
    public static let leaseRenewalsFailed = Family(name: "watchkeeper_fleet_lease_renewals_failed_total", kind: .counter,
        help: "Renewals of this host's etcd lease that failed or timed out", labels: [])
    public static let fleetFences = Family(name: "watchkeeper_fleet_fences_total", kind: .counter,
        help: "Times the lease could not be renewed in time and every fleet job here was stopped (reason fleet_lease_lost)", labels: [])
    public static let etcdCalls = Family(name: "watchkeeper_etcd_calls_total", kind: .counter,
        help: "Calls to etcd by result: ok (answered) or failed (refused, unreachable or past its deadline)", labels: ["result"])
    public static let etcdCallLatency = Family(name: "watchkeeper_etcd_call_latency_seconds", kind: .gauge,
        help: "Latency of the last 256 answered etcd calls at the quantile", labels: ["quantile"])
    public static let buildInfo = Family(name: "watchkeeper_build_info", kind: .gauge,
        help: "Always 1; the version in a label", labels: ["version"])

    public static let all: [Family] = [
        jobs, lastSuccess, lastFailure, duration, startLatency, expirations, hooks, running, waiting, overflows, rescans,
        filesSettling, directoriesWatched, directoriesUnwatched, rootMissing, pingsWithheld, pingsSent,
        reloadSuccessful, reloadSuccessTime, generation, buildInfo,
        fleetFires, fleetHeld, leaseRenewalsFailed, fleetFences, etcdCalls, etcdCallLatency,
    ]

    static func family(named name: String) -> Family? { all.first { $0.name == name } }

    /// Jobs take from milliseconds (a file copied) to hours (a backup under a long budget).
    static let durationBuckets: [Duration] = [
        .milliseconds(10), .milliseconds(50), .milliseconds(100), .milliseconds(500), .seconds(1), .seconds(5),
        .seconds(10), .seconds(30), .seconds(60), .seconds(300), .seconds(900), .seconds(3_600),
    ]

    /// From a spawn on an idle daemon (about a millisecond) to a file that waited in a long
    /// line behind max_jobs.
    static let latencyBuckets: [Duration] = [
        .milliseconds(1), .milliseconds(5), .milliseconds(10), .milliseconds(50), .milliseconds(100),
        .milliseconds(500), .seconds(1), .seconds(5), .seconds(10), .seconds(30), .seconds(60), .seconds(300),
    ]
}
