import CWatchkeeperSystem
import Logging
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Which hook of a job: `on_failure` after the last attempt of a run failed or expired,
/// `on_success` after a run succeeded.
public enum HookKind: String, Sendable, CaseIterable {
    case failure
    case success

    /// The configuration key, as every message names the hook.
    var key: String { "on_\(rawValue)" }

    /// The hook a run's last record calls for, if any. Records of work that never ran
    /// (skipped, missed, held, ran_elsewhere, cancelled) call for none, nor does a run the
    /// daemon's own shutdown ended: that says nothing about the job.
    static func after(_ record: RunRecord) -> HookKind? {
        switch record.outcome {
        case .ok: return .success
        case .failed: return .failure
        case .expired: return record.expiry == .shutdown ? nil : .failure
        case .skippedOverlap, .missed, .cancelled, .ranElsewhere, .held: return nil
        }
    }
}

/// How a hook ended, for its journal entry, the dump and the metrics.
public enum HookResult: String, Sendable, CaseIterable {
    case ok
    /// Exited non-zero or was killed by a signal it was not sent for its budget.
    case failed
    /// Outlived its budget and was sent SIGKILL.
    case expired
    /// Could not be started (the command, the credentials, the output file).
    case unstarted
    /// The daemon stopped before it could run, or its drain ended it.
    case cancelled
}

/// One run of a job's `on_failure` or `on_success` command, after the run's record: the
/// run's environment plus what the record says, and the run's last lines in a file handed
/// to it as fd 3 (`WATCHKEEPER_OUTPUT_FILE=/proc/self/fd/3`), which no directory holds, so
/// a hook of any user reads it whatever the runtime directory's mode. It starts once the
/// record is written, so the journal has the record before the hook's output. It has its
/// own budget (SIGKILL after it, like on_expire's) and its ending triggers nothing: a hook
/// never runs another hook. Its output is journaled like on_expire's. Confined to the jobs
/// queue; the engine keeps it until `onEnd`.
final class JobHook {
    let kind: HookKind
    let record: RunRecord
    /// Holds the run's request, environment and output tail until the hook has started.
    private var run: JobRun?
    private let request: JobRequest
    private let context: JobContext
    private var child: ChildProcess?
    private var killedForBudget = false
    private(set) var startedAt: MonotonicInstant?
    private var onEnd: ((JobHook, HookResult) -> Void)?
    /// The start, while the log sink has not written the run's record yet.
    private var waitingForRecord: (() -> Void)?
    private var recordTimer: RegisteredTimer?

    /// What a hook reads its output file as: its own fd 3.
    static let outputPath = "/proc/self/fd/3"
    /// A log sink that took nothing for this long (a stalled journal) holds it no longer.
    private let recordPatience: Duration

    init(kind: HookKind, record: RunRecord, run: JobRun, recordPatience: Duration) {
        self.kind = kind
        self.record = record
        self.recordPatience = recordPatience
        self.run = run
        self.request = run.request
        self.context = run.contextForHooks
    }

    var command: JobSettings.Command? { kind == .failure ? request.settings.onFailure : request.settings.onSuccess }
    var budget: Duration { kind == .failure ? request.settings.onFailureBudget : request.settings.onSuccessBudget }
    private var logger: Logger { context.logger }
    private var label: String { "\(kind.key) for \(request.label)" }
    var pid: pid_t? { child?.pid }

    /// Starts once the run's on_expire handler (if one runs) has ended and the run's record
    /// is written, and only if `mayStart` still says so then.
    func start(mayStart: @escaping () -> Bool, onEnd: @escaping (JobHook, HookResult) -> Void) {
        self.onEnd = onEnd
        guard let run else { return }
        run.whenExpireHandlerEnded { [self] in
            guard self.onEnd != nil else { return }
            self.afterRecordWritten {
                guard self.onEnd != nil else { return }
                guard mayStart() else { return self.end(.cancelled) }
                self.spawn()
            }
        }
    }

    /// The record goes out through the log sink's queue, the hook's output straight to the
    /// journal (or stderr): started before the sink wrote the record, a quick hook's lines
    /// came first now and then. A sink that writes nothing for `recordPatience` (journald
    /// stalled) does not hold the hook.
    private func afterRecordWritten(_ start: @escaping () -> Void) {
        waitingForRecord = start
        let timer = context.sources.makeTimer(owner: label, target: "\(label): the run's record on its way out", on: context.queue) { [weak self] in
            self?.recordWritten()
        }
        timer.schedule(after: recordPatience)
        recordTimer = timer
        let hook = UncheckedSendable(self)
        let queue = context.queue.queue
        context.sink.afterWritten { queue.async { hook.value.recordWritten() } }
    }

    private func recordWritten() {
        recordTimer?.cancel()
        recordTimer = nil
        guard let start = waitingForRecord else { return }
        waitingForRecord = nil
        start()
    }

    private func spawn() {
        guard let run, let command else { return end(.unstarted) }
        self.run = nil
        do {
            let output = try run.outputPlan(forJob: false)
            let tail = run.outputTail
            // Its user reads it through its own fd 3, whatever the directories on the way.
            let file = Self.outputFile(tail?.bytes ?? [], owner: try run.credentials())
            if case .failure(let error) = file {
                logger.warning("\(label): unable to hand it the run's output (\(error)); it runs without WATCHKEEPER_OUTPUT_FILE", metadata: metadata)
            }
            let descriptor = try? file.get()
            var extra: [(String, [UInt8])] = [
                ("WATCHKEEPER_HOOK", Array(kind.rawValue.utf8)),
                ("WATCHKEEPER_OUTCOME", Array(record.outcome.rawValue.utf8)),
                ("WATCHKEEPER_DURATION_SECONDS", Array(roundedString(record.duration.secondsDouble, digits: 3).utf8)),
                ("WATCHKEEPER_OUTPUT_LINES", Array(String(descriptor == nil ? 0 : tail?.count ?? 0).utf8)),
            ]
            switch record.exit {
            case .exited(let code)?: extra.append(("WATCHKEEPER_EXIT_CODE", Array(String(code).utf8)))
            case .signaled(let signal, _)?: extra.append(("WATCHKEEPER_SIGNAL", Array(HandledSignals.name(signal).utf8)))
            case nil: break
            }
            if let expiry = record.expiry { extra.append(("WATCHKEEPER_EXPIRE_REASON", Array(expiry.rawValue.utf8))) }
            if descriptor != nil { extra.append(("WATCHKEEPER_OUTPUT_FILE", Array(Self.outputPath.utf8))) }
            // The child has its own copy once spawned; ours closes when this scope ends.
            defer { if let descriptor { close(descriptor) } }
            let spawnRequest = try run.spawnRequest(command: command, extra: extra + output.environment, stdout: output.stdout,
                                                    stderr: output.stderr, descriptor3: descriptor,
                                                    placeholders: ["outcome": Array(record.outcome.rawValue.utf8),
                                                                   "budget": Array(budget.compactDescription.utf8)])
            // Its own cgroup, as on_expire's: the job's is gone.
            var cgroup: JobCgroup?
            let spawned = try context.spawn(spawnRequest, runID: request.runID, suffix: "-on-\(kind.rawValue)", limits: JobLimits(), cgroup: &cgroup,
                                            forJob: false)
            startedAt = .now
            let budget = self.budget
            child = ChildProcess(name: request.name, kind: request.kind, runID: request.runID, owner: request.label, spawned: spawned, output: output,
                                 streams: ("\(kind.key) stdout", "\(kind.key) stderr"), context: context, cgroup: cgroup,
                                 killAfter: budget, onKill: { [weak self] budget in
                                     guard let self else { return }
                                     self.killedForBudget = true
                                     self.logger.warning("\(self.label) exceeded its \(budget.compactDescription) budget; SIGKILL",
                                                         metadata: self.metadata)
                                 }) { [weak self] status in
                guard let self else { return }
                self.child?.releaseContainment()
                self.exited(status)
            }
        } catch {
            logger.error("\(label): unable to run \(kind.key): \(error)", metadata: metadata)
            end(.unstarted)
        }
    }

    private var metadata: Logger.Metadata {
        [request.kind.rawValue: .string(request.name), "run_id": .string(request.runID), "hook": .string(kind.key)]
    }

    private func exited(_ status: ProcessExit) {
        let result: HookResult = killedForBudget ? .expired : status == .exited(0) ? .ok : .failed
        let how: String
        switch status {
        case .exited(let code): how = "exited \(code)"
        case .signaled(let signal, _): how = "was killed by \(HandledSignals.name(signal))"
        }
        let took = startedAt.map { " after \($0.elapsed().compactDescription)" } ?? ""
        let message = "\(kind.key) for \(request.kind.rawValue) \(request.name) run \(request.runID) \(how)\(took)"
        var fields = metadata
        fields["hook_result"] = .string(result.rawValue)
        if result == .ok { logger.info("\(message)", metadata: fields) } else { logger.warning("\(message)", metadata: fields) }
        end(result)
    }

    /// shutdown_grace ran out while it ran.
    func stop() {
        child?.signalGroup(SIGTERM)
    }

    /// The drain's last resort: a hook still running is killed; one not started yet never starts.
    func kill() {
        guard let child else { return end(.cancelled) }
        child.signalGroup(SIGKILL)
    }

    private func end(_ result: HookResult) {
        recordTimer?.cancel()
        recordTimer = nil
        waitingForRecord = nil
        run = nil
        let handler = onEnd
        onEnd = nil
        handler?(self, result)
    }

    func describe(now: MonotonicInstant) -> DumpValue {
        var fields: [DumpField] = [
            .init(request.kind.rawValue, .string(request.name)),
            .init("run_id", .string(request.runID)),
            .init("hook", .string(kind.key)),
            .init("outcome", .string(record.outcome.rawValue)),
            .init("pid", child.map { .int(Int64($0.pid)) } ?? .null),
        ]
        if let startedAt {
            fields.append(.init("elapsed", .string((now - startedAt).compactDescription)))
            fields.append(.init("budget", .string(budget.compactDescription)))
        } else {
            fields.append(.init("phase", .string("waiting for on_expire to end")))
        }
        return .object(fields)
    }

    // MARK: The output file

    /// The run's last lines in a file in memory (memfd), read-only and owned by the hook's
    /// user when it runs as another: only it (through its fd 3) and root can open it, and
    /// it is gone with the last descriptor. At most 400 KiB (OutputTail), on the jobs queue.
    static func outputFile(_ bytes: [UInt8], owner: Credentials?) -> Result<Int32, Errno> {
        let fd: Int32
        switch valueOrErrno({ wk_memfd_create("watchkeeper-hook-output") }) {
        case .success(let created): fd = created
        case .failure(let error): return .failure(error)
        }
        func failed(_ error: Errno) -> Result<Int32, Errno> {
            close(fd)
            return .failure(error)
        }
        var written = 0
        while written < bytes.count {
            // valueOrErrno retries EINTR.
            switch valueOrErrno({ bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) } }) {
            case .success(let count): written += count
            case .failure(let error): return failed(error)
            }
        }
        // A hook reading fd 3 itself (`cat <&3`) starts at the beginning too.
        if case .failure(let error) = valueOrErrno({ lseek(fd, 0, SEEK_SET) }) { return failed(error) }
        if let owner, case .failure(let error) = nothingOrErrno({ fchown(fd, owner.uid, owner.gid) }) { return failed(error) }
        if case .failure(let error) = nothingOrErrno({ fchmod(fd, 0o400) }) { return failed(error) }
        return .success(fd)
    }
}
