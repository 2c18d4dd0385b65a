import SystemPackage

/// How directories are watched. The coordinator names each directory by its owner (a rule,
/// the parent of a missing root, a root's ancestors) and its path, and hears back what
/// happened in those directories as table interpretations: an entry changed, a directory
/// moved away, was deleted or unmounted, events were lost. The backend keeps the kernel's
/// side (descriptors and which location each stands for). Two implement it, as watchman's
/// backends implement its `Watcher`: InotifyBackend (one watch per directory) and
/// FanotifyBackend (one mark per file system, for huge trees; a TreeMarkingBackend), and the
/// unit tests' fake. Which one a rule's tree has is the rule's TreeBackendChoice. Polling is
/// not a backend: it runs beside one, off the watching queue (TreePoller). Everything is
/// called on the watching queue.
protocol WatchBackend: AnyObject {
    typealias Location = WatchTable<WatchOwner>.Location
    typealias Change = WatchTable<WatchOwner>.Interpretation

    /// Starts watching the directory at `path` (absolute) as `location`, for `events` and
    /// whatever the location's other owners asked for. The errno says why it could not.
    func watch(_ location: Location, path: [UInt8], events: InotifyMask) -> Result<Void, Errno>
    func isWatched(_ location: Location) -> Bool
    /// Stops watching every directory of `owner` at or under `relative` ("" for all).
    func unwatch(_ owner: WatchOwner, under relative: [UInt8])
    func watchedCount(of owner: WatchOwner) -> Int
    /// Stops watching every directory of `owner` because another backend watches them from
    /// now on (a tree moved to fanotify): what the kernel had already queued for them is
    /// still delivered, since the new backend did not see it.
    func handOver(_ owner: WatchOwner)
    /// Directories watched, all owners together (what counts against the kernel's limit).
    var watchCount: Int { get }
    /// What the SIGUSR1 dump shows of it.
    func describe() -> [DumpField]
}

extension WatchBackend {
    func handOver(_ owner: WatchOwner) {
        unwatch(owner, under: [])
    }
}

/// A backend that watches a whole tree with one call, not one directory at a time:
/// fanotify's marks of whole file systems (FanotifyBackend). A tree moves to it from
/// inotify (TreeBackendChoice); the backend of a rule's ancestors stays inotify.
protocol TreeMarkingBackend: WatchBackend {
    /// Starts watching the tree at `root` (and the local file systems mounted at
    /// `mountPoints` below it): fails only for the root; a mount point that cannot be
    /// watched is returned with its errno.
    func startTree(_ owner: WatchOwner, root: [UInt8], recursive: Bool, events: InotifyMask,
                   mountPoints: [[UInt8]]) -> Result<[(path: [UInt8], error: Errno)], FanotifyBackend.StartFailure>
    /// A file system mounted at `path` below a started tree's root, later.
    func addMountPoint(_ owner: WatchOwner, path: [UInt8]) -> Result<Void, Errno>
}

extension FanotifyBackend: TreeMarkingBackend {}

/// The inotify backend: one inotify instance for every rule, read until EAGAIN by its reader
/// thread on the watching queue (InotifyWatcher), and the WatchTable of which location each
/// descriptor stands for (several owners may share one directory, hence one descriptor).
// @unchecked Sendable: confined to the watching queue.
final class InotifyBackend: WatchBackend, @unchecked Sendable {
    private let watcher: InotifyWatcher
    private var table = WatchTable<WatchOwner>()
    /// fs.inotify.max_queued_events when the instance was made: its queue's size for life.
    let queueSize: String?
    /// Events about descriptors no longer in the table (a directory already unwatched).
    private(set) var unattributed: UInt64 = 0
    /// Watches handed over to another backend, by descriptor, until their IN_IGNORED: the
    /// events queued for them before the removal are still interpreted with these locations.
    private var handedOver: [WatchDescriptor: [Location]] = [:]
    /// Events read ahead of the reader thread (while handing a tree over), delivered first.
    private var readAhead: [InotifyEvent] = []
    private let onChanges: ([Change]) -> Void
    private let queue: SubsystemQueue

    /// Opens the instance and starts reading; `onChanges` gets each read's interpretations,
    /// in order, on `queue`. Fails with the errno of inotify_init1 (EMFILE: the per-user
    /// instance limit), eventfd or pthread_create (the reader thread).
    init(queue: SubsystemQueue, sources: SourceRegistry, problems: ProblemAggregator,
         onChanges: @escaping ([Change]) -> Void) throws(Errno) {
        watcher = try InotifyWatcher(queue: queue.queue, onEvents: { _ in }, onReadFailure: { _ in })
        queueSize = Self.sysctl("max_queued_events")
        self.onChanges = onChanges
        self.queue = queue
        let stats = sources.register(.read, owner: "watching", target: "inotify fd (all watch rules)", on: queue)
        watcher.setHandlers(onEvents: { [unowned self] events in
            stats.fired()
            self.deliver(events)
        }, onReadFailure: { failure in
            problems.report("unable to read inotify events", example: "\(failure)")
        })
        try watcher.start()
    }

    func watch(_ location: Location, path: [UInt8], events: InotifyMask) -> Result<Void, Errno> {
        watcher.addWatch(path: path, mask: events, existing: .addToMask).map { wd in
            let (_, replaced) = table.insert(wd, for: location)
            if let replaced { _ = watcher.removeWatch(replaced) }
        }
    }

    func isWatched(_ location: Location) -> Bool {
        table.descriptor(for: location) != nil
    }

    /// The events read, after those read ahead, interpreted in order.
    private func deliver(_ read: [InotifyEvent]) {
        let events = readAhead.isEmpty ? read : readAhead + read
        readAhead = []
        guard !events.isEmpty else { return }
        var changes: [Change] = []
        changes.reserveCapacity(events.count)
        for event in events {
            let change = table.interpret(event)
            switch change {
            case .unattributed(let event):
                // Queued for a watch handed over before it was removed: still this tree's news.
                if let locations = handedOver[event.wd], !event.name.isEmpty {
                    changes.append(.entry(event, locations: locations))
                } else {
                    unattributed += 1
                }
            case .watchGone(let wd, _) where handedOver[wd] != nil:
                handedOver[wd] = nil
                changes.append(change)
            default:
                changes.append(change)
            }
        }
        onChanges(changes)
    }

    /// Removes the owner's watches `handOverBatch` at a time, reading the kernel's queue
    /// after each batch: every removal queues an IN_IGNORED, and a tree of more watches than
    /// fs.inotify.max_queued_events overflowed the instance's queue, which made every rule on
    /// inotify rescan its tree (issue 36). What was queued for the tree before the removal
    /// (a directory created just before the switch) is delivered as its own events still.
    func handOver(_ owner: WatchOwner) {
        for location in table.locations(ofOwner: owner) {
            if let wd = table.descriptor(for: location) { handedOver[wd, default: []].append(location) }
        }
        let removed = table.removeSubtree(owner: owner, under: [])
        for (index, wd) in removed.enumerated() {
            if case .failure = watcher.removeWatch(wd) { handedOver[wd] = nil } // gone already: no IN_IGNORED comes
            if (index + 1) % Self.handOverBatch == 0 { readAhead += watcher.readQueued() }
        }
        readAhead += watcher.readQueued()
        // Delivered on the queue's next turn, before or with the reader thread's next events.
        if !readAhead.isEmpty { queue.async { [weak self] in self?.deliver([]) } }
    }

    /// Removals between reads: a quarter of the default queue (16,384 events).
    static let handOverBatch = 4_096

    func unwatch(_ owner: WatchOwner, under relative: [UInt8]) {
        for wd in table.removeSubtree(owner: owner, under: relative) { _ = watcher.removeWatch(wd) }
    }

    func watchedCount(of owner: WatchOwner) -> Int {
        table.locations(ofOwner: owner).count
    }

    var watchCount: Int { table.descriptorCount }

    func describe() -> [DumpField] {
        [
            .init("inotify", watcher.describe()),
            .init("watches_in_use", .int(Int64(table.descriptorCount))),
            .init("watch_table", table.describe { $0.description }),
            .init("max_user_watches", Self.sysctl("max_user_watches").flatMap { Int64($0) }.map { .int($0) } ?? .null),
            .init("max_queued_events", queueSize.flatMap { Int64($0) }.map { .int($0) } ?? .null),
            .init("unattributed_events", .int(Int64(unattributed))),
        ]
    }

    static func sysctl(_ name: String) -> String? {
        (try? readSmallFile("/proc/sys/fs/inotify/\(name)"))?.split(separator: "\n").first.map(String.init)
    }
}
