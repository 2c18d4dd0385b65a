/// Every subsystem's labelled serial queue, made once by the composition root. Each
/// subsystem's state is touched only on its own.
struct DaemonQueues {
    let lifecycle = SubsystemQueue(name: "lifecycle", qos: .userInitiated)
    let signals = SubsystemQueue(name: "signals", qos: .userInitiated)
    let watchdog = SubsystemQueue(name: "watchdog", qos: .userInitiated)
    let diagnostics = SubsystemQueue(name: "diagnostics", qos: .utility)
    /// The job engine and the task scheduler, which asks it directly what runs.
    let jobs = SubsystemQueue(name: "jobs", qos: .default)
    let watching = SubsystemQueue(name: "watching", qos: .default)
    /// The state file's one writer: the ledger, the task state and history.
    let state = SubsystemQueue(name: "state", qos: .default)
    /// The control socket: its listener, connections and deadlines.
    let control = SubsystemQueue(name: "control", qos: .userInitiated)
    let metrics = SubsystemQueue(name: "metrics", qos: .utility)
    /// The etcd client, the lease and fleet claims (`[cluster]` only; idle otherwise). Never
    /// blocks: its sockets are non-blocking and every call has a deadline.
    let cluster = SubsystemQueue(name: "cluster", qos: .userInitiated)
    /// Reads and checks the configuration on reload; not watched by the watchdog, since a
    /// slow parse there harms nothing else.
    let config = SubsystemQueue(name: "config", qos: .utility)

    /// The queues whose probes gate the watchdog's ping. The state queue is left out: a
    /// state disk that hangs blocks only its writes (held in order, shown as stuck in the
    /// dump), while watching and jobs go on; a restart by systemd would not unhang the disk
    /// and would lose what waits.
    var gated: [SubsystemQueue] { [lifecycle, signals, watchdog, diagnostics, jobs, watching, control, metrics, cluster] }
    /// The queues the dump reports on.
    var monitored: [SubsystemQueue] { gated + [state] }
    /// Every queue, for the test stall hook.
    var all: [SubsystemQueue] { monitored + [config] }
}
