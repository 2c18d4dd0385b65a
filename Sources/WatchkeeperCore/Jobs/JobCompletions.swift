/// What becomes of the engine's records: each journaled and counted (the dump's outcomes,
/// the metrics), and a submission's records, every attempt's, handed back to whoever
/// submitted it, on their reply queue. Confined to the jobs queue.
final class JobCompletions {
    private let sink: LogSink
    private let metrics: JobMetrics?
    /// Told when work that held a fleet claim is done with it.
    private let fleetStarts: (any FleetJobStarts)?
    /// Outcomes per group, for the dump.
    private(set) var totals = OutcomeTally<JobKey, RunOutcome>()

    init(sink: LogSink, metrics: JobMetrics?, fleetStarts: (any FleetJobStarts)?) {
        self.sink = sink
        self.metrics = metrics
        self.fleetStarts = fleetStarts
    }

    /// `inBulk`: one of many ended together, which a line with their count already says.
    func journal(_ record: RunRecord, key: JobKey, subject: JobSubject, inBulk: Bool = false) {
        totals.add(record.outcome, to: key)
        metrics?.recorded(record, key: key)
        record.journal(to: sink, key: key, subject: subject, inBulk: inBulk)
    }

    /// Work cancelled before it became a job: its record is journaled and the caller told.
    func cancel(_ key: JobKey, _ item: JobEngine.Waiting, detail: String, inBulk: Bool = false) {
        complete(key, item, adding: .notStarted(key, runID: item.runID, attempt: item.attempt, subject: item.subject, outcome: .cancelled, detail: detail),
                 inBulk: inBulk)
    }

    /// A job that never started: its record is journaled and the caller told.
    private func complete(_ key: JobKey, _ item: JobEngine.Waiting, adding record: RunRecord, inBulk: Bool = false) {
        journal(record, key: key, subject: item.subject, inBulk: inBulk)
        deliver(key, item, records: item.earlier + [record])
    }

    /// A fleet job FleetStarts did not start. Held work goes back to its owner unjournaled
    /// (an outage would otherwise log every file of an inbox once a second).
    func notStartedByFleet(_ key: JobKey, _ item: JobEngine.Waiting, outcome: RunOutcome, detail: String) {
        let record = RunRecord.notStarted(key, runID: item.runID, attempt: item.attempt, subject: item.subject, outcome: outcome, detail: detail)
        if outcome == .held { return deliver(key, item, records: item.earlier + [record]) }
        complete(key, item, adding: record, inBulk: outcome == .ranElsewhere)
    }

    func deliver(_ key: JobKey, _ item: JobEngine.Waiting, records: [RunRecord]) {
        let completion = JobCompletion(key: key, subject: item.subject, records: records)
        // A shared inbox file's record (or release) goes to etcd now, before anything else.
        if let claim = item.claim, let fleet = fleetStarts {
            fleet.ended(FleetJob(key, item.subject, claim: nil), hold: claim, runID: item.runID, ok: completion.final.outcome == .ok)
        }
        if let replyQueue = item.reply.queue {
            // The handler belongs to the reply queue's owner and runs only there.
            let handler = UncheckedSendable(item.reply.handler)
            replyQueue.async { handler.value(completion) }
        } else {
            item.reply.handler(completion)
        }
    }
}
