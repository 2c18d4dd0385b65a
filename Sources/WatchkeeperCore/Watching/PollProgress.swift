/// What a TreePoller has done and is doing, as the watching queue reads it at any time
/// (under the poller's Mutex) and the dump shows it: where it waits, what its passes and
/// second looks cost, and whether its file system answers.
struct PollProgress: Sendable {
    /// Set while a chunk or a second look runs: since when it has worked on `directory`.
    var busySince: MonotonicInstant?
    /// Relative to the rule's root (empty: the root itself).
    var directory: [UInt8] = []
    var passes: UInt64 = 0
    var passesStopped: UInt64 = 0
    /// The pass that ran past the interval (the next one started at once).
    var overruns: UInt64 = 0
    var lastPassWall: Duration?
    var lastPassCPU: Duration?
    /// Passes and second looks together: everything the poller's queue spent.
    var totalCPU: Duration = .zero
    var secondLookCPU: Duration = .zero
    var directoriesKnown = 0
    var filesKnown = 0
    var listedLastPass = 0
    var unchangedLastPass = 0
    var statsLastPass = 0
    var waitingToSettle = 0
    var handedOn: UInt64 = 0
    var settleRestarts: UInt64 = 0
    /// Second looks the file system failed (each stops the round of looks it was in).
    var secondLookFailures: UInt64 = 0
    /// No pass or second look before this: the file system failed the last ones.
    var retryAt: MonotonicInstant?
    /// Files followed from one path to another within the tree.
    var movesFollowed: UInt64 = 0
    var unreachableSince: MonotonicInstant?
    var lastError: String?

    /// A directory or stat this long in the making is a file system that stopped answering.
    static let stallAfter: Duration = .seconds(10)

    /// "polling", "unreachable for 42s: ...", "waiting 20s for the file system at /mnt/in/d".
    /// `absolute` turns a path relative to the rule's root into the one to show.
    func stateText(now: MonotonicInstant, absolute: ([UInt8]) -> [UInt8]) -> String {
        if let since = busySince, now - since >= Self.stallAfter {
            return "waiting \((now - since).compactDescription) for the file system (at \(LineEscaping.escaped(absolute(directory))))"
        }
        if let since = unreachableSince {
            var text = "unreachable for \((now - since).compactDescription): \(lastError ?? "?")"
            if let retryAt, retryAt > now { text += "; trying again in \((retryAt - now).compactDescription)" }
            return text
        }
        return passes == 0 ? "first pass" : "polling"
    }

    /// The dump's fields of a poller of `settings`.
    func describe(_ settings: TreePoller.Settings, now: MonotonicInstant, absolute: ([UInt8]) -> [UInt8]) -> [DumpField] {
        func ms(_ value: Duration?) -> DumpValue { value.map { .double(($0.secondsDouble * 1_000_000).rounded() / 1_000) } ?? .null }
        return [
            .init("tree", .bytes(absolute(settings.tree.relative))),
            .init("file_system", .string(settings.tree.fileSystemType)),
            .init("source", .string(settings.tree.source)),
            .init("why", .string(settings.tree.reason)),
            .init("interval_s", .double(settings.interval.secondsDouble)),
            .init("settle_s", .double(settings.settle.secondsDouble)),
            .init("unchanged_directories_files_every_passes", .int(Int64(settings.sweepEvery))),
            .init("state", .string(stateText(now: now, absolute: absolute))),
            .init("passes", .int(Int64(passes))),
            .init("passes_stopped", .int(Int64(passesStopped))),
            .init("overruns", .int(Int64(overruns))),
            .init("last_pass_ms", ms(lastPassWall)),
            .init("last_pass_cpu_ms", ms(lastPassCPU)),
            .init("cpu_total_ms", ms(totalCPU)),
            .init("second_looks_cpu_ms", ms(secondLookCPU)),
            .init("directories", .int(Int64(directoriesKnown))),
            .init("files", .int(Int64(filesKnown))),
            .init("listed_last_pass", .int(Int64(listedLastPass))),
            .init("unchanged_last_pass", .int(Int64(unchangedLastPass))),
            .init("stats_last_pass", .int(Int64(statsLastPass))),
            .init("waiting_to_settle", .int(Int64(waitingToSettle))),
            .init("handed_on", .int(Int64(handedOn))),
            .init("settle_restarts", .int(Int64(settleRestarts))),
            .init("second_look_failures", .int(Int64(secondLookFailures))),
            .init("moves_followed", .int(Int64(movesFollowed))),
            .init("retry_in_s", retryAt.map { .double(max(0, ($0 - now).secondsDouble)) } ?? .null),
            .init("last_error", lastError.map { .string($0) } ?? .null),
        ]
    }
}
