import Logging

/// How a run ended, for the journal record, the dump and the history.
public struct RunRecord: Sendable, Equatable {
    public let name: String
    public let runID: String
    public let attempt: Int
    public let outcome: RunOutcome
    public let scheduledAt: WallTime?
    public let startedAt: WallTime?
    public let finishedAt: WallTime
    public let duration: Duration
    public let exit: ProcessExit?
    public let expiry: ExpiryReason?
    /// Time between the scheduled instant and the actual start.
    public let lateness: Duration?
    public let detail: String?

    public var summary: String {
        var text = outcome.rawValue
        switch exit {
        case .exited(let code)?: text += " (exit \(code))"
        case .signaled(let signal, let core)?: text += " (\(HandledSignals.name(signal))\(core ? ", core dumped" : ""))"
        case nil: break
        }
        switch expiry {
        case .budget?: text += " after its budget ran out"
        case .shutdown?: text += " after its shutdown grace ran out"
        case .replaced?: text += " after its replacement was started"
        case .cancelled?: text += " after it was cancelled"
        case .fleetLeaseLost?: text += " after its host lost its etcd lease"
        case nil: break
        }
        if let detail { text += ": \(detail)" }
        return text
    }

    var dumpValue: DumpValue {
        var fields: [DumpField] = [
            .init("run_id", .string(runID)),
            .init("outcome", .string(outcome.rawValue)),
            .init("started_at", startedAt.map { .string($0.iso8601) } ?? .null),
            .init("duration", .string(duration.compactDescription)),
        ]
        switch exit {
        case .exited(let code)?: fields.append(.init("exit_code", .int(Int64(code))))
        case .signaled(let signal, _)?: fields.append(.init("signal", .string(HandledSignals.name(signal))))
        case nil: break
        }
        if attempt > 1 { fields.append(.init("attempt", .int(Int64(attempt)))) }
        if let detail { fields.append(.init("detail", .string(detail))) }
        return .object(fields)
    }
}

extension RunRecord {
    /// One structured journal entry per run, for tasks and watch rules alike: the task's or
    /// the rule's own field (never both), and for files the path as bytes, exactly as the
    /// kernel gave it (the journal keeps non-UTF-8 values as they are).
    /// `inBulk`: one of many cancelled together (a reload, the drain), which one notice with
    /// their count already says: journaled at info priority rather than notice, so that
    /// `journalctl -p notice` shows the count and not 3,000 lines; still one record per run
    /// (docs/operations.md), which at debug priority the default log level dropped.
    func journal(to sink: LogSink, key: JobKey, subject: JobSubject, inBulk: Bool = false) {
        var pairs: [(key: String, value: [UInt8])] = [
            (key.kind.rawValue, Array(name.utf8)),
            ("run_id", Array(runID.utf8)),
            ("outcome", Array(outcome.rawValue.utf8)),
            ("duration_ms", Array(String(duration.nanosecondsClamped / 1_000_000).utf8)),
            ("attempt", Array(String(attempt).utf8)),
        ]
        switch subject {
        case .schedule: break
        case .file(let file):
            pairs.append(("path", file.path))
            pairs.append(("event", Array(file.event.rawValue.utf8)))
        case .batch(let files, _):
            pairs.append(("batch_size", Array(String(files.count).utf8)))
            if let first = files.first { pairs.append(("path", first.path)) }
        }
        if let scheduledAt { pairs.append(("scheduled_at", Array(scheduledAt.iso8601.utf8))) }
        if let startedAt { pairs.append(("started_at", Array(startedAt.iso8601.utf8))) }
        if let lateness { pairs.append(("lateness_ms", Array(roundedString(Double(lateness.nanosecondsClamped) / 1e6, digits: 3).utf8))) }
        switch exit {
        case .exited(let code)?: pairs.append(("exit_code", Array(String(code).utf8)))
        case .signaled(let signal, _)?: pairs.append(("signal", Array(HandledSignals.name(signal).utf8)))
        case nil: break
        }
        if let expiry { pairs.append(("expiry", Array(expiry.rawValue.utf8))) }
        var message = "\(key) run \(runID)"
        if let about = subject.summary { message += " (\(LineEscaping.escaped(about)))" }
        message += ": \(summary)"
        // Another host's run, or none: no time of this host's to tell.
        if outcome != .ranElsewhere && outcome != .held { message += " in \(duration.compactDescription)" }
        if let lateness, lateness > .milliseconds(1) { message += ", started \(lateness.compactDescription) late" }
        let level: Logger.Level
        switch outcome {
        case .ok, .ranElsewhere: level = .info  // another host's run of a fleet fire: the fleet working
        case .cancelled: level = inBulk ? .info : .notice
        case .held: level = .notice
        default: level = .warning
        }
        guard level >= sink.level else { return }
        if level >= .warning { sink.problems.record(level: level.rawValue, message: message) }
        // The journal's fields only for the journal: on stderr the line alone is shown.
        var fields: [(name: String, value: [UInt8])] = []
        if sink.target == .journal {
            fields = [
                ("MESSAGE", Array(message.utf8)),
                ("PRIORITY", Array(String(JournalFields.priority(level)).utf8)),
                ("MESSAGE_ID", Array(MessageID.runFinished.rawValue.utf8)),
            ]
            for (name, value) in pairs { fields.append((JournalFields.fieldName(forMetadataKey: name), value)) }
        }
        // The message already holds the path escaped (as the journal's MESSAGE shows it):
        // escaping its backslashes again would show `\u202e` as `\\u202e` on stderr.
        let time = WallTime.now()
        let (shown, shownPairs) = (message, pairs)
        sink.emit(bytes: fields, stderrText: "\(time.iso8601) \(level.rawValue): \(LineEscaping.controlsEscaped(shown))"
                      + LogSink.metadataSuffix(shownPairs))
    }
}

extension RunRecord {
    /// The record of an attempt that never started (cancelled, held, ran elsewhere): no
    /// start, no exit, finished now.
    static func notStarted(_ key: JobKey, runID: RunID, attempt: Int, subject: JobSubject, outcome: RunOutcome, detail: String) -> RunRecord {
        RunRecord(name: key.name, runID: runID.description, attempt: attempt, outcome: outcome, scheduledAt: subject.scheduledAt,
                  startedAt: nil, finishedAt: .now(), duration: .zero, exit: nil, expiry: nil, lateness: nil, detail: detail)
    }
}

extension RunRecord {
    /// The record of an attempt that was started: late by the time from its scheduled
    /// instant to its start.
    static func ran(_ request: JobRequest, outcome: RunOutcome, startedAt: WallTime?, finishedAt: WallTime, duration: Duration,
                    exit: ProcessExit?, expiry: ExpiryReason?, detail: String?) -> RunRecord {
        var lateness: Duration?
        if let scheduled = request.scheduledAt, let startedAt {
            let seconds = startedAt.secondsSinceEpoch - scheduled.secondsSinceEpoch
            let nanos = Int64(startedAt.nanoseconds) - Int64(scheduled.nanoseconds)
            lateness = .nanoseconds(seconds * 1_000_000_000 + nanos)
        }
        return RunRecord(name: request.name, runID: request.runID, attempt: request.attempt, outcome: outcome, scheduledAt: request.scheduledAt,
                         startedAt: startedAt, finishedAt: finishedAt, duration: duration, exit: exit, expiry: expiry, lateness: lateness, detail: detail)
    }
}
