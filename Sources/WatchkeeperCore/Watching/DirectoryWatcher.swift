import CWatchkeeperSystem
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The watching subsystem: one inotify fd for the daemon, read by one read source on
/// the watching queue, turning file events of `[[watch]]` rules into jobs run by the
/// shared job runner. Everything here is touched only on the watching queue.
public final class DirectoryWatcher: DumpContributor, @unchecked Sendable {
    /// A file as it was when a job was started for it: an event for the same bytes
    /// (a rescan, or the real event racing the scan of a new directory) is a duplicate.
    struct FileIdentity: Equatable {
        let device: UInt64
        let inode: UInt64
        let size: Int64
        let modifiedNanoseconds: Int64
    }

    enum WaitingWork {
        case file(relative: [UInt8], event: String, identity: FileIdentity?)
        case request(JobRequest)
    }

    /// Confined to the watching queue.
    final class Rule: @unchecked Sendable {
        var settings: WatchSettings
        /// Relative directory (bytes, "" for the root) → watch descriptor.
        var descriptors: [[UInt8]: Int32] = [:]
        var rootMissing = false
        var pending: [[UInt8]: (deadline: UInt64, event: String)] = [:]
        /// Paths in the order their settle windows end; stale entries are skipped.
        var settleOrder: [(path: [UInt8], deadline: UInt64)] = []
        /// Entries before this index are done; compacted now and then, not on every tick.
        var settleHead = 0
        var settleTimer: DispatchSourceTimer?
        var handled: [[UInt8]: FileIdentity] = [:]
        var running = 0
        /// Files admitted but not handed to the runner yet: kept small (the path and its
        /// form), turned into a job only when a slot is near, so a burst of 100,000 files
        /// costs memory per file, not per job request.
        var waiting = WaitingLine<WaitingWork>()
        var eventsSeen: UInt64 = 0
        var coalesced: UInt64 = 0
        var matched: UInt64 = 0
        var duplicates: UInt64 = 0
        var jobsStarted: UInt64 = 0
        var jobsFailed: UInt64 = 0
        var overflows: UInt64 = 0
        var rescans: UInt64 = 0
        var lastEventAt: UInt64?
        var unwatchable: [[UInt8]] = []
        var fallbackTimer: DispatchSourceTimer?
        var fallbackScans: UInt64 = 0
        var reportedUnwatchable: Set<[UInt8]> = []
        /// The last `recent_events` raw events, oldest first (off unless configured).
        var recentEvents: [(time: WallTime, mask: UInt32, path: [UInt8])] = []
        /// Run ID → the file and its form when its job started, for the ledger.
        var inFlight: [String: [(relative: [UInt8], identity: FileIdentity)]] = [:]
        /// With `retry`: the request of each job, to run it again if it fails.
        var retryable: [String: JobRequest] = [:]
        var batchesStarted: UInt64 = 0

        init(settings: WatchSettings) {
            self.settings = settings
        }

        var rootBytes: [UInt8] { Array(settings.path.utf8) }

        func absolute(_ relative: [UInt8]) -> [UInt8] {
            relative.isEmpty ? rootBytes : rootBytes + [UInt8(ascii: "/")] + relative
        }
    }

    public let queue: SubsystemQueue
    private let jobs: JobContext
    private let runner: @Sendable () -> JobRunner
    private var logger: Logger { jobs.logger }
    private var fd: Int32 = -1
    private var source: DispatchSourceRead?
    /// One buffer for every read: allocating (and zeroing) 256 KiB per wake-up cost the
    /// event-to-job path an mmap, 64 page faults and an munmap each time.
    private let eventBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 8)
    private var rules: [String: Rule] = [:]
    private var order: [String] = []
    private var descriptors: [Int32: [(rule: String, relative: [UInt8])]] = [:]
    /// Watches on the parent of a missing root, so it is watched again the moment it is
    /// created or moved back (the periodic check covers a missing parent).
    private var parentWatches: [Int32: Set<String>] = [:]
    private var accepting = true
    private var overflowsTotal: UInt64 = 0
    private var recheckTimer: DispatchSourceTimer?
    private var initProblem: String?
    /// The daemon's max_jobs, for how many jobs a rule hands the runner at once.
    private var runnerSlots = 4
    /// The file ledger (in the state directory's SQLite file), on this queue's own connection.
    private var ledger: TaskStore?
    private var ledgerProblem: String?
    static let handledLimit = 200_000
    static let recheckInterval: Duration = .seconds(5)

    /// `runner` is read on the tasks queue only.
    init(queue: SubsystemQueue, jobs: JobContext, runner: @escaping @Sendable () -> JobRunner) {
        self.queue = queue
        self.jobs = jobs
        self.runner = runner
    }

    deinit {
        eventBuffer.deallocate()
    }

    public var dumpSectionName: String { "watches" }
    public var dumpQueue: SubsystemQueue { queue }

    // MARK: Rules

    /// First start and every reload: unchanged rules keep their watches (no event is lost
    /// for them); changed and removed ones are unwatched; new and changed ones are watched.
    func apply(_ settings: [WatchSettings], isStart: Bool, stateDirectory: String, maxJobs: Int) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        runnerSlots = maxJobs
        if fd < 0 && !settings.isEmpty { openInotify() }
        if ledger == nil && ledgerProblem == nil && settings.contains(where: \.catchUp) {
            do {
                try makeDirectories(stateDirectory)
                ledger = try TaskStore(directory: stateDirectory)
            } catch {
                ledgerProblem = "\(error)"
                logger.error("watch rules will not catch up files that arrived while watchkeeper was down: \(error)")
            }
        }
        let names = Set(settings.map(\.name))
        for (name, rule) in rules where !names.contains(name) || rule.settings != settings.first(where: { $0.name == name }) {
            unwatch(rule)
            rules[name] = nil
        }
        for new in settings where rules[new.name] == nil {
            let rule = Rule(settings: new)
            rules[new.name] = rule
            // Catch-up: files that arrived while the daemon was down (or before the rule
            // existed) and are not in the ledger as handled are handled now.
            watchRoot(rule, emitExisting: new.catchUp && ledger != nil)
        }
        order = settings.map(\.name)
        armRecheckIfNeeded()
    }

    private func openInotify() {
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else {
            initProblem = "unable to create an inotify instance: \(String(cString: strerror(errno)))" + (errno == EMFILE
                ? " (fs.inotify.max_user_instances=\(Self.sysctl("max_user_instances") ?? "?") reached; raise it with sysctl fs.inotify.max_user_instances=1024)" : "")
            logger.error("\(initProblem!)")
            return
        }
        let stats = jobs.sources.register(.read, target: "inotify (all watch rules)", on: queue)
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue.queue)
        let descriptor = fd
        source.setEventHandler { [unowned self] in
            stats.fired()
            self.readEvents()
        }
        // Never cancelled while the daemon runs; the fd closes with the source.
        source.setCancelHandler { close(descriptor) }
        self.source = source
        source.activate()
    }

    private func watchRoot(_ rule: Rule, emitExisting: Bool) {
        var info = stat()
        guard stat(rule.settings.path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            if !rule.rootMissing {
                logger.warning("watch \(rule.settings.name): unable to watch \(rule.settings.path): \(errno == 0 || errno == ENOENT ? "no such directory" : String(cString: strerror(errno))); checking again every \(Self.recheckInterval.compactDescription)")
            }
            rule.rootMissing = true
            watchParent(of: rule)
            return
        }
        dropParentWatch(of: rule)
        if rule.rootMissing {
            logger.notice("watch \(rule.settings.name): \(rule.settings.path) is back; watching it again")
        }
        rule.rootMissing = false
        addTree(rule, relative: [], emitExisting: emitExisting)
    }

    private func unwatch(_ rule: Rule) {
        rule.settleTimer?.cancel()
        rule.settleTimer = nil
        rule.fallbackTimer?.cancel()
        rule.fallbackTimer = nil
        for (relative, wd) in rule.descriptors {
            removeDescriptor(wd, rule: rule.settings.name, relative: relative)
        }
        rule.descriptors.removeAll()
    }

    private func removeDescriptor(_ wd: Int32, rule name: String, relative: [UInt8]) {
        guard var users = descriptors[wd] else { return }
        users.removeAll { $0.rule == name && $0.relative == relative }
        if users.isEmpty {
            descriptors[wd] = nil
            if parentWatches[wd] == nil { _ = inotify_rm_watch(fd, wd) }
        } else {
            descriptors[wd] = users
        }
    }

    /// Watches a directory first, then lists it: a file created in between is seen by
    /// the scan, the event, or both (the duplicate is dropped by identity). Recursive rules
    /// go level by level: every directory of a level is watched, then all are listed.
    private func addTree(_ rule: Rule, relative: [UInt8], emitExisting: Bool) {
        guard fd >= 0 else { return }
        walk(rule, from: relative, visit: { directory in
            self.addWatch(rule, relative: directory) && (rule.settings.recursive || emitExisting)
        }, file: { path in
            if emitExisting { self.scanned(rule, relative: path, countMatched: true) }
        })
    }

    /// One inotify watch; false (and a report) when it could not be added.
    private func addWatch(_ rule: Rule, relative: [UInt8]) -> Bool {
        let absolute = rule.absolute(relative)
        var mask = rule.settings.events.reduce(UInt32(0)) { $0 | $1.mask }
        mask |= UInt32(IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR) | 0x2000_0000 /* IN_MASK_ADD */
        if !rule.settings.followSymlinks { mask |= UInt32(IN_DONT_FOLLOW) }
        let wd = (absolute + [0]).withUnsafeBufferPointer { bytes -> Int32 in
            inotify_add_watch(fd, UnsafeRawPointer(bytes.baseAddress!).assumingMemoryBound(to: CChar.self), mask)
        }
        if wd < 0 {
            reportWatchFailure(rule, absolute: absolute, relative: relative, error: errno)
            return false
        }
        rule.descriptors[relative] = wd
        var users = descriptors[wd] ?? []
        if !users.contains(where: { $0.rule == rule.settings.name && $0.relative == relative }) {
            users.append((rule.settings.name, relative))
        }
        descriptors[wd] = users
        return true
    }

    /// A file found by a scan goes through the settle queue with the rule's ready event.
    private func scanned(_ rule: Rule, relative: [UInt8], countMatched: Bool) {
        guard let event = readyEventName(rule), rule.settings.filter.selects(relative) else { return }
        if countMatched { rule.matched += 1 }
        enqueue(rule, relative: relative, event: event, minimumSettle: Self.scanSettle)
    }

    /// Breadth-first over a rule's tree from `start`. `visit` runs on this queue for each
    /// directory before it is listed and says whether to list it; the directories of one
    /// level are listed in parallel (DispatchQueue.concurrentPerform, striding over chunks)
    /// since listing a large tree is the slow part of a catch-up or a rescan.
    private func walk(_ rule: Rule, from start: [UInt8], visit: ([UInt8]) -> Bool, file: ([UInt8]) -> Void) {
        var level = [start]
        while !level.isEmpty {
            let listed = level.filter(visit)
            let listings = Self.listDirectories(listed.map { rule.absolute($0) })
            var next: [[UInt8]] = []
            for (directory, entries) in zip(listed, listings) {
                for entry in entries {
                    let child = directory.isEmpty ? entry.name : directory + [UInt8(ascii: "/")] + entry.name
                    if entry.isDirectory {
                        if rule.settings.recursive && rule.settings.filter.mayContainSelected(directory: child) { next.append(child) }
                    } else {
                        file(child)
                    }
                }
            }
            level = next
        }
    }

    /// Below this many directories a level is listed on the calling thread.
    static let parallelListingThreshold = 64
    static let listingStride = 16

    static func listDirectories(_ paths: [[UInt8]]) -> [[DirectoryEntry]] {
        guard paths.count >= parallelListingThreshold else { return paths.map(listDirectory) }
        let results = ListingResults(count: paths.count)
        let chunks = (paths.count + listingStride - 1) / listingStride
        DispatchQueue.concurrentPerform(iterations: chunks) { chunk in
            let range = (chunk * listingStride)..<min(paths.count, (chunk + 1) * listingStride)
            for index in range { results.store(listDirectory(paths[index]), at: index) }
        }
        return results.values
    }

    /// The event name a file found by a scan is reported with: the rule's "ready" event.
    private func readyEventName(_ rule: Rule) -> String? {
        for candidate in [WatchEvent.closedWrite, .movedIn, .created] where rule.settings.events.contains(candidate) {
            return candidate.rawValue
        }
        return nil
    }

    private func reportWatchFailure(_ rule: Rule, absolute: [UInt8], relative: [UInt8], error: Int32) {
        let path = String(decoding: absolute, as: UTF8.self)
        switch error {
        case ENOSPC, ENOMEM:
            if !rule.unwatchable.contains(relative) { rule.unwatchable.append(relative) }
            armFallbackScan(rule)
            // Said once per directory; the fallback scan retries it quietly.
            guard rule.reportedUnwatchable.insert(relative).inserted else { return }
            guard error == ENOSPC else {
                logger.error("unable to watch \(path): the kernel is out of memory for inotify watches; scanning it every \(fallbackInterval.compactDescription) instead")
                return
            }
            let limit = Self.sysctl("max_user_watches") ?? "?"
            logger.error("unable to watch \(path): inotify watch limit (fs.inotify.max_user_watches=\(limit)) reached with \(descriptors.count) watches in use by watchkeeper; raise it with: sysctl fs.inotify.max_user_watches=\(max(524_288, (Int(limit) ?? 0) * 4)) (and persist it in /etc/sysctl.d/); until then it is scanned every \(fallbackInterval.compactDescription)",
                         metadata: ["watch": .string(rule.settings.name)])
        case EACCES:
            logger.warning("watch \(rule.settings.name): unable to watch \(path): permission denied; files below it are not seen")
        case ENOENT, ENOTDIR:
            break // gone again before we got to it
        default:
            logger.error("watch \(rule.settings.name): unable to watch \(path): \(String(cString: strerror(error)))")
        }
    }

    /// Each concurrentPerform iteration writes only its own slots.
    final class ListingResults: @unchecked Sendable {
        private let slots: UnsafeMutableBufferPointer<[DirectoryEntry]>

        init(count: Int) {
            slots = .allocate(capacity: count)
            slots.initialize(repeating: [])
        }

        deinit {
            slots.deinitialize()
            slots.deallocate()
        }

        func store(_ entries: [DirectoryEntry], at index: Int) {
            slots[index] = entries
        }

        var values: [[DirectoryEntry]] { Array(slots) }
    }

    struct DirectoryEntry: Sendable {
        let name: [UInt8]
        let isDirectory: Bool
    }

    static func listDirectory(_ absolute: [UInt8]) -> [DirectoryEntry] {
        let directory = (absolute + [0]).withUnsafeBufferPointer { opendir(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self)) }
        guard let directory else { return [] }
        defer { closedir(directory) }
        var entries: [DirectoryEntry] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if name == [UInt8(ascii: ".")] || name == [UInt8(ascii: "."), UInt8(ascii: ".")] { continue }
            var isDirectory = entry.pointee.d_type == UInt8(DT_DIR)
            if entry.pointee.d_type == UInt8(DT_UNKNOWN) {
                var info = stat()
                let full = absolute + [UInt8(ascii: "/")] + name + [0]
                if full.withUnsafeBufferPointer({ lstat(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), &info) }) == 0 {
                    isDirectory = (info.st_mode & S_IFMT) == S_IFDIR
                }
            }
            entries.append(DirectoryEntry(name: name, isDirectory: isDirectory))
        }
        return entries
    }

    // MARK: Events

    private func readEvents() {
        let raw = UnsafeRawBufferPointer(eventBuffer)
        while true {
            let count = read(fd, eventBuffer.baseAddress, eventBuffer.count)
            if count < 0 {
                if errno == EINTR { continue }
                return // EAGAIN: all read
            }
            if count == 0 { return }
            var offset = 0
            while offset + 16 <= count {
                let wd = raw.loadUnaligned(fromByteOffset: offset, as: Int32.self)
                let mask = raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                let length = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                let nameBytes = raw[(offset + 16)..<min(count, offset + 16 + length)]
                let name = Array(nameBytes.prefix { $0 != 0 })
                handle(wd: wd, mask: mask, name: name)
                offset += 16 + length
            }
        }
    }

    private func handle(wd: Int32, mask: UInt32, name: [UInt8]) {
        if mask & UInt32(IN_Q_OVERFLOW) != 0 {
            overflowed()
            return
        }
        if mask & UInt32(IN_IGNORED) != 0 { parentWatches[wd] = nil }
        if let waiting = parentWatches[wd], mask & UInt32(IN_ISDIR) != 0, mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 {
            for ruleName in waiting {
                guard let rule = rules[ruleName], rule.rootMissing, Array(rule.rootBytes.split(separator: UInt8(ascii: "/")).last ?? []) == name else { continue }
                watchRoot(rule, emitExisting: true)
            }
        }
        guard let users = descriptors[wd] else { return }
        if mask & UInt32(IN_IGNORED) != 0 {
            // The directory is gone (deleted, unmounted) or was unwatched.
            descriptors[wd] = nil
            for (ruleName, relative) in users {
                guard let rule = rules[ruleName], rule.descriptors[relative] == wd else { continue }
                rule.descriptors[relative] = nil
                if relative.isEmpty {
                    rule.rootMissing = true
                    watchParent(of: rule)
                    logger.warning("watch \(rule.settings.name): \(rule.settings.path) was removed; checking for it every \(Self.recheckInterval.compactDescription)")
                    armRecheckIfNeeded()
                }
            }
            return
        }
        let now = DispatchTime.now().uptimeNanoseconds
        for (ruleName, relative) in users {
            guard let rule = rules[ruleName] else { continue }
            rule.eventsSeen += 1
            rule.lastEventAt = now
            let path = relative.isEmpty || name.isEmpty ? relative + name : relative + [UInt8(ascii: "/")] + name
            if rule.settings.recentEvents > 0 {
                rule.recentEvents.append((.now(), mask, path))
                if rule.recentEvents.count > rule.settings.recentEvents { rule.recentEvents.removeFirst() }
            }
            if name.isEmpty { continue } // about the directory itself (DELETE_SELF, MOVE_SELF)
            if mask & UInt32(IN_ISDIR) != 0 {
                if rule.settings.recursive {
                    if mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0, rule.settings.filter.mayContainSelected(directory: path) {
                        addTree(rule, relative: path, emitExisting: true)
                    } else if mask & UInt32(IN_MOVED_FROM) != 0 {
                        dropSubtree(rule, relative: path)
                    }
                }
                continue
            }
            guard let event = rule.settings.events.first(where: { mask & $0.mask != 0 }) else { continue }
            guard rule.settings.filter.selects(path) else { continue }
            rule.matched += 1
            enqueue(rule, relative: path, event: event.rawValue)
        }
    }

    /// A directory moved out of the tree: its watches would report paths that no
    /// longer belong to the rule.
    private func dropSubtree(_ rule: Rule, relative: [UInt8]) {
        let prefix = relative + [UInt8(ascii: "/")]
        for (path, wd) in rule.descriptors where path == relative || path.starts(with: prefix) {
            rule.descriptors[path] = nil
            removeDescriptor(wd, rule: rule.settings.name, relative: path)
        }
    }

    /// IN_Q_OVERFLOW: the kernel dropped events. Every tree is scanned again; files not
    /// handled yet in the form they have now get their job, so nothing is lost.
    private func overflowed() {
        overflowsTotal += 1
        logger.warning("inotify event queue overflowed (\(overflowsTotal) time(s) so far; fs.inotify.max_queued_events=\(Self.sysctl("max_queued_events") ?? "?")); rescanning every watched tree")
        for name in order {
            guard let rule = rules[name], !rule.rootMissing else { continue }
            rule.overflows += 1
            rule.rescans += 1
            rescan(rule, relative: [])
        }
    }

    /// Every file of the tree through the settle queue; directories without a watch (new
    /// ones whose events were lost in the overflow) are watched on the way.
    private func rescan(_ rule: Rule, relative: [UInt8]) {
        walk(rule, from: relative, visit: { directory in
            rule.descriptors[directory] != nil || self.addWatch(rule, relative: directory)
        }, file: { path in
            self.scanned(rule, relative: path, countMatched: false)
        })
    }

    // MARK: Settle and start

    /// Files found by a scan may still be open for writing (a scan cannot tell): they wait
    /// this long, and a close event for the same path meanwhile joins the same job.
    static let scanSettle: Duration = .seconds(1)

    private func enqueue(_ rule: Rule, relative: [UInt8], event: String, minimumSettle: Duration = .zero) {
        guard accepting else { return }
        let window = max(rule.settings.settle, minimumSettle)
        if window == .zero && rule.pending[relative] == nil {
            start(rule, relative: relative, event: event)
            return
        }
        // A scan finding a path that already waits does not push its window back: only
        // new events for the file do (a scan every second would otherwise starve it).
        if minimumSettle > .zero, rule.pending[relative] != nil { return }
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(window.nanosecondsClamped)
        if rule.pending[relative] != nil { rule.coalesced += 1 }
        rule.pending[relative] = (deadline, event)
        rule.settleOrder.append((relative, deadline))
        if rule.settleTimer == nil { armSettleTimer(rule, at: deadline) }
    }

    private func armSettleTimer(_ rule: Rule, at deadline: UInt64) {
        rule.settleTimer = jobs.sources.startTimer("watch \(rule.settings.name): settle \(rule.settings.settle.compactDescription)", on: queue,
                                                   schedule: { $0.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline)) }) { [unowned self] in
            self.settleDue(rule)
        }
    }

    /// Starts every path whose window has ended; re-arms for the next one. Entries a
    /// later event superseded are skipped (their path has a later deadline).
    private func settleDue(_ rule: Rule) {
        var now = DispatchTime.now().uptimeNanoseconds
        // A batch also takes the files whose windows end a moment later (files written
        // together settle microseconds apart), up to a quarter of the window or 250 ms.
        if rule.settings.batch {
            now += UInt64(min(rule.settings.settle / 4, .milliseconds(250)).nanosecondsClamped)
        }
        var index = rule.settleHead
        var due: [(relative: [UInt8], event: String)] = []
        while index < rule.settleOrder.count, rule.settleOrder[index].deadline <= now {
            let (path, deadline) = rule.settleOrder[index]
            index += 1
            guard let pending = rule.pending[path], pending.deadline == deadline else { continue }
            rule.pending[path] = nil
            due.append((path, pending.event))
        }
        rule.settleHead = index
        if rule.settleHead >= 1_024 && rule.settleHead * 2 >= rule.settleOrder.count {
            rule.settleOrder.removeFirst(rule.settleHead)
            rule.settleHead = 0
        }
        if let input = rule.settings.batchInput {
            startBatch(rule, input: input, due: due)
        } else {
            for item in due { start(rule, relative: item.relative, event: item.event) }
        }
        rule.settleTimer?.cancel()
        rule.settleTimer = nil
        if rule.settleHead < rule.settleOrder.count { armSettleTimer(rule, at: rule.settleOrder[rule.settleHead].deadline) }
    }

    private func identity(of path: [UInt8], followSymlinks: Bool) -> FileIdentity? {
        var info = stat()
        let result = (path + [0]).withUnsafeBufferPointer { bytes -> Int32 in
            let cPath = UnsafeRawPointer(bytes.baseAddress!).assumingMemoryBound(to: CChar.self)
            return followSymlinks ? stat(cPath, &info) : lstat(cPath, &info)
        }
        guard result == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
                            modifiedNanoseconds: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec))
    }

    /// Whether a file is to be handled now: it still exists (unless the event says it went)
    /// and was not handled in this exact form before. Returns its absolute path and form.
    private func admit(_ rule: Rule, relative: [UInt8], event: String) -> (absolute: [UInt8], identity: FileIdentity?)? {
        let absolute = rule.absolute(relative)
        let vanishes = event == WatchEvent.deleted.rawValue || event == WatchEvent.movedOut.rawValue
        guard !vanishes else { return (absolute, nil) }
        guard let current = identity(of: absolute, followSymlinks: rule.settings.followSymlinks) else { return nil } // gone already
        if rule.handled[relative] == current || handledBefore(rule, relative: relative, identity: current) {
            rule.duplicates += 1
            return nil
        }
        if rule.handled.count >= Self.handledLimit { rule.handled.removeAll(keepingCapacity: true) }
        rule.handled[relative] = current
        return (absolute, current)
    }

    private func start(_ rule: Rule, relative: [UInt8], event: String) {
        guard let (_, fileIdentity) = admit(rule, relative: relative, event: event) else { return }
        rule.waiting.append(.file(relative: relative, event: event, identity: fileIdentity), lane: 0)
        pump(rule)
    }

    private func request(for work: WaitingWork, rule: Rule) -> JobRequest {
        switch work {
        case .request(let request):
            return request
        case .file(let relative, let event, let fileIdentity):
            let absolute = rule.absolute(relative)
            let slash = absolute.lastIndex(of: UInt8(ascii: "/")) ?? 0
            let directory = slash == 0 ? [UInt8(ascii: "/")] : Array(absolute[..<slash])
            let name = Array(absolute[(slash + 1)...])
            let request = JobRequest(
                name: rule.settings.name, kind: .watch, settings: rule.settings.job,
                placeholders: ["path": absolute, "dir": directory, "name": name, "event": Array(event.utf8)],
                environment: [("WATCHKEEPER_PATH", absolute), ("WATCHKEEPER_DIR", directory), ("WATCHKEEPER_NAME", name),
                              ("WATCHKEEPER_EVENT", Array(event.utf8))]
            )
            if let fileIdentity { rule.inFlight[request.runID] = [(relative, fileIdentity)] }
            return request
        }
    }

    /// Jobs of one rule handed to the runner at once: its max_concurrent, but never more
    /// than twice max_jobs, so the runner's line stays short and the rest waits here cheaply.
    private func pump(_ rule: Rule) {
        let limit = min(rule.settings.maxConcurrent, max(1, runnerSlots * 2))
        while accepting, rule.running < limit, let work = rule.waiting.popFirst() {
            let request = request(for: work, rule: rule)
            if rule.settings.retry != nil { rule.retryable[request.runID] = request }
            submit(request, rule: rule)
        }
    }

    /// The bytes one batch's paths may take: for `{paths}`, half of ARG_MAX, leaving the
    /// rest for the environment and the other arguments; on stdin, what one pipe holds
    /// (they are written before the job starts). WATCHKEEPER_TEST_BATCH_BYTES lowers it for tests.
    private func batchBudget(_ input: WatchSettings.BatchInput) -> Int {
        if let text = jobs.daemonEnvironment["WATCHKEEPER_TEST_BATCH_BYTES"], let value = Int(text) { return value }
        switch input {
        case .argv: return max(65_536, sysconf(Int32(_SC_ARG_MAX)) / 2)
        case .stdin: return PipePair.largestCapacity
        }
    }

    /// batch: the files whose windows ended together go to as few jobs as fit the argv
    /// limit (or one pipe), each file in exactly one of them.
    private func startBatch(_ rule: Rule, input: WatchSettings.BatchInput, due: [(relative: [UInt8], event: String)]) {
        var chunk: [(relative: [UInt8], absolute: [UInt8], identity: FileIdentity?)] = []
        var bytes = 0
        let budget = batchBudget(input)
        func flush() {
            guard !chunk.isEmpty else { return }
            let environment = [("WATCHKEEPER_BATCH_SIZE", Array(String(chunk.count).utf8))]
            let request: JobRequest
            switch input {
            case .argv:
                request = JobRequest(name: rule.settings.name, kind: .watch, settings: rule.settings.job,
                                     listPlaceholders: ["paths": chunk.map(\.absolute)], environment: environment)
            case .stdin:
                var paths: [UInt8] = []
                paths.reserveCapacity(bytes)
                for item in chunk { paths += item.absolute + [0] }
                request = JobRequest(name: rule.settings.name, kind: .watch, settings: rule.settings.job,
                                     environment: environment, standardInput: paths)
            }
            rule.inFlight[request.runID] = chunk.compactMap { item in item.identity.map { (item.relative, $0) } }
            rule.batchesStarted += 1
            rule.waiting.append(.request(request), lane: 0)
            pump(rule)
            chunk = []
            bytes = 0
        }
        for item in due {
            guard let (absolute, identity) = admit(rule, relative: item.relative, event: item.event) else { continue }
            // An argument costs its bytes, its NUL and its pointer in the new argv; a path
            // on stdin its bytes and its NUL.
            let cost = absolute.count + 1 + (input == .argv ? MemoryLayout<UnsafePointer<CChar>>.size : 0)
            if !chunk.isEmpty && bytes + cost > budget { flush() }
            chunk.append((item.relative, absolute, identity))
            bytes += cost
        }
        flush()
    }

    /// Handled successfully in this exact form, in this life of the daemon or an earlier one.
    private func handledBefore(_ rule: Rule, relative: [UInt8], identity: FileIdentity) -> Bool {
        guard rule.settings.catchUp, let ledger, let entry = try? ledger.ledgerEntry(rule: rule.settings.name, path: relative) else { return false }
        return entry.outcome == RunOutcome.ok.rawValue && entry.device == identity.device && entry.inode == identity.inode
            && entry.size == identity.size && entry.modifiedNanoseconds == identity.modifiedNanoseconds
    }

    private func submit(_ request: JobRequest, rule: Rule) {
        rule.running += 1
        rule.jobsStarted += 1
        let runner = self.runner
        let batchSize = request.listPlaceholders["paths"]?.count ?? request.standardInput.map { input in input.lazy.filter { $0 == 0 }.count }
        let path = batchSize.map { "\($0) files" } ?? String(decoding: request.placeholders["path"] ?? [], as: UTF8.self)
        let queue = self.queue
        // The watcher lives as long as the daemon: strong captures are fine here.
        jobs.queue.async {
            let accepted = runner().submit(request) { record in
                queue.async { self.finished(record, rule: rule, path: path) }
            }
            if !accepted {
                queue.async { self.finished(JobRunner.cancelledRecord(request, detail: "cancelled: the daemon is stopping"), rule: rule, path: path) }
            }
        }
    }

    private func finished(_ record: RunRecord, rule: Rule, path: String) {
        rule.running -= 1
        if record.outcome != .ok { rule.jobsFailed += 1 }
        let files = rule.inFlight.removeValue(forKey: record.runID)
        if let files, rule.settings.catchUp, let ledger {
            do {
                for (relative, identity) in files {
                    try ledger.recordFile(rule: rule.settings.name, path: relative, entry: TaskStore.LedgerEntry(
                        device: identity.device, inode: identity.inode, size: identity.size,
                        modifiedNanoseconds: identity.modifiedNanoseconds, outcome: record.outcome.rawValue), at: .now())
                }
            } catch {
                logger.warning("watch \(rule.settings.name): unable to record \(path) in the ledger: \(error)")
            }
        }
        record.log(to: logger, kind: .watch, extra: ["path": .string(path)])
        let request = rule.retryable.removeValue(forKey: record.runID)
        if record.outcome == .failed, let retry = rule.settings.retry, record.attempt < retry.attempts, accepting, let request {
            let delay = retry.delay(afterAttempt: record.attempt)
            logger.notice("watch \(rule.settings.name): job for \(path) failed (attempt \(record.attempt) of \(retry.attempts)); retrying in \(delay.compactDescription)")
            queue.queue.asyncAfter(deadline: .now() + .nanoseconds(Int(delay.nanosecondsClamped))) { [self] in
                guard accepting, rules[rule.settings.name] === rule else { return }
                let again = JobRequest(name: request.name, kind: .watch, settings: rule.settings.job, placeholders: request.placeholders,
                                       listPlaceholders: request.listPlaceholders, environment: request.environment,
                                       standardInput: request.standardInput, attempt: record.attempt + 1)
                if let files { rule.inFlight[again.runID] = files }
                rule.waiting.append(.request(again), lane: 0)
                pump(rule)
            }
        }
        pump(rule)
    }

    /// The drain: no new jobs from file events.
    func stop() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        accepting = false
        for name in order {
            guard let rule = rules[name] else { continue }
            rule.settleTimer?.cancel()
            rule.settleTimer = nil
            let dropped = rule.pending.count + rule.waiting.count
            if dropped > 0 {
                logger.notice("watch \(name): \(dropped) file(s) waiting to settle or for a slot were not started because the daemon is stopping")
            }
            rule.pending.removeAll()
            _ = rule.waiting.removeAll()
            rule.fallbackTimer?.cancel()
            rule.fallbackTimer = nil
        }
        recheckTimer?.cancel()
        recheckTimer = nil
    }

    private func watchParent(of rule: Rule) {
        guard fd >= 0, let slash = rule.rootBytes.lastIndex(of: UInt8(ascii: "/")) else { return }
        let parent = slash == 0 ? [UInt8(ascii: "/")] : Array(rule.rootBytes[..<slash])
        let mask = UInt32(IN_CREATE | IN_MOVED_TO | IN_ONLYDIR) | 0x2000_0000 /* IN_MASK_ADD */
        let wd = (parent + [0]).withUnsafeBufferPointer { inotify_add_watch(fd, UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), mask) }
        guard wd >= 0 else { return } // the parent is missing too: the periodic check remains
        parentWatches[wd, default: []].insert(rule.settings.name)
    }

    private func dropParentWatch(of rule: Rule) {
        for (wd, var names) in parentWatches where names.contains(rule.settings.name) {
            names.remove(rule.settings.name)
            parentWatches[wd] = names.isEmpty ? nil : names
            // The same directory may be watched for a rule of its own: keep that watch.
            if names.isEmpty && descriptors[wd] == nil { _ = inotify_rm_watch(fd, wd) }
        }
    }

    // MARK: Directories that could not be watched

    /// Subtrees over the inotify limit are scanned this often instead, each pass limited to
    /// `fallbackBudget` so a huge tree cannot stall the watching queue; the next pass goes
    /// on where this one stopped. Each pass also tries to watch them again (the limit may
    /// have been raised).
    static let fallbackBudget: Duration = .milliseconds(500)
    /// 30 s; WATCHKEEPER_TEST_FALLBACK_INTERVAL shortens it for the tests (docs/testing.md).
    private var fallbackInterval: Duration {
        if let text = jobs.daemonEnvironment["WATCHKEEPER_TEST_FALLBACK_INTERVAL"], case .success(let value) = DurationParser.parse(text) {
            return value
        }
        return .seconds(30)
    }

    private func armFallbackScan(_ rule: Rule) {
        guard rule.fallbackTimer == nil, accepting else { return }
        let interval = DispatchTimeInterval.nanoseconds(Int(fallbackInterval.nanosecondsClamped))
        rule.fallbackTimer = jobs.sources.startTimer("watch \(rule.settings.name): scan unwatched directories every \(fallbackInterval.compactDescription)",
                                                     on: queue, schedule: { $0.schedule(deadline: .now() + interval, repeating: interval) }) { [unowned self] in
            self.fallbackScan(rule)
        }
    }

    func fallbackScan(_ rule: Rule) {
        guard accepting, !rule.unwatchable.isEmpty else {
            rule.fallbackTimer?.cancel()
            rule.fallbackTimer = nil
            return
        }
        rule.fallbackScans += 1
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(Self.fallbackBudget.nanosecondsClamped)
        let due = rule.unwatchable
        rule.unwatchable = []
        var index = 0
        while index < due.count, DispatchTime.now().uptimeNanoseconds < deadline {
            let relative = due[index]
            index += 1
            // Watchable again (the limit was raised)? Then its files are caught up through
            // the watch; otherwise addTree lists it as unwatchable again and we scan it.
            addTree(rule, relative: relative, emitExisting: true)
            if rule.descriptors[relative] == nil {
                scanFiles(rule, relative: relative)
            } else if rule.reportedUnwatchable.remove(relative) != nil {
                logger.notice("watch \(rule.settings.name): \(String(decoding: rule.absolute(relative), as: UTF8.self)) is watched now")
            }
        }
        // Not reached within the budget: first in line next time.
        rule.unwatchable = Array(due[index...]) + rule.unwatchable
    }

    /// The files of one directory (and, for recursive rules, below it) through the settle
    /// queue, without adding watches.
    private func scanFiles(_ rule: Rule, relative: [UInt8]) {
        walk(rule, from: relative, visit: { _ in true }, file: { path in
            self.scanned(rule, relative: path, countMatched: false)
        })
    }

    // MARK: Missing roots

    private func armRecheckIfNeeded() {
        guard recheckTimer == nil, accepting, rules.values.contains(where: \.rootMissing) else { return }
        let interval = DispatchTimeInterval.nanoseconds(Int(Self.recheckInterval.nanosecondsClamped))
        recheckTimer = jobs.sources.startTimer("watch roots missing: check every \(Self.recheckInterval.compactDescription)", on: queue,
                                               schedule: { $0.schedule(deadline: .now() + interval, repeating: interval) }) { [unowned self] in
            for name in self.order {
                // A root that comes back may already hold files: they are handled.
                if let rule = self.rules[name], rule.rootMissing { self.watchRoot(rule, emitExisting: true) }
            }
            if !self.rules.values.contains(where: \.rootMissing) {
                self.recheckTimer?.cancel()
                self.recheckTimer = nil
            }
        }
    }

    // MARK: Dump

    static func maskNames(_ mask: UInt32) -> String {
        let names: [(UInt32, String)] = [
            (UInt32(IN_ACCESS), "ACCESS"), (UInt32(IN_MODIFY), "MODIFY"), (UInt32(IN_ATTRIB), "ATTRIB"),
            (UInt32(IN_CLOSE_WRITE), "CLOSE_WRITE"), (UInt32(IN_CLOSE_NOWRITE), "CLOSE_NOWRITE"), (UInt32(IN_OPEN), "OPEN"),
            (UInt32(IN_MOVED_FROM), "MOVED_FROM"), (UInt32(IN_MOVED_TO), "MOVED_TO"), (UInt32(IN_CREATE), "CREATE"),
            (UInt32(IN_DELETE), "DELETE"), (UInt32(IN_DELETE_SELF), "DELETE_SELF"), (UInt32(IN_MOVE_SELF), "MOVE_SELF"),
            (UInt32(IN_ISDIR), "ISDIR"), (UInt32(IN_IGNORED), "IGNORED"), (UInt32(IN_Q_OVERFLOW), "Q_OVERFLOW"),
        ]
        return names.filter { mask & $0.0 != 0 }.map(\.1).joined(separator: "|")
    }

    static func sysctl(_ name: String) -> String? {
        (try? readSmallFile("/proc/sys/fs/inotify/\(name)"))?.split(separator: "\n").first.map(String.init)
    }

    public func describeForDump() -> DumpValue {
        let now = DispatchTime.now().uptimeNanoseconds
        let entries: [DumpValue] = order.compactMap { rules[$0] }.map { rule in
            let settings = rule.settings
            var ledgerSize = DumpValue.null
            if let count = try? ledger?.ledgerSize(rule: settings.name) { ledgerSize = .int(Int64(count)) }
            let lastEvent: DumpValue = rule.lastEventAt.map { .double(Double(now &- $0) / 1e9) } ?? .null
            let unwatched: [DumpValue] = rule.unwatchable.prefix(20).map { .string(String(decoding: $0, as: UTF8.self)) }
            return .object([
                .init("name", .string(settings.name)),
                .init("root", .string(settings.path)),
                .init("recursive", .bool(settings.recursive)),
                .init("events", .array(settings.events.map { .string($0.rawValue) })),
                .init("root_missing", .bool(rule.rootMissing)),
                .init("inotify_watches", .int(Int64(rule.descriptors.count))),
                .init("events_seen", .int(Int64(rule.eventsSeen))),
                .init("matched", .int(Int64(rule.matched))),
                .init("coalesced", .int(Int64(rule.coalesced))),
                .init("duplicates_dropped", .int(Int64(rule.duplicates))),
                .init("jobs_started", .int(Int64(rule.jobsStarted))),
                .init("batches_started", .int(Int64(rule.batchesStarted))),
                .init("jobs_failed", .int(Int64(rule.jobsFailed))),
                .init("jobs_running", .int(Int64(rule.running))),
                .init("jobs_waiting", .int(Int64(rule.waiting.count))),
                .init("overflows", .int(Int64(rule.overflows))),
                .init("rescans", .int(Int64(rule.rescans))),
                .init("last_event_ago_s", lastEvent),
                .init("pending_settle", .int(Int64(rule.pending.count))),
                .init("files_remembered", .int(Int64(rule.handled.count))),
                .init("catch_up", .bool(settings.catchUp)),
                .init("ledger_size", ledgerSize),
                .init("unwatched_directories", .array(unwatched)),
                .init("recent_events", .array(rule.recentEvents.map { event in
                    .object([.init("time", .string(event.time.iso8601)), .init("mask", .string(Self.maskNames(event.mask))),
                             .init("path", .string(String(decoding: event.path, as: UTF8.self)))])
                })),
                .init("unwatched_total", .int(Int64(rule.unwatchable.count))),
                .init("fallback_scans", .int(Int64(rule.fallbackScans))),
            ])
        }
        return .object([
            .init("inotify", initProblem.map { .string($0) } ?? .string(fd >= 0 ? "fd \(fd)" : "not needed")),
            .init("watches_in_use", .int(Int64(descriptors.count))),
            .init("max_user_watches", Self.sysctl("max_user_watches").flatMap { Int64($0) }.map { .int($0) } ?? .null),
            .init("overflows", .int(Int64(overflowsTotal))),
            .init("ledger", ledger.map { .string($0.path) } ?? .null),
            .init("ledger_problem", ledgerProblem.map { .string($0) } ?? .null),
            .init("rules", .array(entries)),
        ])
    }
}
