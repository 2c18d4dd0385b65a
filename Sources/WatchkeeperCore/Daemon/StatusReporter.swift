import Dispatch

/// STATUS= for `systemctl status`: what runs, and what went wrong last. Two halves on two
/// queues. On the jobs queue the running jobs are summed up at most every 100 ms after a
/// change and handed over only when the summary changed (once per job, the summary and
/// the hop cost ~3 % of the daemon's CPU in a burst: perf, watchkeeper-bench watch), and
/// not at all when the jobs are back to none before the timer fires (StatusSummaryTiming). On
/// the lifecycle queue the line is sent at most every 500 ms, the latest always
/// (`StatusThrottle`), on a registered timer.
// @unchecked Sendable: the summary half is confined to the jobs queue, the line half to the lifecycle queue (each marked below).
final class StatusReporter: @unchecked Sendable {
    /// What the line says besides the jobs: the lifecycle's, read on its queue.
    struct Facts {
        var state: LifecycleState
        var generation: Int64
        var reloadErrors: ConfigErrors?
    }

    private let notifier: SystemdNotifier
    private let sources: SourceRegistry
    private let lifecycleQueue: SubsystemQueue
    private let jobsQueue: SubsystemQueue
    private let facts: () -> Facts

    // Jobs queue only.
    private var summaryTimer: (any QueueTimer)?
    private var summaryTiming = StatusSummaryTiming()
    static let summaryInterval: Duration = .milliseconds(100)

    // Lifecycle queue only.
    private(set) var jobs: (running: Int, text: String) = (0, "")
    private var throttle = StatusThrottle(intervalNanoseconds: 500_000_000)
    private var throttleTimer: RegisteredTimer?

    init(notifier: SystemdNotifier, sources: SourceRegistry, lifecycleQueue: SubsystemQueue, jobsQueue: SubsystemQueue,
         facts: @escaping () -> Facts) {
        self.notifier = notifier
        self.sources = sources
        self.lifecycleQueue = lifecycleQueue
        self.jobsQueue = jobsQueue
        self.facts = facts
    }

    /// Follows `engine`'s changes from now on.
    func follow(_ engine: JobEngine) {
        engine.onChange = { [unowned self, unowned engine] in
            switch self.summaryTiming.changed(running: engine.runningCount) {
            case .arm: self.summaryTimer(engine).schedule(after: Self.summaryInterval)
            case .disarm: self.summaryTimer?.disarm()
            case .none: break
            }
        }
    }

    /// Made on the jobs queue at the first change, set there by the thread that changed the
    /// jobs: a job's start arms it just after its exec, which must wake no other thread.
    private func summaryTimer(_ engine: JobEngine) -> any QueueTimer {
        if let summaryTimer { return summaryTimer }
        let timer = engine.context.makeTimer(owner: "lifecycle", target: "STATUS=: sum up the running jobs, at most every \(Self.summaryInterval.compactDescription)") {
            [unowned self, unowned engine] in
            // On the jobs queue: take the figures here, show them from the lifecycle queue.
            let summary = (running: engine.runningCount, text: engine.runningSummary)
            guard self.summaryTiming.fired(running: summary.running, text: summary.text) else { return }
            self.lifecycleQueue.async {
                self.jobs = summary
                self.jobsChanged()
            }
        }
        summaryTimer = timer
        return timer
    }

    private func jobsChanged() {
        dispatchPrecondition(condition: .onQueue(lifecycleQueue.queue))
        switch throttle.changed(now: MonotonicInstant.now.nanoseconds) {
        case .send:
            sendWhileRunning()
        case .sendAt(let deadline):
            if throttleTimer == nil {
                throttleTimer = sources.makeTimer(owner: "lifecycle", target: "STATUS=: at most every 500ms, the latest line", on: lifecycleQueue) { [unowned self] in
                    if self.throttle.timerFired(now: MonotonicInstant.now.nanoseconds) == .send { self.sendWhileRunning() }
                }
            }
            throttleTimer?.schedule(at: MonotonicInstant(nanoseconds: deadline).dispatchTime)
        case .none:
            break
        }
    }

    private func sendWhileRunning() {
        if case .running = facts().state { notifier.setStatus(line()) }
    }

    /// The line, at most 400 characters.
    func line() -> String {
        let facts = facts()
        var line = facts.state.description
        if case .draining(let signal) = facts.state {
            line = "stopping on \(HandledSignals.name(signal)): \(jobs.running) job(s) still running"
        }
        line += "; config generation \(facts.generation)"
        if case .running = facts.state {
            line += "; \(jobs.running) job(s) running"
            if !jobs.text.isEmpty { line += ": \(jobs.text)" }
        }
        if let errors = facts.reloadErrors {
            line += "; last reload FAILED, old config kept: \(errors.summary)"
        }
        return String(line.prefix(400))
    }
}
