import Logging

/// Whether a run's last record calls for its hook now: a pure decision, apart from the
/// hooks' processes.
enum HookStart: Equatable {
    /// Nothing to run: the record calls for no hook, or the job has none of that kind.
    case none
    /// The job has the hook, but the drain has moved past waiting: shutdown is never held up
    /// by one.
    case notRun(HookKind)
    case start(HookKind)

    static func after(_ record: RunRecord, settings: JobSettings, mayStart: Bool) -> HookStart {
        guard let kind = HookKind.after(record) else { return .none }
        guard (kind == .failure ? settings.onFailure : settings.onSuccess) != nil else { return .none }
        return mayStart ? .start(kind) : .notRun(kind)
    }
}

/// The on_failure and on_success hooks of the engine's runs (JobHook.swift), from the
/// decision after a run's last record until each hook ends: started, or waiting for its
/// run's on_expire to end and its record to be written. Confined to the jobs queue.
final class JobHooks {
    private let logger: Logger
    private var running: [ObjectIdentifier: JobHook] = [:]
    /// How the hooks ended since the start: the dump's `hooks` section.
    private(set) var totals = OutcomeTally<HookKind, HookResult>()
    /// How long a hook waits for its run's record to be written before it starts anyway.
    var recordPatience: Duration

    init(logger: Logger, recordPatience: Duration = .seconds(1)) {
        self.logger = logger
        self.recordPatience = recordPatience
    }

    /// Started or waiting to start: the drain waits for them.
    var count: Int { running.count }

    /// After a run's last record: its on_failure or on_success, if it has one and
    /// `mayStart` says so now and again when the hook is about to spawn. `onEnd` runs on
    /// the jobs queue once the hook ended (or never started), after the totals count it.
    func start(after record: RunRecord, of run: JobRun, mayStart: @escaping () -> Bool,
               onEnd: @escaping (HookKind, HookResult) -> Void) {
        switch HookStart.after(record, settings: run.request.settings, mayStart: mayStart()) {
        case .none:
            return
        case .notRun(let kind):
            logger.notice("\(run.label): \(kind.key) not run: the daemon is stopping")
        case .start(let kind):
            let hook = JobHook(kind: kind, record: record, run: run, recordPatience: recordPatience)
            running[ObjectIdentifier(hook)] = hook
            hook.start(mayStart: mayStart) { [weak self] hook, result in
                guard let self else { return }
                self.running[ObjectIdentifier(hook)] = nil
                self.totals.add(result, to: hook.kind)
                onEnd(hook.kind, result)
            }
        }
    }

    /// shutdown_grace ran out: hooks still running are asked to stop.
    func stopAll() {
        for hook in running.values { hook.stop() }
    }

    /// The drain's last resort: every hook still running is killed, and none starts.
    func killAll() {
        for hook in running.values { hook.kill() }
    }

    /// Every kind, with the results that happened at least once.
    func describeTotals() -> DumpValue {
        .object(HookKind.allCases.map { .init($0.key, totals.describe($0)) })
    }

    /// The oldest first, at most 50.
    func describeRunning(now: MonotonicInstant) -> DumpValue {
        .array(running.values.sorted { ($0.startedAt?.nanoseconds ?? 0) < ($1.startedAt?.nanoseconds ?? 0) }
            .prefix(50).map { $0.describe(now: now) })
    }
}
