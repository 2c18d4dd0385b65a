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
    /// Confined to the watching queue.
    final class Rule: @unchecked Sendable {
        var settings: WatchSettings
        /// Relative directory (bytes, "" for the root) → watch descriptor.
        var descriptors: [[UInt8]: Int32] = [:]
        var rootMissing = false
        var pending: [[UInt8]: (deadline: UInt64, event: WatchEvent)] = [:]
        /// Paths in the order their settle windows end; stale entries are skipped.
        var settleOrder: [(path: [UInt8], deadline: UInt64)] = []
        /// Entries before this index are done; compacted now and then, not on every tick.
        var settleHead = 0
        var settleTimer: RegisteredTimer?
        var settleArmedFor: UInt64?
        var handled: [[UInt8]: FileIdentity] = [:]
        var eventsSeen: UInt64 = 0
        var coalesced: UInt64 = 0
        var matched: UInt64 = 0
        var duplicates: UInt64 = 0
        var jobsSubmitted: UInt64 = 0
        var overflows: UInt64 = 0
        var rescans: UInt64 = 0
        var lastEventAt: UInt64?
        var unwatchable: [[UInt8]] = []
        var fallbackTimer: RegisteredTimer?
        var fallbackScans: UInt64 = 0
        var reportedUnwatchable: Set<[UInt8]> = []
        /// The last `recent_events` raw events, oldest first (off unless configured).
        var recentEvents: [(time: WallTime, mask: UInt32, path: [UInt8])] = []
        var batchesStarted: UInt64 = 0

        init(settings: WatchSettings) {
            self.settings = settings
        }

        var key: JobKey { JobKey(.watch, settings.name) }

        var group: JobGroup {
            JobGroup(key: key, settings: settings.job, limit: settings.maxConcurrent, retry: settings.retry, retryExpired: false)
        }

        var rootBytes: [UInt8] { Array(settings.path.utf8) }

        func absolute(_ relative: [UInt8]) -> [UInt8] {
            relative.isEmpty ? rootBytes : rootBytes + [UInt8(ascii: "/")] + relative
        }
    }

    public let queue: SubsystemQueue
    private let jobs: JobContext
    private let engine: JobEngine
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
    private var recheckTimer: RegisteredTimer?
    private var initProblem: String?
    /// The file ledger (in the state directory's SQLite file), on this queue's own connection.
    private var ledger: TaskStore?
    private var ledgerProblem: String?
    static let handledLimit = 200_000
    static let recheckInterval: Duration = .seconds(5)

    init(queue: SubsystemQueue, engine: JobEngine) {
        self.queue = queue
        self.jobs = engine.context
        self.engine = engine
    }

    deinit {
        eventBuffer.deallocate()
    }

    public var dumpSectionName: String { "watches" }
    public var dumpQueue: SubsystemQueue { queue }

    // MARK: Rules

    /// First start and every reload: unchanged rules keep their watches (no event is lost
    /// for them); changed and removed ones are unwatched; new and changed ones are watched.
    func apply(_ settings: [WatchSettings], isStart: Bool, stateDirectory: String) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
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
        for (name, rule) in rules {
            guard let new = settings.first(where: { $0.name == name }) else {
                // Removed: files settling and jobs waiting end with a cancelled record.
                unwatch(rule)
                cancelPending(rule, detail: "the watch rule was removed by a reload")
                rules[name] = nil
                engine.queue.async { [engine] in engine.remove(rule.key, reason: "the watch rule was removed by a reload") }
                continue
            }
            guard new != rule.settings else { continue }
            if new.selectsTheSameFiles(as: rule.settings) {
                // Only what is done with the files changed: they stay watched, and files
                // settling or waiting go on to the new settings.
                rule.settings = new
                let group = rule.group
                engine.queue.async { [engine] in engine.configure(group) }
                logger.info("watch \(name) changed; its files waiting to settle or to run move to the new settings")
                continue
            }
            unwatch(rule)
            cancelPending(rule, detail: "the watch rule's selection was changed by a reload; the new rule catches up the files it selects")
            rules[name] = nil
            engine.queue.async { [engine] in engine.remove(rule.key, reason: "the watch rule's selection was changed by a reload") }
        }
        for new in settings where rules[new.name] == nil {
            let rule = Rule(settings: new)
            rules[new.name] = rule
            let group = rule.group
            engine.queue.async { [engine] in engine.configure(group) }
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
        let stats = jobs.sources.register(.read, owner: "watching", target: "inotify fd (all watch rules)", on: queue)
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
        rule.settleArmedFor = nil
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
        guard let event = readyEvent(rule), rule.settings.filter.selects(relative) else { return }
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

    /// The event a file found by a scan is reported with: the rule's "ready" event.
    private func readyEvent(_ rule: Rule) -> WatchEvent? {
        [WatchEvent.closedWrite, .movedIn, .created].first { rule.settings.events.contains($0) }
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
            enqueue(rule, relative: path, event: event)
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

    private func enqueue(_ rule: Rule, relative: [UInt8], event: WatchEvent, minimumSettle: Duration = .zero) {
        guard accepting else { return }
        let window = max(rule.settings.settle, minimumSettle)
        if window == .zero && rule.pending[relative] == nil {
            if let subject = admit(rule, relative: relative, event: event) { submit([.file(subject)], rule: rule) }
            return
        }
        // A scan finding a path that already waits does not push its window back: only
        // new events for the file do (a scan every second would otherwise starve it).
        if minimumSettle > .zero, rule.pending[relative] != nil { return }
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(window.nanosecondsClamped)
        if rule.pending[relative] != nil { rule.coalesced += 1 }
        rule.pending[relative] = (deadline, event)
        rule.settleOrder.append((relative, deadline))
        armSettleTimer(rule, at: deadline)
    }

    private func armSettleTimer(_ rule: Rule, at deadline: UInt64) {
        if rule.settleTimer == nil {
            rule.settleTimer = jobs.sources.makeTimer(owner: "watch \(rule.settings.name)", target: "settle \(rule.settings.settle.compactDescription)",
                                                      on: queue) { [unowned self] in
                self.settleDue(rule)
            }
        } else if rule.settleArmedFor != nil {
            return // armed for an earlier deadline; settleDue re-arms for the next
        }
        rule.settleArmedFor = deadline
        rule.settleTimer?.schedule(at: DispatchTime(uptimeNanoseconds: deadline))
    }

    /// Starts every path whose window has ended; re-arms for the next one. Entries a
    /// later event superseded are skipped (their path has a later deadline).
    private func settleDue(_ rule: Rule) {
        rule.settleArmedFor = nil
        var now = DispatchTime.now().uptimeNanoseconds
        // A batch also takes the files whose windows end a moment later (files written
        // together settle microseconds apart), up to a quarter of the window or 250 ms.
        if rule.settings.batch {
            now += UInt64(min(rule.settings.settle / 4, .milliseconds(250)).nanosecondsClamped)
        }
        var index = rule.settleHead
        var due: [(relative: [UInt8], event: WatchEvent)] = []
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
        let admitted = due.compactMap { admit(rule, relative: $0.relative, event: $0.event) }
        if let input = rule.settings.batchInput {
            submit(batches(admitted, input: input), rule: rule)
        } else {
            submit(admitted.map { .file($0) }, rule: rule)
        }
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
    /// and was not handled in this exact form before.
    private func admit(_ rule: Rule, relative: [UInt8], event: WatchEvent) -> FileSubject? {
        let absolute = rule.absolute(relative)
        let subject = { (identity: FileIdentity?) in FileSubject(path: absolute, rootLength: rule.rootBytes.count, event: event, identity: identity) }
        guard event != .deleted && event != .movedOut else { return subject(nil) }
        guard let current = identity(of: absolute, followSymlinks: rule.settings.followSymlinks) else { return nil } // gone already
        if rule.handled[relative] == current || handledBefore(rule, relative: relative, identity: current) {
            rule.duplicates += 1
            return nil
        }
        if rule.handled.count >= Self.handledLimit { rule.handled.removeAll(keepingCapacity: true) }
        rule.handled[relative] = current
        return subject(current)
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
    private func batches(_ files: [FileSubject], input: WatchSettings.BatchInput) -> [JobSubject] {
        var result: [JobSubject] = []
        var chunk: [FileSubject] = []
        var bytes = 0
        let budget = batchBudget(input)
        for file in files {
            // An argument costs its bytes, its NUL and its pointer in the new argv; a path
            // on stdin its bytes and its NUL.
            let cost = file.path.count + 1 + (input == .argv ? MemoryLayout<UnsafePointer<CChar>>.size : 0)
            if !chunk.isEmpty && bytes + cost > budget {
                result.append(.batch(chunk, input: input))
                chunk = []
                bytes = 0
            }
            chunk.append(file)
            bytes += cost
        }
        if !chunk.isEmpty { result.append(.batch(chunk, input: input)) }
        return result
    }

    /// Handled successfully in this exact form, in this life of the daemon or an earlier one.
    private func handledBefore(_ rule: Rule, relative: [UInt8], identity: FileIdentity) -> Bool {
        guard rule.settings.catchUp, let ledger, let entry = try? ledger.ledgerEntry(rule: rule.settings.name, path: relative) else { return false }
        return entry.outcome == RunOutcome.ok.rawValue && entry.device == identity.device && entry.inode == identity.inode
            && entry.size == identity.size && entry.modifiedNanoseconds == identity.modifiedNanoseconds
    }

    /// Hands jobs to the engine, on its queue; each comes back here once, with its records.
    private func submit(_ subjects: [JobSubject], rule: Rule) {
        guard !subjects.isEmpty else { return }
        rule.jobsSubmitted += UInt64(subjects.count)
        if rule.settings.batch { rule.batchesStarted += UInt64(subjects.count) }
        let key = rule.key
        let queue = self.queue
        engine.queue.async { [engine] in
            for subject in subjects {
                engine.submit(key, subject: subject, replyOn: queue) { [weak self] completion in
                    self?.finished(completion, rule: rule)
                }
            }
        }
    }

    /// The final outcome of a file's job goes to the ledger (cancelled ones are left for the
    /// next catch-up); the record itself is the engine's.
    private func finished(_ completion: JobCompletion, rule: Rule) {
        let outcome = completion.final.outcome
        guard outcome != .cancelled, rule.settings.catchUp, let ledger else { return }
        do {
            for file in completion.subject.files {
                guard let identity = file.identity else { continue }
                try ledger.recordFile(rule: rule.settings.name, path: Array(file.relative), entry: TaskStore.LedgerEntry(
                    device: identity.device, inode: identity.inode, size: identity.size,
                    modifiedNanoseconds: identity.modifiedNanoseconds, outcome: outcome.rawValue), at: .now())
            }
        } catch {
            logger.warning("watch \(rule.settings.name): unable to record \(LineEscaping.escaped(completion.subject.summary ?? [])) in the ledger: \(error)")
        }
    }

    /// Files that waited in a settle window and will not become jobs end with a record.
    private func cancelPending(_ rule: Rule, detail: String) {
        guard !rule.pending.isEmpty else { return }
        let subjects = rule.pending.map { relative, entry in
            JobSubject.file(FileSubject(path: rule.absolute(relative), rootLength: rule.rootBytes.count, event: entry.event, identity: nil))
        }
        logger.notice("watch \(rule.settings.name): \(subjects.count) file(s) waiting to settle are not started: \(detail)")
        rule.pending.removeAll()
        rule.settleOrder.removeAll()
        rule.settleHead = 0
        let key = rule.key
        engine.queue.async { [engine] in
            for subject in subjects {
                engine.recordNotRun(JobEngine.notRunRecord(key, runID: .random(), subject: subject, outcome: .cancelled, detail: "cancelled: \(detail)"),
                                    key: key, subject: subject)
            }
        }
    }

    /// The drain: no new jobs from file events; files still settling end with a record.
    func stop() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        accepting = false
        for name in order {
            guard let rule = rules[name] else { continue }
            rule.settleTimer?.cancel()
            rule.settleTimer = nil
            cancelPending(rule, detail: "the daemon is stopping")
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
        let interval = fallbackInterval
        let timer = jobs.sources.makeTimer(owner: "watch \(rule.settings.name)", target: "scan unwatched directories every \(interval.compactDescription)",
                                           on: queue) { [unowned self] in
            self.fallbackScan(rule)
        }
        timer.schedule(at: .now() + interval.dispatchInterval, repeating: interval)
        rule.fallbackTimer = timer
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
        let timer = jobs.sources.makeTimer(owner: "watching", target: "missing watch roots: check every \(Self.recheckInterval.compactDescription)",
                                           on: queue) { [unowned self] in
            for name in self.order {
                // A root that comes back may already hold files: they are handled.
                if let rule = self.rules[name], rule.rootMissing { self.watchRoot(rule, emitExisting: true) }
            }
            if !self.rules.values.contains(where: \.rootMissing) {
                self.recheckTimer?.cancel()
                self.recheckTimer = nil
            }
        }
        timer.schedule(at: .now() + Self.recheckInterval.dispatchInterval, repeating: Self.recheckInterval)
        recheckTimer = timer
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
                .init("jobs_submitted", .int(Int64(rule.jobsSubmitted))),
                .init("batches_started", .int(Int64(rule.batchesStarted))),
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

extension WatchSettings {
    /// The same files in the same way: what a reload may change without re-watching the
    /// tree (the job, its retry policy, settle, batching, limits).
    func selectsTheSameFiles(as other: WatchSettings) -> Bool {
        path == other.path && recursive == other.recursive && events == other.events && filter == other.filter
            && followSymlinks == other.followSymlinks && catchUp == other.catchUp
    }
}
