import Logging

/// How the engine runs the jobs of one task or watch rule. Set at start and on every
/// reload; work already waiting runs with the settings in force when it starts.
public struct JobGroup: Sendable, Equatable {
    public let key: JobKey
    public var settings: JobSettings
    /// At most this many of the group's jobs run at once; the rest wait in the line.
    public var limit: Int
    public var retry: RetryPolicy?
    /// Runs that expired on their budget are retried too (failed ones always are).
    public var retryExpired: Bool
    /// fleet = "one": a job starts only under a claim on a live etcd lease (FleetStarts).
    public var fleet = false

    /// The policy `record`'s attempt is retried under: a failed run, or one that expired
    /// on its budget with retry_expired; nil once its attempts are used up.
    func retry(after record: RunRecord) -> RetryPolicy? {
        guard let retry, record.attempt < retry.attempts,
              record.outcome == .failed || (record.outcome == .expired && record.expiry == .budget && retryExpired) else { return nil }
        return retry
    }
}

/// What a caller gets back, exactly once per submission: after the last attempt, or
/// when the job was cancelled before it ran.
public struct JobCompletion: Sendable {
    public let key: JobKey
    public let subject: JobSubject
    /// One per attempt, oldest first; never empty.
    public let records: [RunRecord]

    public var final: RunRecord { records[records.count - 1] }
}

/// What the engine holds of one submission: waiting in the line or for a retry, then
/// running as `Active`.
extension JobEngine {
    struct Waiting {
        let runID: RunID
        let subject: JobSubject
        let attempt: Int
        let earlier: [RunRecord]
        let reply: Reply
        let submittedAt: MonotonicInstant
        /// A fleet job's claim, once it holds one (FleetStarts).
        var claim: FleetClaimHold?
        /// Its start latency is in the metrics already: it was put back after its child ran
        /// short of descriptors or processes (JobEngine.shortOfResources).
        var startCounted = false

        func claimed(_ claim: FleetClaimHold?) -> Waiting {
            var item = self
            item.claim = claim
            return item
        }

        /// The same work with the files still there (JobSubject.checkedBeforeStart).
        func narrowed(to subject: JobSubject) -> Waiting {
            var item = Waiting(runID: runID, subject: subject, attempt: attempt, earlier: earlier, reply: reply, submittedAt: submittedAt).claimed(claim)
            item.startCounted = startCounted
            return item
        }

        /// The next attempt, under a run ID of its own, after `records` (every attempt's so far).
        func nextAttempt(after records: [RunRecord]) -> Waiting {
            Waiting(runID: .random(), subject: subject, attempt: records[records.count - 1].attempt + 1, earlier: records, reply: reply,
                    submittedAt: submittedAt).claimed(claim)
        }

        /// Files of jobs that waited longer than this are checked again just before the start.
        static let startCheckAfterWaiting: Duration = .milliseconds(1)

        /// The work as it may start now; nil: none of its files is left. A file renamed,
        /// removed or replaced since it was admitted is not this job's any more: running it
        /// would fail on a missing path or read another file's content, and its new name (or
        /// the new file) has evidence of its own (docs/architecture.md). Work that starts as
        /// it is submitted was looked at an instant ago, by its admission; only work that
        /// waited (for a slot, a retry, a hold) is looked at again.
        func checkedBeforeStart(_ key: JobKey, logger: Logger) -> Waiting? {
            guard submittedAt.elapsed() > Self.startCheckAfterWaiting else { return self }
            switch subject.checkedBeforeStart() {
            case .unchanged:
                return self
            case .narrowed(let subject, let gone):
                logger.notice("\(key) run \(runID): \(gone.count) of its files were renamed, removed or replaced before it started and are left out (the first: \(LineEscaping.escaped(gone[0].path)))")
                return narrowed(to: subject)
            case .gone:
                return nil
            }
        }

        func describe(_ key: JobKey, priority: JobPriority?, now: MonotonicInstant) -> DumpValue {
            var fields: [DumpField] = [
                .init(key.kind.rawValue, .string(key.name)),
                .init("run_id", .string(runID.description)),
                .init("priority", .string(priority?.rawValue ?? "default")),
                .init("waiting", .string((now - submittedAt).compactDescription)),
            ]
            if let about = subject.summary { fields.append(.init("about", .bytes(about))) }
            return .object(fields)
        }
    }

    final class Active {
        let key: JobKey
        let waiting: Waiting
        var run: JobRun?

        init(key: JobKey, waiting: Waiting) {
            self.key = key
            self.waiting = waiting
        }

        /// Nil while the run is being started.
        func describe(now: MonotonicInstant) -> DumpValue? {
            guard let run else { return nil }
            var fields: [DumpField] = [.init(key.kind.rawValue, .string(key.name))]
            if let about = waiting.subject.summary { fields.append(.init("about", .bytes(about))) }
            if case .object(let more) = run.describe(now: now) { fields += more }
            return .object(fields)
        }
    }
}
