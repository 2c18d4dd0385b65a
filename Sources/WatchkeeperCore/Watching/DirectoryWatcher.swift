import Dispatch
import Logging
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Who a watch descriptor is for: a rule's directory, or the parent of a rule's missing
/// root (watched so the root is noticed the moment it appears).
enum WatchOwner: Hashable, Sendable, CustomStringConvertible {
    case rule(String)
    case parentOf(String)
    /// The directories above a rule's root, and those holding a symbolic link of its path:
    /// their locations are absolute paths without the leading slash.
    case ancestorsOf(String)

    var description: String {
        switch self {
        case .rule(let name): return name
        case .parentOf(let name): return "parent of \(name)"
        case .ancestorsOf(let name): return "ancestors of \(name)"
        }
    }
}

/// The watching subsystem's coordinator, on the watching queue: rules in, admitted files
/// out. It applies the rules (WatchingState holds them), opens what they need (the
/// WatchBackends, the MountWatcher, the WatchLedger's reader), and routes what the backends
/// report to the part whose duty it is: EntryEvents (entries of watched directories),
/// RootTracking (roots renamed away, deleted, replaced by a link or mounted over),
/// TreeScans (walks, rescans after lost events, the fallback scan), FileSettling (settle
/// windows, admission, jobs), HandledChanges (renames and attribute changes of handled
/// files), RulePollers and FleetInbox. Each part keeps its own state; everything here is
/// touched only on `queue`.
// @unchecked Sendable: confined to the watching queue (`queue`).
public final class DirectoryWatcher: DumpContributor, @unchecked Sendable {
    public let queue: SubsystemQueue
    /// The job engine, as far as the watcher needs it (a fake in the unit tests).
    private let jobs: any WatchJobSubmitting
    /// Where the backends come from: the kernel's, or a test's fake.
    private let kernel: WatchKernel
    private let state: WatchingState
    private var logger: Logger { state.logger }
    private var clock: any WatchClock { state.clock }
    private var mountsProblem: String?
    private(set) var overflowsTotal: UInt64 = 0
    /// Per backend, when its last batch without an overflow was read: no event before it was
    /// lost (a rescan after an overflow runs, for a rule without catch-up, what changed since).
    private var eventsCompleteAt: [WatchBackendKind: WallTime] = [:]
    private let startedAt: WallTime

    private lazy var problems: ProblemAggregator = ProblemAggregator(owner: "watching", queue: queue, sources: state.sources, logger: logger)
    /// What was handled before, and the state store's writes (the store given at init).
    private lazy var ledger: WatchLedger = {
        let ledger = WatchLedger(queue: queue, clock: clock, logger: logger, problems: problems, store: store)
        ledger.rulesToPrune = { [unowned self] in
            self.state.ordered.compactMap { rule in rule.settings.catchUp ? rule.root.map { (rule.name, $0) } : nil }
        }
        return ledger
    }()
    /// How directories are watched: the inotify instance, and the fanotify group of the
    /// trees that moved to it.
    private lazy var backends: WatchBackends = WatchBackends(kernel: kernel, queue: queue, sources: state.sources, problems: problems, logger: logger,
                                              environment: state.environment) { [unowned self] source, changes in
        self.handle(changes, from: source)
    }
    private lazy var changes: HandledChanges = HandledChanges(state: state, ledger: ledger)
    private lazy var fleet: FleetInbox = FleetInbox(state: state, cluster: cluster) { [unowned self] rule, relative, event in
        self.settling.enqueue(rule, relative: relative, event: event, fromScan: true)
    }
    private lazy var settling: FileSettling = FileSettling(state: state, jobs: jobs, ledger: ledger, changes: changes, fleet: fleet)
    private lazy var scans: TreeScans = TreeScans(state: state, backends: backends, problems: problems, settling: settling)
    private lazy var pollers: RulePollers = RulePollers(state: state, ledger: ledger, settling: settling)
    private lazy var roots: RootTracking = RootTracking(state: state, backends: backends, scans: scans, pollers: pollers, settling: settling)
    private lazy var events: EntryEvents = EntryEvents(ledger: ledger, settling: settling, changes: changes, scans: scans, pollers: pollers, fleet: fleet)

    /// `clock`: the dispatch clock on `queue` unless a test brings its own.
    init(queue: SubsystemQueue, context: JobContext, jobs: any WatchJobSubmitting, store: StateStore? = nil, cluster: FleetMember? = nil,
         clock: (any WatchClock)? = nil, kernel: WatchKernel = .linux) {
        self.queue = queue
        self.jobs = jobs
        self.store = store
        self.cluster = cluster
        self.kernel = kernel
        let clock = clock ?? DispatchWatchClock(sources: context.sources, queue: queue)
        state = WatchingState(queue: queue, logger: context.logger, sources: context.sources, environment: context.daemonEnvironment, clock: clock)
        startedAt = clock.wallNow
    }

    convenience init(queue: SubsystemQueue, engine: JobEngine, store: StateStore? = nil, cluster: FleetMember? = nil) {
        self.init(queue: queue, context: engine.context, jobs: engine, store: store, cluster: cluster)
    }

    /// This host in the fleet, when `[cluster]` is configured: shared inboxes claim their
    /// files through it.
    public let cluster: FleetMember?
    /// The state store the ledger writes to (none in tests without one).
    let store: StateStore?

    /// The rules, for the metrics and the tests.
    var rules: [String: WatchRule] { state.rules }
    var order: [String] { state.order }

    /// The backend of the rule's own tree (its ancestors are always inotify's).
    func treeBackend(of rule: WatchRule) -> WatchBackend? {
        backends.tree(of: rule)
    }

    public var dumpSectionName: String { "watches" }
    public var dumpQueue: SubsystemQueue { queue }

    // MARK: Rules

    /// First start and every reload. Unchanged rules keep their watches (no event is lost
    /// for them); rules whose job settings changed keep them too, and their waiting files
    /// move to the new settings; rules whose selection changed or that were removed are
    /// unwatched, and what they had waiting ends with a `cancelled` record each.
    func apply(_ settings: [WatchSettings], isStart: Bool, stateDirectory: String) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        if !settings.isEmpty { backends.openInotifyIfNeeded() }
        if state.mounts == nil && mountsProblem == nil && !settings.isEmpty && kernel.followsMounts { openMountWatcher() }
        if settings.contains(where: \.catchUp) { ledger.openIfNeeded(stateDirectory: stateDirectory) }
        for (name, rule) in state.rules {
            guard let new = settings.first(where: { $0.name == name }) else {
                retire(rule, reason: "the watch rule was removed by a reload")
                continue
            }
            guard new != rule.settings else { continue }
            guard new.selectsTheSameFiles(as: rule.settings) else {
                retire(rule, reason: "the watch rule's selection was changed by a reload; the new rule catches up the files it selects")
                continue
            }
            reconfigure(rule, to: new)
        }
        for new in settings where state.rules[new.name] == nil {
            let rule = WatchRule(settings: new)
            state.rules[new.name] = rule
            let group = rule.group
            jobs.queue.async { [jobs] in jobs.configure(group) }
            // Catch-up: files that arrived while the daemon was down (or before the rule
            // existed) and are not in the ledger as handled are handled now.
            roots.watchRoot(rule, catchUp: new.catchUp && ledger.isOpen)
        }
        state.order = settings.map(\.name)
        roots.armRecheckIfNeeded()
        ledger.armPruneIfNeeded()
        // At start-up too, after the catch-up listed the trees: a daemon restarted more often
        // than the hourly prune would otherwise never forget files that are gone.
        if isStart { ledger.prune() }
    }

    /// The same files in the same way, with other job settings: the watches stay.
    private func reconfigure(_ rule: WatchRule, to new: WatchSettings) {
        let reshaped = new.batchInput != rule.settings.batchInput
        rule.settings = new
        let group = rule.group
        if reshaped {
            // Waiting jobs were made for the old shape (one file, or a batch): the engine
            // hands them back in the same turn as the new settings, and their files go again
            // in the new shape.
            jobs.queue.async { [jobs, queue, settling] in
                let withdrawn = jobs.reshape(group)
                guard !withdrawn.isEmpty else { return }
                queue.async { settling.resubmit(withdrawn, rule: rule) }
            }
        } else {
            jobs.queue.async { [jobs] in jobs.configure(group) }
        }
        logger.info("watch \(rule.name) changed; its files waiting to settle or to run move to the new settings")
    }

    private func retire(_ rule: WatchRule, reason: String) {
        roots.unwatch(rule)
        settling.cancelSettling(rule, detail: reason)
        state.rules[rule.name] = nil
        let key = rule.key
        jobs.queue.async { [jobs] in jobs.remove(key, reason: reason) }
    }

    private func openMountWatcher() {
        do {
            let watcher = try MountWatcher(queue: queue.queue, onChange: { [unowned self] change in
                self.roots.mountsChanged(change)
            }, onReadFailure: { [unowned self] failure in
                self.problems.report("unable to read the mount table /proc/self/mountinfo", example: "\(failure)")
            })
            if case .failure(let failure) = watcher.start() { throw failure }
            state.mounts = watcher
        } catch {
            let problem = "unable to follow the mount table: \(error); a file system mounted over a watched directory is only noticed by the next rescan"
            mountsProblem = problem
            logger.warning("\(problem)")
        }
    }

    // MARK: Events

    func handle(_ changes: [WatchBackend.Change], from source: WatchBackendKind) {
        let now = clock.now
        let readAt = clock.wallNow
        var overflowedNow = false
        defer { if !overflowedNow { eventsCompleteAt[source] = readAt } }
        let closedNow = EntryEvents.ClosedInRead(changes)
        for change in changes {
            switch change {
            case .overflow:
                overflowedNow = true
                overflowed(source, lostSince: eventsCompleteAt[source] ?? startedAt)
            case .entry(let event, let locations):
                for location in locations {
                    switch location.owner {
                    case .rule(let name):
                        if let rule = state.rules[name] {
                            events.handleEntry(event, in: location, rule: rule, now: now, readAt: readAt, closedNow: closedNow)
                        }
                    case .parentOf(let name):
                        if let rule = state.rules[name], rule.isMissing, event.name == rule.location.awaitedName {
                            roots.watchRoot(rule, catchUp: true)
                        }
                    case .ancestorsOf(let name):
                        if let rule = state.rules[name] { roots.ancestorChanged(rule, at: location, event: event, why: nil) }
                    }
                }
            case .movedAway(_, let locations):
                directoryGone(locations, why: "was renamed away")
            case .deleted(_, let locations):
                directoryGone(locations, why: "was deleted")
            case .unmounted(_, let locations):
                for location in locations {
                    guard case .rule(let name) = location.owner, let rule = state.rules[name] else { continue }
                    roots.remount(rule, at: location.relative, why: "the file system under \(LineEscaping.escaped(rule.absolute(location.relative))) was unmounted")
                }
            case .watchGone(_, let locations):
                for case (.rule(let name), true) in locations.map({ ($0.owner, $0.relative.isEmpty) }) {
                    if let rule = state.rules[name] { roots.lose(rule, why: "is no longer watchable") }
                }
            case .missed(let locations):
                for case .rule(let name) in locations.map(\.owner) {
                    if let rule = state.rules[name] { scans.rescanForMissedEvents(rule) }
                }
            case .unattributed:
                break // counted by the backend
            }
        }
    }

    /// A watched directory renamed away or deleted: a rule's root is lost; a directory above a
    /// root means the root's path no longer leads there.
    private func directoryGone(_ locations: [WatchBackend.Location], why: String) {
        for location in locations {
            switch location.owner {
            case .rule(let name) where location.relative.isEmpty:
                if let rule = state.rules[name] { roots.lose(rule, why: why) }
            case .ancestorsOf(let name):
                if let rule = state.rules[name] { roots.ancestorChanged(rule, at: location, event: nil, why: why) }
            case .rule, .parentOf:
                break
            }
        }
    }

    /// IN_Q_OVERFLOW: the kernel dropped events. Every tree is scanned again; files not
    /// handled yet in the form they have now get their job, so nothing is lost. A rule
    /// without catch-up has no ledger to tell what was there before: it runs only the files
    /// changed since `lostSince` (every event before it was read), less a second for the
    /// read and the file system's coarse clock.
    private func overflowed(_ source: WatchBackendKind, lostSince: WallTime) {
        overflowsTotal += 1
        switch source {
        case .inotify:
            // The instance's queue was sized when it was made; the sysctl may have changed since.
            logger.warning("inotify event queue overflowed (\(overflowsTotal) time(s) so far; its size: fs.inotify.max_queued_events=\(backends.inotifyQueueSize)); rescanning every tree watched with inotify")
        case .fanotify:
            logger.warning("fanotify event queue overflowed (\(overflowsTotal) time(s) so far; its size: fs.fanotify.max_queued_events=\(FanotifyBackend.sysctl("max_queued_events") ?? "16384")); rescanning every tree watched with fanotify")
        }
        // Only the trees whose events were lost: the other backend's are intact.
        for rule in state.ordered where !rule.isMissing && rule.backend.backend == source {
            rule.counters.overflows += 1
            scans.rescan(rule, changedSince: rule.settings.catchUp ? nil : (lostSince.nanosecondsSinceEpoch ?? 0) - 1_000_000_000)
        }
    }

    // MARK: Stopping

    /// The drain: no new jobs from file events; files still settling end with a record.
    func stop() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        state.accepting = false
        for rule in state.ordered {
            rule.settleTimer?.cancel()
            rule.settleTimer = nil
            settling.cancelSettling(rule, detail: "the daemon is stopping")
            rule.scans.fallbackTimer?.cancel()
            rule.scans.fallbackTimer = nil
            rule.scans.listingTimer?.cancel()
            rule.scans.listingTimer = nil
            pollers.stopPolling(rule)
        }
        roots.stop()
        pollers.stop()
        ledger.stop()
    }

    /// A clean stop, once every job has its record: every record was submitted to the store
    /// when its job ended; the reader goes, so that the store, closing last, folds the
    /// write-ahead log into the file (Daemon.finishStopping).
    func close() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        changes.confirmChangesAtStop()
        ledger.close()
    }

    /// `watchkeeper history WATCH`: the files the rule handled last, from the ledger.
    public func history(rule: String, limit: Int, reply: @escaping @Sendable (Result<[DumpValue], VarlinkError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        ledger.history(rule: rule, limit: limit, reply: reply)
    }

    /// After a burst (the engine says when): the reader's page cache is given back; the
    /// store then writes what waits, gives back its own, and malloc's free memory.
    public func releaseMemoryAfterBurst() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        ledger.releaseMemory()
    }

    // MARK: Dump

    public func describeForDump() -> DumpValue {
        let now = clock.now
        let entries: [DumpValue] = state.ordered.map { rule in
            rule.describe(now: now, watchedDirectories: backends.tree(of: rule)?.watchedCount(of: .rule(rule.name)) ?? 0, ledgerSize: ledger.size(of: rule))
        }
        return .object(backends.describe() + [
            .init("overflows", .int(Int64(overflowsTotal))),
            .init("mounts", state.mounts?.describe() ?? .string(mountsProblem ?? "not needed")),
        ] + ledger.describe() + [
            .init("problems", problems.describe()),
            .init("rules", .array(entries)),
        ])
    }
}

/// `fleet = "one"`: the fleet's news about shared inboxes, for FleetInbox.
extension DirectoryWatcher: FleetFileListener {
    public var fleetFileQueue: any FleetQueue { queue }

    public func fleetFileReleased(rule name: String, relative: [UInt8]) {
        fleet.released(rule: name, relative: relative)
    }

    public func fleetFilesAvailable() {
        fleet.retryHeldFiles()
    }
}
