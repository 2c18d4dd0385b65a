import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// How the drain ended: every job has its record either way, unless `leftOver`.
public enum DrainReport: Equatable, Sendable {
    /// Everything running finished within shutdown_grace.
    case finished
    /// These were still running at the end of shutdown_grace and were expired.
    case expired(names: [String])
    /// These did not end even after SIGKILL to their process groups: the daemon says so
    /// and exits non-zero.
    case leftOver(names: [String])
}

/// The engine's shutdown drain, a deadline at a time: wait for running jobs up to
/// shutdown_grace; then expire them (on_expire, stop_signal, kill_grace, SIGKILL: each
/// job's own sequence) and wait as long as their settings say that takes; then SIGKILL
/// every process group left; then report. It never reports success while a job is alive
/// or a record is unwritten.
final class EngineDrain {
    enum Phase: String {
        case waiting = "waiting for running jobs"
        case expiring = "expiring the jobs still running"
        case killing = "SIGKILL sent to what is left"
        case done
    }

    private(set) var phase = Phase.waiting
    private let startedAt = MonotonicInstant.now
    private var deadline: MonotonicInstant
    private var timer: RegisteredTimer?
    private var expiredNames: [String] = []
    private let completion: (DrainReport) -> Void
    /// Told each phase's end as it is set: the lifecycle asks systemd for time until then
    /// without waiting on this queue.
    private let onPhaseDeadline: (MonotonicInstant) -> Void

    /// Time allowed after SIGKILL for the kernel to end the processes and for their
    /// pidfds to report it.
    static let afterKill: Duration = .seconds(5)
    /// Margin over a job's own expiry sequence before the drain stops waiting for it.
    static let expiryMargin: Duration = .seconds(2)

    init(grace: Duration, onPhaseDeadline: @escaping (MonotonicInstant) -> Void, completion: @escaping (DrainReport) -> Void) {
        self.completion = completion
        self.onPhaseDeadline = onPhaseDeadline
        self.deadline = startedAt + grace
    }

    func start(_ engine: JobEngine, grace: Duration) {
        arm(engine, after: grace, target: "drain: shutdown_grace \(grace.compactDescription)") { [unowned self] in
            self.expireAll(engine)
        }
        jobEnded(engine)
    }

    /// A second SIGTERM, or shutdown_grace ran out: every running job expires now.
    func expireAll(_ engine: JobEngine) {
        guard phase == .waiting else { return }
        phase = .expiring
        let runs = engine.activeRuns
        expiredNames = runs.map(\.key.name).sorted()
        // The longest expiry sequence any of them may take: on_expire's budget, then
        // stop_signal and kill_grace.
        let longest = runs.compactMap(\.run).map { run in
            let settings = run.request.settings
            return (settings.onExpire == nil ? .zero : settings.onExpireBudget) + settings.killGrace
        }.max() ?? .zero
        for run in runs.compactMap(\.run) { run.expire(.shutdown) }
        // A hook has no stop_signal of its own: SIGTERM now, SIGKILL with what is left.
        engine.hooks.stopAll()
        let wait = longest + Self.expiryMargin
        arm(engine, after: wait, target: "drain: expiry sequences, at most \(wait.compactDescription)") { [unowned self] in
            self.killAll(engine)
        }
        jobEnded(engine)
    }

    private func killAll(_ engine: JobEngine) {
        phase = .killing
        let runs = engine.activeRuns.compactMap(\.run)
        // A finished job here only waits for a log sink to take its last lines.
        let alive = runs.filter { $0.phase != .finished }
        if !alive.isEmpty {
            engine.logger.error("stopping: \(alive.count) job(s) outlived their expiry sequence: SIGKILL to their process groups: \(alive.map(\.label).joined(separator: ", "))")
        }
        for run in runs { run.killGroup() }
        engine.lingering.killAll()
        engine.hooks.killAll()
        arm(engine, after: Self.afterKill, target: "drain: \(Self.afterKill.compactDescription) after SIGKILL") { [unowned self] in
            self.finish(.leftOver(names: engine.activeRuns.map(\.key.name).sorted()))
        }
        jobEnded(engine)
    }

    /// Called whenever a job ended, a leftover group was killed or a hook ended. A hook
    /// started while the drain waits is waited for too; it ends by its own budget, or is
    /// killed with what is left once the expiry sequences have had their time.
    func jobEnded(_ engine: JobEngine) {
        guard phase != .done, engine.runningCount == 0, engine.lingering.count == 0, engine.hooks.count == 0 else { return }
        finish(expiredNames.isEmpty ? .finished : .expired(names: expiredNames))
    }

    private func finish(_ report: DrainReport) {
        guard phase != .done else { return }
        phase = .done
        timer?.cancel()
        timer = nil
        completion(report)
    }

    private func arm(_ engine: JobEngine, after delay: Duration, target: String, _ body: @escaping () -> Void) {
        timer?.cancel()
        deadline = .now + delay
        onPhaseDeadline(deadline)
        let timer = engine.context.sources.makeTimer(owner: "jobs", target: target, on: engine.queue, handler: body)
        self.timer = timer
        timer.schedule(after: delay)
    }

    func describe(now: MonotonicInstant) -> DumpValue {
        .object([
            .init("phase", .string(phase.rawValue)),
            .init("for", .string((now - startedAt).compactDescription)),
            .init("phase_ends_in", .string(max(.zero, deadline - now).compactDescription)),
        ])
    }
}

extension JobEngine {
    /// The shutdown drain: nothing new starts, what waits is cancelled, running jobs get
    /// shutdown_grace and then their expiry sequence. `completion` runs on this queue once
    /// every job has ended and has its record (or, at the very last, with what is left).
    /// `onPhaseDeadline` is told when each phase ends, on this queue, as the phase begins.
    public func beginDrain(grace: Duration, onPhaseDeadline: @escaping (MonotonicInstant) -> Void = { _ in },
                           completion: @escaping (DrainReport) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        stopAccepting()
        guard drain == nil else { return }
        let drain = EngineDrain(grace: grace, onPhaseDeadline: onPhaseDeadline, completion: completion)
        self.drain = drain
        drain.start(self, grace: grace)
    }

    /// A second termination signal: expire everything now.
    public func expireAllNow() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        drain?.expireAll(self)
    }
}
