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

/// The watching subsystem's coordinator, on the watching queue: it owns the watch backends
/// (InotifyBackend: the inotify instance and the WatchTable of who each descriptor is for;
/// FanotifyBackend for the rules on huge trees),
/// the mount table watcher, the ledger's reader, and the rules (WatchRule: selection, settle, admission); it
/// routes typed events to rules, follows roots that are renamed away, deleted, replaced by
/// a link or mounted over, scans (TreeScanner) wherever events may have been missed, and
/// hands settled files to the job engine. Everything here is touched only on `queue`.
public final class DirectoryWatcher: DumpContributor, @unchecked Sendable {
    public let queue: SubsystemQueue
    let context: JobContext
    /// The job engine, as far as the watcher needs it (a fake in the unit tests).
    let jobs: any WatchJobSubmitting
    /// Now, and the timers of settle windows, confirmations, rechecks and listings.
    let clock: any WatchClock
    /// Where the backends come from: the kernel's, or a test's fake.
    let kernel: WatchKernel
    var logger: Logger { context.logger }
    /// How directories are watched: the inotify instance, and the fanotify group of the
    /// trees that moved to it.
    lazy var backends = WatchBackends(kernel: kernel, queue: queue, sources: context.sources, problems: problems, logger: logger,
                                      environment: context.daemonEnvironment) { [unowned self] source, changes in
        self.handle(changes, from: source)
    }
    var mounts: MountWatcher?
    var mountsProblem: String?
    var rules: [String: WatchRule] = [:]
    var order: [String] = []
    var accepting = true
    var overflowsTotal: UInt64 = 0
    /// Per backend, when its last batch without an overflow was read: no event before it was
    /// lost (a rescan after an overflow runs, for a rule without catch-up, what changed since).
    private var eventsCompleteAt: [WatchBackendKind: WallTime] = [:]
    private let startedAt: WallTime
    var recheckTimer: (any WatchTimer)?
    /// Notices a polled file system that stopped answering (DirectoryWatcher+Polling).
    var pollMonitor: (any WatchTimer)?
    /// Directories renamed away from a rule (IN_MOVED_FROM) by cookie, until the matching
    /// IN_MOVED_TO says where in the tree they went.
    var pendingMoves: [UInt32: (rule: String, from: [UInt8])] = [:]
    lazy var problems = ProblemAggregator(owner: "watching", queue: queue, sources: context.sources, logger: logger)
    /// What was handled before, and the state store's writes: its `store` is set by
    /// Daemon.init before this queue runs anything.
    lazy var ledger: WatchLedger = {
        let ledger = WatchLedger(queue: queue, sources: context.sources, logger: logger, problems: problems)
        ledger.rulesToPrune = { [unowned self] in
            self.order.compactMap { name in self.rules[name].flatMap { rule in rule.settings.catchUp ? rule.root.map { (name, $0) } : nil } }
        }
        return ledger
    }()
    /// This host in the fleet, when `[cluster]` is configured: shared inboxes claim their
    /// files through it (set by Daemon.init).
    public var cluster: FleetMember?
    var fleetRetryTimer: (any WatchTimer)?
    var store: StateStore? {
        get { ledger.store }
        set { ledger.store = newValue }
    }

    static let recheckInterval: Duration = .seconds(5)

    /// `clock`: the dispatch clock on `queue` unless a test brings its own.
    init(queue: SubsystemQueue, context: JobContext, jobs: any WatchJobSubmitting, clock: (any WatchClock)? = nil, kernel: WatchKernel = .linux) {
        self.queue = queue
        self.context = context
        self.jobs = jobs
        self.clock = clock ?? DispatchWatchClock(sources: context.sources, queue: queue)
        self.kernel = kernel
        startedAt = self.clock.wallNow
    }

    convenience init(queue: SubsystemQueue, engine: JobEngine) {
        self.init(queue: queue, context: engine.context, jobs: engine)
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
        if mounts == nil && mountsProblem == nil && !settings.isEmpty && kernel.followsMounts { openMountWatcher() }
        if settings.contains(where: \.catchUp) { ledger.openIfNeeded(stateDirectory: stateDirectory) }
        for (name, rule) in rules {
            guard let new = settings.first(where: { $0.name == name }) else {
                retire(rule, reason: "the watch rule was removed by a reload")
                continue
            }
            guard new != rule.settings else { continue }
            if new.selectsTheSameFiles(as: rule.settings) {
                let reshaped = new.batchInput != rule.settings.batchInput
                rule.settings = new
                let group = rule.group
                if reshaped {
                    // Waiting jobs were made for the old shape (one file, or a batch): the
                    // engine hands them back in the same turn as the new settings, and their
                    // files go again in the new shape.
                    jobs.queue.async { [jobs, queue] in
                        let withdrawn = jobs.reshape(group)
                        guard !withdrawn.isEmpty else { return }
                        queue.async { [weak self] in self?.resubmit(withdrawn, rule: rule) }
                    }
                } else {
                    jobs.queue.async { [jobs] in jobs.configure(group) }
                }
                logger.info("watch \(name) changed; its files waiting to settle or to run move to the new settings")
                continue
            }
            retire(rule, reason: "the watch rule's selection was changed by a reload; the new rule catches up the files it selects")
        }
        for new in settings where rules[new.name] == nil {
            let rule = WatchRule(settings: new)
            rules[new.name] = rule
            let group = rule.group
            jobs.queue.async { [jobs] in jobs.configure(group) }
            // Catch-up: files that arrived while the daemon was down (or before the rule
            // existed) and are not in the ledger as handled are handled now.
            watchRoot(rule, catchUp: new.catchUp && ledger.isOpen)
        }
        order = settings.map(\.name)
        armRecheckIfNeeded()
        ledger.armPruneIfNeeded()
        // At start-up too, after the catch-up listed the trees: a daemon restarted more often
        // than the hourly prune would otherwise never forget files that are gone.
        if isStart { ledger.prune() }
    }

    private func retire(_ rule: WatchRule, reason: String) {
        unwatch(rule)
        cancelSettling(rule, detail: reason)
        rules[rule.name] = nil
        let key = rule.key
        jobs.queue.async { [jobs] in jobs.remove(key, reason: reason) }
    }

    private func openMountWatcher() {
        do {
            let watcher = try MountWatcher(queue: queue.queue, onChange: { [unowned self] change in
                self.mountsChanged(change)
            }, onReadFailure: { [unowned self] failure in
                self.problems.report("unable to read the mount table /proc/self/mountinfo", example: "\(failure)")
            })
            if case .failure(let failure) = watcher.start() { throw failure }
            mounts = watcher
        } catch {
            mountsProblem = "unable to follow the mount table: \(error); a file system mounted over a watched directory is only noticed by the next rescan"
            logger.warning("\(mountsProblem!)")
        }
    }

    // MARK: Events

    func handle(_ changes: [WatchBackend.Change], from source: WatchBackendKind) {
        let now = clock.now
        let readAt = clock.wallNow
        var overflowedNow = false
        defer { if !overflowedNow { eventsCompleteAt[source] = readAt } }
        // Files whose writer's close is in this same read: their IN_CREATE needs no look (the
        // close is the evidence), which keeps a burst of written files off the created path.
        var closedNow: Set<EntryKey> = []
        for case .entry(let event, _) in changes where event.mask.contains(.closeWrite) && !event.isDirectory {
            closedNow.insert(EntryKey(wd: event.wd, name: event.name))
        }
        for change in changes {
            switch change {
            case .overflow:
                overflowedNow = true
                overflowed(source, lostSince: eventsCompleteAt[source] ?? startedAt)
            case .entry(let event, let locations):
                for location in locations {
                    switch location.owner {
                    case .rule(let name):
                        if let rule = rules[name] { handleEntry(event, in: location, rule: rule, now: now, closedNow: closedNow) }
                    case .parentOf(let name):
                        if let rule = rules[name], rule.isMissing, event.name == rule.awaitedName {
                            watchRoot(rule, catchUp: true)
                        }
                    case .ancestorsOf(let name):
                        if let rule = rules[name] { ancestorChanged(rule, at: location, event: event, why: nil) }
                    }
                }
            case .movedAway(_, let locations):
                directoryGone(locations, why: "was renamed away")
            case .deleted(_, let locations):
                directoryGone(locations, why: "was deleted")
            case .unmounted(let wd, let locations):
                _ = wd
                for location in locations {
                    guard case .rule(let name) = location.owner, let rule = rules[name] else { continue }
                    remount(rule, at: location.relative, why: "the file system under \(LineEscaping.escaped(rule.absolute(location.relative))) was unmounted")
                }
            case .watchGone(_, let locations):
                for case (.rule(let name), true) in locations.map({ ($0.owner, $0.relative.isEmpty) }) {
                    if let rule = rules[name] { lose(rule, why: "is no longer watchable") }
                }
            case .missed(let locations):
                for case .rule(let name) in locations.map(\.owner) {
                    if let rule = rules[name] { rescanForMissedEvents(rule) }
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
                if let rule = rules[name] { lose(rule, why: why) }
            case .ancestorsOf(let name):
                if let rule = rules[name] { ancestorChanged(rule, at: location, event: nil, why: why) }
            case .rule, .parentOf:
                break
            }
        }
    }
}
