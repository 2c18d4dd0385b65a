/// When the jobs queue sums up the running jobs for STATUS=: a change arms the summary
/// timer (once until it fires), and a change that brings the jobs back to what the line
/// already shows (none running) disarms it.
///
/// Why disarm: a job that starts and ends within the interval would otherwise leave the
/// timer to fire `summaryInterval` after its start for nothing, and a writer with that
/// period (bench-peers writes a file every 100 ms) meets it on its next file, waking the
/// manager thread and a worker while that file's job is being started (latency-path.md,
/// "The status timer on the next file's path").
struct StatusSummaryTiming {
    enum Action: Equatable {
        case arm
        case disarm
        case none
    }

    /// Armed and not yet fired.
    private(set) var pending = false
    /// What the line was last given.
    private(set) var sent: (running: Int, text: String) = (0, "")

    /// The engine changed; `running` is how many jobs run now.
    mutating func changed(running: Int) -> Action {
        if running == 0, sent.running == 0 {
            guard pending else { return .none }
            pending = false
            return .disarm
        }
        guard !pending else { return .none }
        pending = true
        return .arm
    }

    /// The timer fired with the engine's summary now: whether the line needs it.
    mutating func fired(running: Int, text: String) -> Bool {
        pending = false
        guard running != sent.running || text != sent.text else { return false }
        sent = (running, text)
        return true
    }
}
