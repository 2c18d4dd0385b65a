import CWatchkeeperSystem
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The watcher's side of the file ledger, on the watching queue: the read-only connection
/// that admission asks whether a file was handled before, the store it hands records, moves
/// and prunes to, and when to prune (at start-up, hourly, and soon after many deletions).
/// The coordinator (DirectoryWatcher) owns one and says which rules there are.
final class WatchLedger {
    private let queue: SubsystemQueue
    /// Now, and the prune timers.
    private let clock: any WatchClock
    private let logger: Logger
    private let problems: ProblemAggregator
    /// The one writer of the state file (none in tests without one).
    let store: StateStore?
    /// The file ledger as admission reads it: a connection of this queue's own. What the
    /// store has not committed yet is in `WatchRule.handled`.
    private(set) var reader: StateReader?
    private(set) var problem: String?
    private var rebuilt: String?
    private var stopped = false
    private var deletionsSincePrune = 0
    private var pruneTimer: (any WatchTimer)?
    private var pruneSoonTimer: (any WatchTimer)?
    /// The rules a prune walks, with their roots: the coordinator's, asked when one is due.
    var rulesToPrune: () -> [(name: String, root: [UInt8])] = { [] }

    static let pruneInterval: Duration = .seconds(3_600)
    /// Files deleted or moved away beyond which the ledger is pruned soon, not at the next hour.
    static let pruneAfterDeletions = 10_000
    static let pruneDelayAfterDeletions: Duration = .seconds(10)

    init(queue: SubsystemQueue, clock: any WatchClock, logger: Logger, problems: ProblemAggregator, store: StateStore?) {
        self.queue = queue
        self.store = store
        self.clock = clock
        self.logger = logger
        self.problems = problems
    }

    var isOpen: Bool { reader != nil }

    /// The store opened the file (and said if it had to rebuild it); this queue reads it
    /// through a connection of its own. Tried once: a failure is reported and kept.
    func openIfNeeded(stateDirectory: String) {
        guard reader == nil && problem == nil else { return }
        switch store?.openReader() ?? .failure(StateReaderUnavailable(reason: "no state store for \(stateDirectory)")) {
        case .success(let opened):
            reader = opened.reader
            rebuilt = opened.rebuilt
        case .failure(let why):
            problem = why.reason
            logger.error("watch rules will not catch up files that arrived while watchkeeper was down: \(why.reason)")
        }
    }

    // MARK: Reads

    /// Handled successfully in this form in an earlier life of the daemon, or earlier in this
    /// one with its record committed: at this path, or, for a file that may have been moved
    /// (found by a scan, or moved in), at another path it was moved from; then the ledger
    /// follows. A file just written needs one lookup by path, not two.
    ///
    /// The reader sees what the store has committed. A success whose record is not committed
    /// yet is in `rule.memory.handled` by inode, whatever its path now, and callers ask that first;
    /// so no write has to be waited for here. A move still waiting in the store is harmless:
    /// the entry is found at its old path by identity, and the move submitted below changes
    /// nothing once the earlier one has moved it (FileLedger.move).
    ///
    /// `replacedAnother`: a poll saw this name hold another inode before (TreePoller.Settled),
    /// so the file came here by a rename. An entry here of which it looks renamed (only its
    /// change time moved) is then its own, followed here already: the other half of an
    /// exchange, looked up first, swapped the two names' entries (FileLedger.follow). It takes
    /// the file's new form. A change in place (`cp -p`) keeps the inode at the name and runs.
    func handledBefore(_ rule: WatchRule, relative: [UInt8], identity: FileIdentity, mayHaveMoved: Bool,
                       replacedAnother: Bool = false) -> Bool {
        guard rule.settings.catchUp, let reader else { return false }
        do {
            let held = try reader.entry(rule: rule.name, path: relative)
            if let entry = held {
                if entry.identity.sameFile(as: identity) { return entry.outcome == RunOutcome.ok.rawValue }
                if replacedAnother && entry.outcome == RunOutcome.ok.rawValue && entry.identity.renamed(as: identity) {
                    rule.counters.movesFollowed += 1
                    store?.submit(.ledgerFollow(rule: rule.name, from: relative, to: relative, known: entry.identity, now: identity))
                    return true
                }
            }
            // In a polled tree no event says what was renamed: a handled file found under
            // another name with only its change time moved is taken for that file, moved.
            let found = mayHaveMoved ? try reader.entries(rule: rule.name, identity: identity, renamed: rule.isPolled(relative)) : []
            guard let moved = Self.movedEntry(among: found, held: held, relative: relative, identity: identity) else {
                if let held { explainRunAgain(rule, relative, held: held, now: identity, replacedAnother: replacedAnother) }
                return false
            }
            rule.counters.movesFollowed += 1
            store?.submit(.ledgerFollow(rule: rule.name, from: moved.path, to: relative, known: moved.identity, now: identity))
            return true
        } catch {
            problems.report("unable to read the file ledger", example: "\(error)")
            return false
        }
    }

    /// The entry a file with none of its own at its name came from, among the ok entries of
    /// its form (`found`, read after `held`, the entry at its name): one at another name (the
    /// file moved; the ledger follows it here). Or one at its name now, where `held` was
    /// another inode's: the two reads are two statements, and the other half of an exchange,
    /// committed between them, swapped the two names' entries (FileLedger.follow), so this
    /// file's entry reached its name after it was read there. (CI's tools run caught a polled
    /// exchange run again so on 34c61ac: the entry at the name was the other file's, and the
    /// file's own was found at that very name.) Otherwise nil: an entry of the same inode at
    /// its name all along is a change in place (`cp -p`), which runs.
    static func movedEntry(among found: [LedgerEntry], held: LedgerEntry?, relative: [UInt8], identity: FileIdentity) -> LedgerEntry? {
        let handled = found.filter { $0.outcome == RunOutcome.ok.rawValue }
        if let elsewhere = handled.first(where: { $0.path != relative }) { return elsewhere }
        guard let held, !held.identity.sameInode(as: identity) else { return nil }
        return handled.first { $0.path == relative }
    }

    /// Why a file handled before runs again, for whoever reads the debug log (a test that
    /// caught a file run twice, an administrator asking why): the form the ledger held at its
    /// name, and the form found now.
    private func explainRunAgain(_ rule: WatchRule, _ relative: [UInt8], held: LedgerEntry, now: FileIdentity, replacedAnother: Bool) {
        func form(_ identity: FileIdentity) -> String {
            let optional = { (value: Int64?) in value.map(String.init) ?? "none" }
            return "inode \(identity.inode), size \(identity.size), mtime_ns \(identity.modifiedNanoseconds), ctime_ns \(optional(identity.changedNanoseconds)), "
                + "btime_ns \(optional(identity.bornNanoseconds)), generation \(identity.generation.map(String.init) ?? "none")"
        }
        // All inside the message, which is made only when debug lines are kept.
        logger.debug("watch \(rule.name): \(LineEscaping.escaped(rule.absolute(relative))) runs again: the ledger held it (\(held.outcome), \(held.handledAt.iso8601)) as \(form(held.identity)), and it is now \(form(now))\(replacedAnother ? "; a poll saw another inode at that name before" : "")")
    }

    /// The rule's entry at `relative` (nil when the ledger is not open, has none, or cannot
    /// be read: that is reported).
    func entry(_ rule: WatchRule, path relative: [UInt8]) -> LedgerEntry? {
        guard let reader else { return nil }
        do {
            return try reader.entry(rule: rule.name, path: relative)
        } catch {
            problems.report("unable to read the file ledger", example: "\(error)")
            return nil
        }
    }

    /// `watchkeeper history WATCH`: the files the rule handled last. Asked of the store from
    /// this queue, after every completion handled here: their records were submitted before
    /// the question, so a job that just ended is in the answer.
    func history(rule: String, limit: Int, reply: @escaping @Sendable (Result<[DumpValue], VarlinkError>) -> Void) {
        guard reader != nil, let store else {
            return reply(.failure(ControlInterface.ErrorName.unavailable.error([.init("reason", .string("the file ledger is not open: \(problem ?? "unknown")"))])))
        }
        store.ledgerHistory(rule: rule, limit: limit) { result in
            switch result {
            case .failure(let error):
                reply(.failure(ControlInterface.ErrorName.unavailable.error([.init("reason", .string("\(error)"))])))
            case .success(let rows):
                reply(.success(rows.map { entry, run in Self.historyRow(entry, run) }))
            }
        }
    }

    private static func historyRow(_ entry: LedgerEntry, _ run: LedgerRun?) -> DumpValue {
        .object([
            .init("run_id", run.map { .string($0.runID) } ?? .null),
            .init("outcome", .string(entry.outcome)),
            .init("started_at", run?.startedAt.map { .string($0.iso8601) } ?? .null),
            .init("finished_at", .string(entry.handledAt.iso8601)),
            .init("duration_s", run.map { .double(Double($0.durationNanoseconds) / 1e9) } ?? .null),
            .init("exit_code", run?.exitCode.map { .int(Int64($0)) } ?? .null),
            .init("signal", run?.signal.map { .string(HandledSignals.name($0)) } ?? .null),
        ] + pathFields(entry.path))
    }

    /// `path` a string as the interface declares it; a name that is not UTF-8 escaped, and
    /// its bytes in `path_bytes` (the dump's JSON carries such a name as an array).
    static func pathFields(_ path: [UInt8]) -> [DumpField] {
        if let text = String(validating: path, as: UTF8.self) { return [.init("path", .string(text))] }
        return [.init("path", .string(LineEscaping.escaped(path))), .init("path_bytes", .array(path.map { .int(Int64($0)) }))]
    }

    // MARK: Writes

    /// A job's final outcome for its files (cancelled ones are left for the next catch-up).
    /// The store commits them with the others that ended meanwhile (group commit) and says
    /// so through `committed`, on this queue; until then `rule.memory.handled` knows.
    /// `identities` are the files' forms to record, in the subject's order (nil: none).
    func record(_ completion: JobCompletion, identities: [FileIdentity?], rule: WatchRule, committed: @escaping @Sendable ([LedgerRecord]) -> Void) {
        let outcome = completion.final.outcome
        guard outcome != .cancelled, rule.settings.catchUp, reader != nil, let store else { return }
        let final = completion.final
        var exitCode: Int32?
        var signal: Int32?
        switch final.exit {
        case .exited(let code)?: exitCode = code
        case .signaled(let number, _)?: signal = number
        case nil: break
        }
        let run = LedgerRun(runID: final.runID, startedAt: final.startedAt, durationNanoseconds: final.duration.nanosecondsClamped,
                            exitCode: exitCode, signal: signal)
        let now = clock.wallNow
        let records: [LedgerRecord] = zip(completion.subject.files, identities).compactMap { file, identity in
            identity.map { LedgerRecord(rule: rule.name, path: Array(file.relative), identity: $0, outcome: outcome.rawValue, handledAt: now, run: run) }
        }
        guard !records.isEmpty else { return }
        store.submit(.ledgerRecords(records), confirmOn: queue) { committed(records) }
    }

    /// A rename or an attribute change of a handled file, seen and confirmed by the watcher:
    /// the entry held in form `known` at `from` goes to `to` in form `now` (FileLedger.follow),
    /// behind every record submitted before it. `committed` runs on this queue once it is in.
    func follow(_ rule: WatchRule, from: [UInt8], to: [UInt8], known: FileIdentity, now: FileIdentity,
                committed: @escaping @Sendable () -> Void) {
        guard rule.settings.catchUp, reader != nil, let store else { return }
        store.submit(.ledgerFollow(rule: rule.name, from: from, to: to, known: known, now: now), confirmOn: queue, confirmed: committed)
    }

    /// A directory moved within the tree: its entries follow it, so its files are found
    /// handled at their new paths instead of running again. Behind every record submitted
    /// before it, so those move too.
    func moved(_ rule: WatchRule, from: [UInt8], to: [UInt8]) {
        guard rule.settings.catchUp, reader != nil, let store else { return }
        store.submit(.ledgerMove(rule: rule.name, from: from, to: to))
        logger.debug("watch \(rule.name): \(LineEscaping.escaped(from)) moved to \(LineEscaping.escaped(to)); its ledger entries follow it")
    }

    /// After a burst: the reader's page cache is given back; the store then writes what
    /// waits, gives back its own, and malloc's free memory.
    func releaseMemory() {
        reader?.releaseMemory()
        if let store { store.releaseMemory() } else { _ = malloc_trim(0) }
    }

    // MARK: Pruning

    /// Once an hour the ledger forgets files that no longer exist, so the state directory
    /// does not grow with every file ever handled (docs/configuration.md, catch_up).
    func armPruneIfNeeded() {
        guard pruneTimer == nil, reader != nil, !stopped else { return }
        let timer = clock.makeTimer(owner: "watching", target: "file ledger: forget files that are gone, every \(Self.pruneInterval.compactDescription)") { [unowned self] in
            self.prune()
        }
        timer.schedule(at: clock.now + Self.pruneInterval, repeating: Self.pruneInterval)
        pruneTimer = timer
    }

    /// A file or directory left a tree: after many, a prune is scheduled (once), so a tree
    /// emptied by a cleanup does not leave its rows for an hour; the rows of deleted files are
    /// what an inode reused with a preserved mtime used to match.
    func noteDeletion() {
        deletionsSincePrune += 1
        guard deletionsSincePrune >= Self.pruneAfterDeletions, reader != nil, !stopped, pruneSoonTimer == nil else { return }
        let timer = clock.makeTimer(owner: "watching", target: "file ledger: forget files that are gone, after \(Self.pruneAfterDeletions) deletions") { [weak self] in
            guard let self else { return }
            self.pruneSoonTimer?.cancel()
            self.pruneSoonTimer = nil
            self.prune()
        }
        timer.schedule(at: clock.now + Self.pruneDelayAfterDeletions)
        pruneSoonTimer = timer
    }

    /// The store walks each rule's entries (one lstat each) on its own queue, deletes those
    /// whose file is gone behind the writes submitted before, says how many, and checkpoints.
    func prune() {
        deletionsSincePrune = 0
        guard reader != nil, let store else { return }
        for (name, root) in rulesToPrune() { store.prune(rule: name, root: root) }
    }

    // MARK: Stopping and the dump

    /// The drain: no more prunes.
    func stop() {
        stopped = true
        pruneTimer?.cancel()
        pruneTimer = nil
        pruneSoonTimer?.cancel()
        pruneSoonTimer = nil
    }

    /// A clean stop, once every job has its record: the reader goes, so that the store,
    /// closing last, folds the write-ahead log into the file (Daemon.finishStopping).
    func close() {
        reader?.close()
        reader = nil
    }

    /// How many entries a rule has, for its dump entry (null: the rule does not catch up).
    func size(of rule: WatchRule) -> DumpValue {
        guard rule.settings.catchUp, let reader else { return .null }
        do {
            return .int(Int64(try reader.count(rule: rule.name)))
        } catch {
            return .string("unavailable: \(error)")
        }
    }

    func describe() -> [DumpField] {
        [
            .init("ledger", reader.map { .string($0.path) } ?? .null),
            .init("ledger_problem", problem.map { .string($0) } ?? .null),
            .init("ledger_rebuilt", rebuilt.map { .string($0) } ?? .null),
        ]
    }
}
