import Dispatch
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A component that can describe itself for the SIGUSR1 dump. `describeForDump`
/// runs on the component's own queue, so it reads its state without locks; the
/// dump waits for it only up to the configured limit.
public protocol DumpContributor: AnyObject, Sendable {
    var dumpSectionName: String { get }
    var dumpQueue: SubsystemQueue { get }
    func describeForDump() -> DumpValue
}

/// Builds the state dump on the diagnostics queue: asks every component for its
/// description in parallel, reports any that does not answer in time as stuck,
/// and writes the result to the journal and to <runtime_dir>/state.json.
/// Nothing here resets a counter: a dump only peeks.
// @unchecked Sendable: its settings and requests are confined to the diagnostics queue; cross-queue counters are in Mutexes.
public final class StateDump: @unchecked Sendable {
    public static let formatName = "watchkeeper.state-dump"
    public static let formatVersion: Int64 = 2

    public let queue: SubsystemQueue
    private let contributors: [DumpContributor]
    private let queues: [SubsystemQueue]
    private let sources: SourceRegistry
    private let sink: LogSink
    private let notifier: SystemdNotifier
    private let logger: Logger
    private let processStart: MonotonicInstant
    // Confined to `queue`.
    private var sequence: Int64 = 0
    private var runtimeDirectory: String
    private var componentTimeout: Duration
    private var lastWriteError: String?

    public init(queue: SubsystemQueue, contributors: [DumpContributor], queues: [SubsystemQueue], sources: SourceRegistry,
                sink: LogSink, notifier: SystemdNotifier, logger: Logger, processStart: MonotonicInstant, settings: DaemonSettings) {
        self.queue = queue
        self.contributors = contributors
        self.queues = queues
        self.sources = sources
        self.sink = sink
        self.notifier = notifier
        self.logger = logger
        self.processStart = processStart
        self.runtimeDirectory = settings.runtimeDirectory
        self.componentTimeout = settings.dumpComponentTimeout
    }

    public func apply(_ settings: DaemonSettings) {
        queue.async {
            self.runtimeDirectory = settings.runtimeDirectory
            self.componentTimeout = settings.dumpComponentTimeout
        }
    }

    public var statePath: String { runtimeDirectory + "/state.json" }

    /// Asked by the SIGUSR1 source's owner; the dump itself runs here.
    public func requestDump(reason: String) {
        queue.async { self.dump(reason: reason, toJournal: true) }
    }

    /// The last state written at shutdown, to state.json only; `then` runs on the
    /// diagnostics queue afterwards. Asynchronous because the dump asks the caller's
    /// queue to describe itself.
    public func writeFinalState(reason: String, then: @escaping @Sendable () -> Void) {
        queue.async {
            self.dump(reason: reason, toJournal: false)
            then()
        }
    }

    /// `watchkeeper dump`: the same dump, numbered and written to state.json like any other,
    /// handed to `then` (on the diagnostics queue) instead of the journal.
    public func requestDump(reason: String, then: @escaping @Sendable (DumpValue, String) -> Void) {
        queue.async {
            let (document, text) = self.dump(reason: reason, toJournal: false)
            then(document, text)
        }
    }

    /// Some sections of the dump and its header, for `watchkeeper status`, `tasks` and
    /// `watches`: not numbered, not written anywhere. Each owner describes itself on its
    /// own queue, as for a dump.
    public func snapshot(sections: Set<String>, then: @escaping @Sendable (DumpValue) -> Void) {
        queue.async { then(self.build(reason: "control", sections: sections)) }
    }

    @discardableResult
    private func dump(reason: String, toJournal: Bool) -> (DumpValue, String) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        sequence += 1
        let document = build(reason: reason)
        let json = document.json
        let text = "watchkeeper state dump #\(sequence) (\(reason))\n" + document.text(indent: 2)
        do {
            try writeFileAtomically(statePath, contents: json + "\n")
            lastWriteError = nil
        } catch {
            let message = "unable to write the state dump to \(statePath): \(error)"
            if lastWriteError != message {
                logger.warning("\(message)")
            }
            lastWriteError = message
        }
        if toJournal {
            sink.emit(fields: [
                ("MESSAGE_ID", MessageID.dump.rawValue),
                ("MESSAGE", text),
                ("PRIORITY", "6"),
                ("WATCHKEEPER_DUMP_SEQUENCE", String(sequence)),
                ("WATCHKEEPER_DUMP_FORMAT", "\(Self.formatName)/\(Self.formatVersion)"),
                ("WATCHKEEPER_DUMP_JSON", json),
            ], stderrText: text)
        }
        return (document, text)
    }

    /// The whole dump, or with `sections` only those components and no queue, source,
    /// resource or problem lists.
    func build(reason: String, sections: Set<String>? = nil) -> DumpValue {
        let started = MonotonicInstant.now
        let contributors = sections.map { wanted in self.contributors.filter { wanted.contains($0.dumpSectionName) } } ?? self.contributors
        let answers = collectContributions(contributors)
        let now = MonotonicInstant.now
        var fields: [DumpField] = [
            .init("format", .string(Self.formatName)),
            .init("format_version", .int(Self.formatVersion)),
            .init("sequence", .int(sequence)),
            .init("time", .string(WallTime.now().iso8601)),
            .init("reason", .string(reason)),
            .init("version", .string(WatchkeeperVersion.current)),
            .init("pid", .int(Int64(getpid()))),
            .init("uptime_s", .double((now - processStart).secondsDouble)),
            .init("status", .string(notifier.status)),
        ]
        var stuck: [DumpValue] = []
        for contributor in contributors {
            if let value = answers[contributor.dumpSectionName] {
                fields.append(.init(contributor.dumpSectionName, value))
            } else {
                fields.append(.init(contributor.dumpSectionName, .object([
                    .init("stuck", .bool(true)),
                    .init("queue", .string(contributor.dumpQueue.label)),
                    .init("no_answer_within_s", .double(componentTimeout.secondsDouble)),
                ])))
                stuck.append(.string(contributor.dumpSectionName))
            }
        }
        guard sections == nil else { return .object(fields + [.init("stuck_components", .array(stuck))]) }
        fields.append(.init("queues", .array(queues.map { describe($0, now: now) })))
        fields.append(.init("sources", .array(sources.all.map { $0.describe(now: now) })))
        fields.append(.init("resources", ResourceUsage.current().dumpValue))
        let problems = sink.problems.snapshot()
        fields.append(.init("recent_problems", .object([
            .init("total_since_start", .int(Int64(problems.total))),
            .init("capacity", .int(Int64(problems.capacity))),
            .init("entries", .array(problems.entries.map { entry in
                .object([.init("time", .string(entry.time.iso8601)), .init("level", .string(entry.level)), .init("message", .string(entry.message))])
            })),
        ])))
        fields.append(.init("stuck_components", .array(stuck)))
        fields.append(.init("dump_build_ms", .double(started.elapsed().secondsDouble * 1e3)))
        return .object(fields)
    }

    private func describe(_ subsystem: SubsystemQueue, now: MonotonicInstant) -> DumpValue {
        let probe = subsystem.probeState
        var fields: [DumpField] = [
            .init("label", .string(subsystem.label)),
            .init("qos", .string(subsystem.qosName)),
            .init("pending", .int(Int64(subsystem.pendingItems))),
            .init("last_probe_latency_ms", probe.lastLatency.map { .double($0.secondsDouble * 1e3) } ?? .null),
        ]
        if let since = probe.outstandingSince, now - since > .seconds(1) {
            fields.append(.init("unanswered_probe_for_s", .double((now - since).secondsDouble)))
        }
        return .object(fields)
    }

    /// Every contributor is asked at once; one deadline bounds the wait, so a stuck
    /// component costs the dump `componentTimeout`, not a hang.
    private func collectContributions(_ contributors: [DumpContributor]) -> [String: DumpValue] {
        askOnTheirQueues(within: componentTimeout, contributors.map { contributor in
            (contributor.dumpSectionName, contributor.dumpQueue, { contributor.describeForDump() })
        })
    }
}

/// Asks every component its question on its own queue, all at once, and waits for the
/// answers with one deadline: those that came in time, by name. The caller's queue waits
/// (the dump's, the metrics'), never a component's own.
func askOnTheirQueues<Answer: Sendable>(
    within timeout: Duration, _ questions: [(name: String, queue: SubsystemQueue, ask: @Sendable () -> Answer)]
) -> [String: Answer] {
    let answers = Mutex<[String: Answer]>([:])
    let group = DispatchGroup()
    for question in questions {
        group.enter()
        question.queue.async {
            let answer = question.ask()
            answers.withLock { $0[question.name] = answer }
            group.leave()
        }
    }
    _ = group.wait(timeout: .now() + timeout.dispatchInterval)
    return answers.withLock { $0 }
}
