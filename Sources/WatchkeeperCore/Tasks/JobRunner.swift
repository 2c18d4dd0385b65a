import Dispatch
import Logging

/// Lets the drain's expire closure, created before the run, reach it; read and
/// written only on the tasks queue.
private final class RunReference: @unchecked Sendable {
    weak var run: JobRun?
}

/// Runs jobs with a global limit (`max_jobs`): the rest wait in order of priority,
/// first come first served within one. A job that has not started can be cancelled.
/// Every running job holds a WorkTracker token, so the daemon's drain waits for it and,
/// at the end of shutdown_grace, expires it through the job's own expiration path.
final class JobRunner: @unchecked Sendable {
    struct Pending {
        let request: JobRequest
        let sequence: UInt64
        let onStart: (JobRun) -> Void
        let onFinish: (RunRecord) -> Void
    }

    private let context: JobContext
    private let work: WorkTracker
    // Confined to the tasks queue.
    var maxJobs: Int
    private var pending = WaitingLine<Pending>()
    private var running: [String: (run: JobRun, token: WorkTracker.Token)] = [:]
    private var accepting = true
    private var sequence: UInt64 = 0
    private(set) var started: UInt64 = 0
    var onChange: (() -> Void)?

    init(context: JobContext, work: WorkTracker, maxJobs: Int) {
        self.context = context
        self.work = work
        self.maxJobs = maxJobs
    }

    var runningCount: Int { running.count }
    var pendingCount: Int { pending.count }

    func runs(named name: String) -> [JobRun] {
        running.values.map(\.run).filter { $0.request.name == name }
    }

    func isPending(named name: String) -> Bool {
        pending.contains { $0.request.name == name }
    }

    /// False once the daemon is draining.
    @discardableResult
    func submit(_ request: JobRequest, onStart: @escaping (JobRun) -> Void = { _ in }, onFinish: @escaping (RunRecord) -> Void) -> Bool {
        dispatchPrecondition(condition: .onQueue(context.queue.queue))
        guard accepting else { return false }
        sequence += 1
        let entry = Pending(request: request, sequence: sequence, onStart: onStart, onFinish: onFinish)
        pending.append(entry, lane: request.settings.priority.rank)
        pump()
        return true
    }

    /// Cancels a run that has not started. Its record says `cancelled`.
    @discardableResult
    func cancel(runID: String) -> Bool {
        guard let entry = pending.remove(where: { $0.request.runID == runID }) else { return false }
        entry.onFinish(Self.cancelledRecord(entry.request, detail: "cancelled before it started"))
        onChange?()
        return true
    }

    func expire(runID: String, reason: ExpiryReason) {
        running[runID]?.run.expire(reason)
    }

    /// The drain: nothing new starts, and what waits is cancelled.
    func stopAccepting() {
        accepting = false
        let cancelled = pending.removeAll()
        for entry in cancelled {
            entry.onFinish(Self.cancelledRecord(entry.request, detail: "cancelled: the daemon is stopping"))
        }
    }

    static func cancelledRecord(_ request: JobRequest, detail: String) -> RunRecord {
        RunRecord(name: request.name, runID: request.runID, attempt: request.attempt, outcome: .cancelled, scheduledAt: request.scheduledAt,
                  startedAt: nil, finishedAt: .now(), duration: .zero, exit: nil, expiry: nil, lateness: nil, detail: detail)
    }

    private func pump() {
        while running.count < maxJobs, let entry = pending.popFirst() {
            let queue = context.queue
            let reference = RunReference()
            guard let token = work.begin(entry.request.name, expire: {
                queue.async { reference.run?.expire(.shutdown) }
            }) else {
                entry.onFinish(Self.cancelledRecord(entry.request, detail: "cancelled: the daemon is stopping"))
                continue
            }
            let run = JobRun(request: entry.request, context: context, onProgress: { [weak self] in self?.onChange?() }) { [weak self] record in
                token.end()
                self?.running[record.runID] = nil
                entry.onFinish(record)
                self?.onChange?()
                self?.pump()
            }
            reference.run = run
            running[entry.request.runID] = (run, token)
            started += 1
            entry.onStart(run)
            run.start()
        }
        onChange?()
    }

    func describe(now: UInt64) -> DumpValue {
        .object([
            .init("max_jobs", .int(Int64(maxJobs))),
            .init("running", .int(Int64(running.count))),
            .init("waiting_total", .int(Int64(pending.count))),
            .init("waiting", .array(pending.first(50).map { entry in
                .object([
                    .init("task", .string(entry.request.name)),
                    .init("run_id", .string(entry.request.runID)),
                    .init("priority", .string(entry.request.settings.priority.rawValue)),
                    .init("waiting", .string(Duration.nanoseconds(Int64(now &- entry.request.submittedAt)).compactDescription)),
                ])
            })),
            .init("started_since_start", .int(Int64(started))),
        ])
    }
}

/// Runs waiting for a slot: one FIFO lane per priority, O(1) to add and to take, so a
/// burst of 100,000 file jobs costs no more per job than ten.
struct WaitingLine<Element> {
    private var lanes: [[Element]] = [[], [], []]
    private var heads = [0, 0, 0]

    var count: Int { zip(lanes, heads).reduce(0) { $0 + $1.0.count - $1.1 } }
    var isEmpty: Bool { count == 0 }

    mutating func append(_ element: Element, lane: Int) {
        lanes[lane].append(element)
    }

    mutating func popFirst() -> Element? {
        for lane in lanes.indices where heads[lane] < lanes[lane].count {
            let element = lanes[lane][heads[lane]]
            heads[lane] += 1
            if heads[lane] >= 1_024 && heads[lane] * 2 >= lanes[lane].count {
                lanes[lane].removeFirst(heads[lane])
                heads[lane] = 0
            }
            return element
        }
        return nil
    }

    /// In order: high, default, low; first come first within each.
    var ordered: [Element] { lanes.indices.flatMap { lanes[$0][heads[$0]...] } }

    func first(_ limit: Int) -> [Element] { Array(ordered.prefix(limit)) }

    func contains(where predicate: (Element) -> Bool) -> Bool {
        lanes.indices.contains { lanes[$0][heads[$0]...].contains(where: predicate) }
    }

    mutating func remove(where predicate: (Element) -> Bool) -> Element? {
        for lane in lanes.indices {
            if let index = lanes[lane][heads[lane]...].firstIndex(where: predicate) {
                return lanes[lane].remove(at: index)
            }
        }
        return nil
    }

    mutating func removeAll() -> [Element] {
        let all = ordered
        lanes = [[], [], []]
        heads = [0, 0, 0]
        return all
    }
}
