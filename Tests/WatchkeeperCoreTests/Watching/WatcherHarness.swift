import Dispatch
import Foundation
import Logging
import SystemPackage
import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// The kernel's side of the watcher in a unit test, as watchman's FakeWatcher is: the
/// directories the watcher asked to watch, in the same WatchTable the inotify backend keeps,
/// and the events the test writes, interpreted by that table and delivered one read at a
/// time. No inotify instance is made.
final class FakeWatchBackend: WatchBackend {
    var onChanges: WatchKernel.OnChanges = { _ in }
    private var table = WatchTable<WatchOwner>()
    private var descriptors: [[UInt8]: WatchDescriptor] = [:]
    private var nextDescriptor: Int32 = 1
    /// Directories whose watch fails with this errno (ENOSPC: the watch limit).
    var refusals: [[UInt8]: Errno] = [:]

    func watch(_ location: Location, path: [UInt8], events: InotifyMask) -> Result<Void, Errno> {
        if let error = refusals[path] { return .failure(error) }
        // As inotify_add_watch: only a directory that is there (IN_ONLYDIR).
        var info = stat()
        guard String(decoding: path, as: UTF8.self).withCString({ stat($0, &info) }) == 0 else { return .failure(.noSuchFileOrDirectory) }
        guard info.st_mode & S_IFMT == S_IFDIR else { return .failure(.notDirectory) }
        let wd = descriptors[path] ?? WatchDescriptor(rawValue: nextDescriptor)
        if descriptors[path] == nil { nextDescriptor += 1 }
        descriptors[path] = wd
        _ = table.insert(wd, for: location)
        return .success(())
    }

    func isWatched(_ location: Location) -> Bool { table.descriptor(for: location) != nil }

    func unwatch(_ owner: WatchOwner, under relative: [UInt8]) {
        let removed = Set(table.removeSubtree(owner: owner, under: relative))
        descriptors = descriptors.filter { !removed.contains($0.value) }
    }

    func watchedCount(of owner: WatchOwner) -> Int { table.locations(ofOwner: owner).count }
    var watchCount: Int { table.descriptorCount }
    func describe() -> [DumpField] { [] }

    func isWatching(_ directory: String) -> Bool { descriptors[Array(directory.utf8)] != nil }

    /// One event about `name` in the watched directory `directory` (absolute).
    func event(_ mask: InotifyMask, _ directory: String, _ name: String, cookie: UInt32 = 0) -> InotifyEvent {
        guard let wd = descriptors[Array(directory.utf8)] else {
            XCTFail("\(directory) is not watched")
            return InotifyEvent(wd: .none, mask: mask, cookie: cookie, name: Array(name.utf8))
        }
        return InotifyEvent(wd: wd, mask: mask, cookie: cookie, name: Array(name.utf8))
    }

    /// One read of the kernel's queue.
    func read(_ events: [InotifyEvent]) {
        onChanges(events.map { table.interpret($0) })
    }

    func overflow() {
        read([InotifyEvent(wd: .none, mask: .queueOverflow, cookie: 0, name: [])])
    }
}

/// fanotify's side in a unit test: a tree started with one call (one mark), its events
/// written by the test as the interpretations FanotifyBackend would make of them.
final class FakeMarkBackend: TreeMarkingBackend {
    var onChanges: WatchKernel.OnChanges = { _ in }
    private(set) var trees: [WatchOwner: [UInt8]] = [:]

    func startTree(_ owner: WatchOwner, root: [UInt8], recursive: Bool, events: InotifyMask,
                   mountPoints: [[UInt8]]) -> Result<[(path: [UInt8], error: Errno)], FanotifyBackend.StartFailure> {
        trees[owner] = root
        return .success([])
    }

    func addMountPoint(_ owner: WatchOwner, path: [UInt8]) -> Result<Void, Errno> { .success(()) }

    func watch(_ location: Location, path: [UInt8], events: InotifyMask) -> Result<Void, Errno> {
        trees[location.owner] == nil ? .failure(.badFileDescriptor) : .success(())
    }

    func isWatched(_ location: Location) -> Bool { trees[location.owner] != nil }

    func unwatch(_ owner: WatchOwner, under relative: [UInt8]) {
        if relative.isEmpty { trees[owner] = nil }
    }

    func watchedCount(of owner: WatchOwner) -> Int { trees[owner] == nil ? 0 : 1 }
    var watchCount: Int { trees.count }
    func describe() -> [DumpField] { [] }

    /// Events about `name` in `directory` (relative to the rule's root) of the rule's tree,
    /// one per mask, in one read.
    func read(_ masks: [InotifyMask], rule: String, _ directory: String, _ name: String) {
        let location = Location(owner: .rule(rule), relative: Array(directory.utf8))
        onChanges(masks.map { mask in
            .entry(InotifyEvent(wd: WatchDescriptor(rawValue: 1_000_000), mask: mask, cookie: 0, name: Array(name.utf8)), locations: [location])
        })
    }
}

/// A clock the test moves: timers fire, in deadline order, only when it is advanced. The
/// wall clock moves with it from the real time at the start (files' times are real).
final class FakeWatchClock: WatchClock, @unchecked Sendable {
    final class Timer: WatchTimer {
        let target: String
        let handler: () -> Void
        var deadline: MonotonicInstant?
        var interval: Duration?

        init(target: String, handler: @escaping () -> Void) {
            self.target = target
            self.handler = handler
        }

        func schedule(at deadline: MonotonicInstant) {
            self.deadline = deadline
            interval = nil
        }

        func schedule(at deadline: MonotonicInstant, repeating interval: Duration) {
            self.deadline = deadline
            self.interval = interval
        }

        func cancel() { deadline = nil }
    }

    private static let start = MonotonicInstant(nanoseconds: 1_000_000_000_000)
    private let wallStart = WallTime.now()
    private(set) var now = FakeWatchClock.start
    private var timers: [Timer] = []

    var wallNow: WallTime {
        let nanoseconds = (wallStart.nanosecondsSinceEpoch ?? 0) + Int64((now - Self.start).nanosecondsClamped)
        return WallTime(secondsSinceEpoch: nanoseconds / 1_000_000_000, nanoseconds: Int32(nanoseconds % 1_000_000_000))
    }

    func makeTimer(owner: String, target: String, handler: @escaping () -> Void) -> any WatchTimer {
        let timer = Timer(target: target, handler: handler)
        timers.append(timer)
        return timer
    }

    /// Moves time on by `duration`, firing each timer due on the way at its deadline.
    func advance(by duration: Duration) {
        let end = now + duration
        while let next = timers.filter({ $0.deadline.map { $0 <= end } ?? false }).min(by: { $0.deadline! < $1.deadline! }) {
            now = max(now, next.deadline!)
            next.deadline = next.interval.map { now + $0 }
            next.handler()
        }
        now = end
    }

    /// Timers waiting to fire, by target.
    var armed: [String] { timers.filter { $0.deadline != nil }.map(\.target) }
}

/// The job engine as the watcher sees it: submissions are recorded, and end when the test
/// says, with the outcome it says. Its queue is the watcher's, so one turn of that queue
/// delivers everything.
final class FakeJobs: WatchJobSubmitting, @unchecked Sendable {
    struct Submission: @unchecked Sendable {
        let key: JobKey
        let subject: JobSubject
        let replyOn: SubsystemQueue?
        let completion: (JobCompletion) -> Void
    }

    let queue: SubsystemQueue
    private(set) var submissions: [Submission] = []
    private(set) var notRun: [JobSubject] = []
    private(set) var configured: [JobKey] = []
    private(set) var removed: [JobKey] = []
    /// What is waiting or running: submitted and not finished.
    private(set) var pending: [Int] = []

    init(queue: SubsystemQueue) {
        self.queue = queue
    }

    func configure(_ group: JobGroup) { configured.append(group.key) }
    func reshape(_ group: JobGroup) -> [JobSubject] { [] }
    func remove(_ key: JobKey, reason: String) { removed.append(key) }

    func submit(_ key: JobKey, subject: JobSubject, runID: RunID?, replyOn: SubsystemQueue?,
                completion: @escaping (JobCompletion) -> Void) -> RunID {
        pending.append(submissions.count)
        submissions.append(Submission(key: key, subject: subject, replyOn: replyOn, completion: completion))
        return .random()
    }

    func recordNotRun(_ record: RunRecord, key: JobKey, subject: JobSubject, inBulk: Bool) { notRun.append(subject) }

    /// Every file submitted so far, relative to its root, in order.
    var files: [String] {
        submissions.flatMap { $0.subject.files }.map { String(decoding: $0.relative, as: UTF8.self) }
    }

    /// Ends every pending job with `outcome`; the watcher hears on its queue.
    func finishAll(_ outcome: RunOutcome = .ok) {
        let ending = pending
        pending = []
        for index in ending {
            let submission = submissions[index]
            let record = JobEngine.notRunRecord(submission.key, runID: .random(), subject: submission.subject, outcome: outcome, detail: "")
            let completion = JobCompletion(key: submission.key, subject: submission.subject, records: [record])
            (submission.replyOn ?? queue).async { submission.completion(completion) }
        }
    }
}

/// One watcher with a fake backend, clock and engine over a real scratch directory, driven
/// one step at a time on its queue.
final class WatcherHarness {
    let queue = SubsystemQueue(name: "test.watching.\(UUID().uuidString.prefix(8))")
    let backend = FakeWatchBackend()
    /// fanotify, when the test lets the watcher have it.
    let marks = FakeMarkBackend()
    let clock = FakeWatchClock()
    let jobs: FakeJobs
    let watcher: DirectoryWatcher
    let root: String
    let stateDirectory: String

    /// `store`: the state store whose ledger catch-up reads (nil: no ledger).
    init(scratch: URL, store: StateStore? = nil, fanotify: Bool = false) throws {
        root = scratch.appendingPathComponent("in").path
        stateDirectory = scratch.appendingPathComponent("state").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        jobs = FakeJobs(queue: queue)
        let sink = LogSink(target: .stderr, level: .critical, problemCapacity: 10)
        let context = JobContext(queue: queue, sink: sink, logger: Logger(label: "test"), sources: SourceRegistry(), daemonEnvironment: [:])
        let fake = backend
        let marks = fanotify ? self.marks : nil
        let kernel = WatchKernel(inotify: { _, _, _, onChanges throws(Errno) in
            fake.onChanges = onChanges
            return fake
        }, fanotify: { _, _, _, onChanges throws(Errno) in
            guard let marks else { throw Errno.notPermitted }
            marks.onChanges = onChanges
            return marks
        }, followsMounts: false)
        watcher = DirectoryWatcher(queue: queue, context: context, jobs: jobs, store: store, clock: clock, kernel: kernel)
    }

    /// A rule on the scratch root: the defaults of a `[[watch]]` (closed_write and moved_in,
    /// settle 0, temporary names left out), changed by `change`.
    func rule(_ name: String = "inbox", _ change: (inout WatchSettings) -> Void = { _ in }) -> WatchSettings {
        var settings = WatchSettings(name: name, path: root, filter: PathFilter(include: [], exclude: [], excludesTemporaryNames: true),
                                     catchUp: false, job: JobSettings(command: .arguments(["/bin/true"])))
        change(&settings)
        return settings
    }

    func start(_ rules: [WatchSettings]) {
        step { watcher.apply(rules, isStart: true, stateDirectory: stateDirectory) }
    }

    /// Runs `body` on the watching queue, then lets every turn it queued there run.
    func step(_ body: () -> Void) {
        queue.queue.sync(execute: body)
        drain()
    }

    /// The drain and a clean stop, as the daemon's: what settles is cancelled, changes
    /// waiting to be confirmed are, the ledger's reader closes.
    func stop() {
        step {
            watcher.stop()
            watcher.close()
        }
    }

    func drain() {
        for _ in 0..<4 { queue.queue.sync {} }
    }

    /// One read of the kernel's queue: events about names in the watched directory `directory`
    /// (relative to the root; "" for the root).
    func read(_ events: [(InotifyMask, String, String, UInt32)]) {
        step {
            backend.read(events.map { mask, directory, name, cookie in backend.event(mask, path(directory), name, cookie: cookie) })
        }
    }

    func read(_ mask: InotifyMask, _ name: String, in directory: String = "", cookie: UInt32 = 0) {
        read([(mask, directory, name, cookie)])
    }

    /// What inotify says of a file written and closed (in one read): its creation, the
    /// write, the close. `directory/name` split at the last slash.
    func written(_ relative: String, created: Bool = true) {
        let (directory, name) = split(relative)
        read((created ? [(InotifyMask.create, directory, name, UInt32(0))] : []) + [(.modify, directory, name, 0), (.closeWrite, directory, name, 0)])
    }

    /// IN_MOVED_FROM and IN_MOVED_TO of one rename within the tree, in one read.
    func renamed(_ from: String, _ to: String, cookie: UInt32, directory: Bool = false) {
        let (fromDirectory, fromName) = split(from)
        let (toDirectory, toName) = split(to)
        let isDirectory: InotifyMask = directory ? .isDirectory : []
        read([(InotifyMask.movedFrom.union(isDirectory), fromDirectory, fromName, cookie), (InotifyMask.movedTo.union(isDirectory), toDirectory, toName, cookie)])
    }

    func split(_ relative: String) -> (directory: String, name: String) {
        guard let slash = relative.lastIndex(of: "/") else { return ("", relative) }
        return (String(relative[..<slash]), String(relative[relative.index(after: slash)...]))
    }

    func expect(_ files: [String], _ why: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(submitted, files, why, file: file, line: line)
    }

    func advance(_ duration: Duration) {
        step { clock.advance(by: duration) }
    }

    func finishAll(_ outcome: RunOutcome = .ok) {
        step { jobs.finishAll(outcome) }
    }

    var submitted: [String] { queue.queue.sync { jobs.files } }

    func path(_ relative: String) -> String { relative.isEmpty ? root : root + "/" + relative }

    // MARK: The file system: real files, as the tools leave them

    /// open(O_CREAT|O_TRUNC), write, close: the inode stays when the file was there.
    func write(_ relative: String, _ content: String) {
        let fd = open(path(relative), O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0, "open \(relative)")
        let bytes = Array(content.utf8)
        XCTAssertEqual(Glibc.write(fd, bytes, bytes.count), bytes.count)
        close(fd)
    }

    func mkdir(_ relative: String) {
        XCTAssertEqual(Glibc.mkdir(path(relative), 0o755), 0)
    }

    func link(_ existing: String, _ new: String) {
        XCTAssertEqual(Glibc.link(existing, path(new)), 0)
    }

    func rename(_ from: String, _ to: String) {
        XCTAssertEqual(Glibc.rename(path(from), path(to)), 0, "rename \(from) \(to)")
    }

    func setTimes(_ relative: String, modified seconds: Int) {
        var times = [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, path(relative), &times, 0), 0)
    }

    func chmod(_ relative: String, _ mode: mode_t) {
        XCTAssertEqual(Glibc.chmod(path(relative), mode), 0)
    }

    /// A file written outside the tree (beside it), for `mv` and `ln`.
    func outside(_ name: String, _ content: String) -> String {
        let directory = (root as NSString).deletingLastPathComponent + "/src"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let fd = open(directory + "/" + name, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let bytes = Array(content.utf8)
        _ = Glibc.write(fd, bytes, bytes.count)
        close(fd)
        return directory + "/" + name
    }

    func moveIn(_ outside: String, _ relative: String) {
        XCTAssertEqual(Glibc.rename(outside, path(relative)), 0)
    }

    private var tmpfile: Int32 = -1

    /// open(root, O_TMPFILE), write, linkat(2) from /proc/self/fd/N to `relative`, not closed
    /// yet (`closeTmpfile`). The file's inode.
    func linkTmpfile(_ relative: String, _ content: String) -> UInt64 {
        // O_TMPFILE is __O_TMPFILE | O_DIRECTORY, a macro Swift does not import.
        tmpfile = open(root, 0o20200000 | O_WRONLY, 0o644)
        XCTAssertGreaterThanOrEqual(tmpfile, 0, "open(O_TMPFILE) in \(root)")
        let bytes = Array(content.utf8)
        XCTAssertEqual(Glibc.write(tmpfile, bytes, bytes.count), bytes.count)
        XCTAssertEqual(linkat(AT_FDCWD, "/proc/self/fd/\(tmpfile)", AT_FDCWD, path(relative), AT_SYMLINK_FOLLOW), 0)
        var info = stat()
        XCTAssertEqual(fstat(tmpfile, &info), 0)
        return UInt64(info.st_ino)
    }

    func closeTmpfile() {
        close(tmpfile)
        tmpfile = -1
    }

    /// renameat2(RENAME_EXCHANGE): the two names swap their files in one step.
    func exchange(_ first: String, _ second: String) {
        Self.exchange(path(first), path(second))
    }

    /// The same, of two absolute paths.
    static func exchange(_ first: String, _ second: String) {
        typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        guard let symbol = dlsym(nil, "renameat2") else { return XCTFail("no renameat2 in this libc") }
        let renameat2 = unsafeBitCast(symbol, to: RenameAt2.self)
        XCTAssertEqual(renameat2(AT_FDCWD, first, AT_FDCWD, second, 2), 0, "renameat2(RENAME_EXCHANGE)")
    }

    /// The kernel's queue overflowed: the watcher rescans, and what the rescan found waits
    /// a scan's window.
    func overflowAndRescan() {
        step { backend.overflow() }
        advance(.seconds(3))
    }

    /// `mv in in.old`, and a new `in` made.
    func renameRoot() {
        XCTAssertEqual(Glibc.rename(root, root + ".old"), 0)
    }

    func mkdirRoot() {
        XCTAssertEqual(Glibc.mkdir(root, 0o755), 0)
    }

    /// An event in the root's parent about the root's name.
    func readParent(_ mask: InotifyMask) {
        let parent = (root as NSString).deletingLastPathComponent
        step { backend.read([backend.event(mask, parent, (root as NSString).lastPathComponent)]) }
    }

    /// A tick of the kernel's coarse clock, so that a rewrite's change time differs from the
    /// write before it (as it does for any tool slower than a few milliseconds).
    func tick() {
        usleep(20_000)
    }

    func remove(_ relative: String) {
        XCTAssertEqual(unlink(path(relative)), 0)
    }
}
