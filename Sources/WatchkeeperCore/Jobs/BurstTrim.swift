import CWatchkeeperSystem

#if canImport(Glibc)
import Glibc
#endif

/// Gives memory back to the system a moment after a burst of waiting jobs is over, instead
/// of keeping the peak for the daemon's life: the waiting line and the records took it,
/// and glibc keeps freed memory in its arenas unless asked. The moment lets the callers
/// take their completions first (the watcher frees its per-file state only then).
/// Confined to the jobs queue.
final class BurstTrim {
    /// A waiting line this long is a burst.
    static let burstSize = 1_000
    static let delay = Duration.seconds(2)

    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    /// The longest the waiting line was since the last time the engine went idle.
    private(set) var peakWaiting = 0
    private var timer: RegisteredTimer?

    init(queue: SubsystemQueue, sources: SourceRegistry) {
        self.queue = queue
        self.sources = sources
    }

    /// After each turn of the engine: `waiting` jobs in the line, `idle` when none runs.
    /// `then` runs on the jobs queue after the trim, for the owners of other caches.
    func observe(waiting: Int, idle: Bool, then: @escaping () -> Void) {
        peakWaiting = max(peakWaiting, waiting)
        guard peakWaiting >= Self.burstSize && waiting == 0 && idle else { return }
        peakWaiting = 0
        if timer == nil {
            timer = sources.makeTimer(owner: "jobs", target: "give memory back after a burst of \(Self.burstSize)+ waiting jobs", on: queue) {
                _ = malloc_trim(0)
                then()
            }
        }
        timer?.schedule(after: Self.delay)
    }
}
