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

        func claimed(_ claim: FleetClaimHold?) -> Waiting {
            var item = self
            item.claim = claim
            return item
        }

        /// The same work with the files still there (JobSubject.checkedBeforeStart).
        func narrowed(to subject: JobSubject) -> Waiting {
            Waiting(runID: runID, subject: subject, attempt: attempt, earlier: earlier, reply: reply, submittedAt: submittedAt).claimed(claim)
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
