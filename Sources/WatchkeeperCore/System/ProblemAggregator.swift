import Dispatch
import Logging

/// Repeated problems of one cause (a directory that cannot be listed or watched, with
/// EACCES, EMFILE, ENAMETOOLONG, ...) as one warning per cause per minute with a count and
/// an example, not one line per directory or per file. The first of a cause is said at
/// once; the rest of that minute are counted and said when the minute ends. Confined to
/// its owner's queue.
final class ProblemAggregator {
    private struct Cause {
        var total: UInt64 = 0
        var pending: UInt64 = 0
        var lastExample: String
        var lastAt: WallTime
    }

    private let logger: Logger
    private let owner: String
    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    private var causes: [String: Cause] = [:]
    private var order: [String] = []
    private var timer: RegisteredTimer?
    static let window: Duration = .seconds(60)

    init(owner: String, queue: SubsystemQueue, sources: SourceRegistry, logger: Logger) {
        self.owner = owner
        self.queue = queue
        self.sources = sources
        self.logger = logger
    }

    /// `cause` is the sentence without the object ("unable to list directories: permission
    /// denied (EACCES)"); `example` the path it happened to.
    func report(_ cause: String, example: String) {
        let now = WallTime.now()
        guard var entry = causes[cause] else {
            causes[cause] = Cause(total: 1, pending: 0, lastExample: example, lastAt: now)
            order.append(cause)
            logger.warning("\(cause): \(example)")
            armTimer()
            return
        }
        entry.total += 1
        entry.pending += 1
        entry.lastExample = example
        entry.lastAt = now
        causes[cause] = entry
        armTimer()
    }

    private func armTimer() {
        guard timer == nil else { return }
        let timer = sources.makeTimer(owner: owner, target: "repeated problems: one line per cause every \(Self.window.compactDescription)", on: queue) { [weak self] in
            self?.flush()
        }
        self.timer = timer
        timer.schedule(after: Self.window)
    }

    /// Says what was counted since the last line of each cause.
    func flush() {
        timer?.cancel()
        timer = nil
        var any = false
        for cause in order {
            guard var entry = causes[cause], entry.pending > 0 else { continue }
            logger.warning("\(cause): \(entry.pending) more in the last minute (\(entry.total) since start), the last: \(entry.lastExample)")
            entry.pending = 0
            causes[cause] = entry
            any = true
        }
        if any { armTimer() }
    }

    func describe() -> DumpValue {
        .array(order.compactMap { cause in
            causes[cause].map { entry in
                .object([
                    .init("cause", .string(cause)),
                    .init("count", .int(Int64(entry.total))),
                    .init("last", .string(entry.lastExample)),
                    .init("last_at", .string(entry.lastAt.iso8601)),
                ])
            }
        })
    }
}
