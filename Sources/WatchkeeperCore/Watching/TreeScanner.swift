// The walk behind catch-up, overflow rescans and the fallback scan of directories over the
// inotify limit: breadth-first, one level at a time, so the caller can watch every
// directory of a level before it is listed (a file created in between is then seen by the
// scan, the event, or both). Only regular files are handed out; everything else is counted
// by type, and every directory that could not be listed is reported with its errno.
//
// opendir/readdir rather than raw getdents64: glibc's readdir already reads with getdents64
// into a 32 KiB buffer, so the syscalls are the same, and readdir hands us d_type without
// our own parsing of packed, variable-length records. The directory is opened with open()
// first (O_DIRECTORY | O_NOFOLLOW, then fdopendir) so that a directory replaced by a
// symbolic link between listing its parent and listing it is not followed.

import Dispatch
#if canImport(Glibc)
import Glibc
#endif

public struct TreeScanner: Sendable {
    /// What a directory entry is (System/FileType.swift).
    public typealias EntryType = FileType

    /// Entries seen, by type.
    public struct TypeCounts: Sendable, Equatable {
        private var counts = [Int](repeating: 0, count: EntryType.allCases.count)

        public init() {}

        public subscript(type: EntryType) -> Int {
            get { counts[type.rawValue] }
            set { counts[type.rawValue] = newValue }
        }

        /// Entries neither handed out nor descended into.
        public var skipped: Int { counts.reduce(0, +) - self[.regular] - self[.directory] }

        public static func += (lhs: inout TypeCounts, rhs: TypeCounts) {
            for type in EntryType.allCases { lhs[type] += rhs[type] }
        }
    }

    /// A directory that could not be listed (or not completely). Never dropped: the caller
    /// aggregates them into one warning per cause with a count.
    public struct ListingFailure: Sendable, Equatable {
        public enum Step: String, Sendable {
            case open, read
        }

        /// Relative to the root.
        public let directory: [UInt8]
        public let step: Step
        /// EACCES, EMFILE, ENAMETOOLONG, ENOENT (gone since its parent was listed), ENOTDIR
        /// or ELOOP (replaced by a file or a symbolic link since), EIO, ...
        public let errorNumber: Int32
    }

    /// What a scan did. Resuming a budgeted scan is passing `remaining` as `start`.
    public struct Summary: Sendable {
        public var directoriesListed = 0
        /// Every entry seen, by type: regular files were handed out, directories descended
        /// into (unless `descend` declined), the rest skipped.
        public var types = TypeCounts()
        public var failures: [ListingFailure] = []
        /// Rounds listed with DispatchQueue.concurrentPerform.
        public var parallelRounds = 0
        /// Directories queued but not listed when the deadline came; empty when complete.
        public var remaining: [[UInt8]] = []

        public var isComplete: Bool { remaining.isEmpty }

        /// One line per errno: how many directories, and the first of them as an example.
        public struct Cause: Sendable, Equatable {
            public let errorNumber: Int32
            public let count: Int
            public let example: [UInt8]
        }

        /// The failures by errno, most frequent first (ties by errno).
        public var failureCauses: [Cause] {
            var byError: [Int32: (count: Int, example: [UInt8])] = [:]
            for failure in failures {
                byError[failure.errorNumber, default: (0, failure.directory)].count += 1
            }
            return byError.map { Cause(errorNumber: $0.key, count: $0.value.count, example: $0.value.example) }
                .sorted { ($1.count, $0.errorNumber) < ($0.count, $1.errorNumber) }
        }
    }

    /// The rule's root, absolute. Opened following symbolic links (an administrator may
    /// point a rule at a link); nothing below it is followed.
    public let root: [UInt8]
    /// Below this many directories a round is listed on the calling thread.
    public let parallelThreshold: Int
    /// Directories per concurrentPerform iteration: one per iteration costs more in
    /// dispatch than a small directory costs to list.
    public let stride: Int

    public init(root: [UInt8], parallelThreshold: Int = 64, stride: Int = 16) {
        precondition(stride >= 1, "TreeScanner lists at least one directory per iteration, but stride is \(stride)")
        self.root = root
        self.parallelThreshold = parallelThreshold
        self.stride = stride
    }

    /// Walks the whole tree below `start` (relative directories; `[[]]` is the root), one
    /// level at a time. `visit` runs on the calling thread for each directory of a level
    /// before the level is listed, and says whether to list it (the watcher adds its watch
    /// there); `descend` says whether a subdirectory joins the next level; `file` gets every
    /// regular file, on the calling thread.
    public func scan(
        from start: [[UInt8]] = [[]], visit: ([UInt8]) -> Bool = { _ in true }, descend: ([UInt8]) -> Bool = { _ in true },
        file: ([UInt8]) -> Void
    ) -> Summary {
        walk(from: start, roundLimit: .max, shouldStop: { false }, visit: visit, descend: descend, file: file)
    }

    /// Like `scan`, for a time budget (the fallback scan of directories over the inotify
    /// limit): directories go in rounds of up to `roundLimit`, and after a round that ends
    /// at or past `deadline` (on the caller's monotonic clock `now`) the scan stops and
    /// `Summary.remaining` says where to go on. One round always runs, so a pass makes
    /// progress whatever the budget.
    public func scan(
        from start: [[UInt8]], until deadline: MonotonicInstant, now: () -> MonotonicInstant = { .now },
        roundLimit: Int = 256, visit: ([UInt8]) -> Bool = { _ in true }, descend: ([UInt8]) -> Bool = { _ in true },
        file: ([UInt8]) -> Void
    ) -> Summary {
        precondition(roundLimit >= 1, "a budgeted scan lists at least one directory per round, but roundLimit is \(roundLimit)")
        return walk(from: start, roundLimit: roundLimit, shouldStop: { now() >= deadline }, visit: visit, descend: descend, file: file)
    }

    // MARK: - Walking

    private func walk(
        from start: [[UInt8]], roundLimit: Int, shouldStop: () -> Bool, visit: ([UInt8]) -> Bool,
        descend: ([UInt8]) -> Bool, file: ([UInt8]) -> Void
    ) -> Summary {
        var summary = Summary()
        var frontier = start
        var head = 0
        while head < frontier.count {
            let end = roundLimit >= frontier.count - head ? frontier.count : head + roundLimit
            let round = frontier[head..<end].filter(visit)
            head = end
            let listings = list(round, parallel: &summary.parallelRounds)
            for (directory, listing) in zip(round, listings) {
                if let failure = listing.failure { summary.failures.append(failure) }
                if listing.failure?.step != .open { summary.directoriesListed += 1 }
                for entry in listing.entries {
                    summary.types[entry.type] += 1
                    let child = directory.isEmpty ? entry.name : directory + [UInt8(ascii: "/")] + entry.name
                    switch entry.type {
                    case .regular: file(child)
                    case .directory: if descend(child) { frontier.append(child) }
                    default: break
                    }
                }
            }
            // The consumed front is dropped once it is most of the array, so a long budgeted
            // scan does not drag every directory it ever listed along.
            if head >= 4_096 && head * 2 >= frontier.count {
                frontier.removeFirst(head)
                head = 0
            }
            if head < frontier.count && shouldStop() {
                summary.remaining = Array(frontier[head...])
                break
            }
        }
        return summary
    }

    struct Entry: Sendable {
        let name: [UInt8]
        let type: EntryType
    }

    struct Listing: Sendable {
        var entries: [Entry] = []
        var failure: ListingFailure?
    }

    private func list(_ directories: [[UInt8]], parallel: inout Int) -> [Listing] {
        guard directories.count >= parallelThreshold else { return directories.map(listDirectory) }
        parallel += 1
        let results = ListingSlots(count: directories.count)
        let stride = self.stride
        let chunks = (directories.count + stride - 1) / stride
        DispatchQueue.concurrentPerform(iterations: chunks) { chunk in
            for index in (chunk * stride)..<min(directories.count, (chunk + 1) * stride) {
                results.store(listDirectory(directories[index]), at: index)
            }
        }
        return results.values
    }

    func absolute(_ relative: [UInt8]) -> [UInt8] {
        relative.isEmpty ? root : root + [UInt8(ascii: "/")] + relative
    }

    /// One directory's entries, "." and ".." left out. A failure part-way through readdir
    /// keeps what was read.
    func listDirectory(_ relative: [UInt8]) -> Listing {
        var listing = Listing()
        let path = absolute(relative)
        let flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (relative.isEmpty ? 0 : O_NOFOLLOW)
        let stream: OpaquePointer
        switch valueOrErrno({ Self.withCString(path) { open($0, flags) } }) {
        case .success(let descriptor):
            switch pointerOrErrno({ fdopendir(descriptor) }) {
            case .success(let opened): stream = opened
            case .failure(let error):
                close(descriptor)
                listing.failure = ListingFailure(directory: relative, step: .open, errorNumber: error.rawValue)
                return listing
            }
        case .failure(let error):
            listing.failure = ListingFailure(directory: relative, step: .open, errorNumber: error.rawValue)
            return listing
        }
        defer { closedir(stream) }
        while true {
            let entry: UnsafeMutablePointer<dirent>
            switch nextDirectoryEntry(stream) {
            case .success(let next?): entry = next
            case .success(nil): return listing
            case .failure(let error):
                listing.failure = ListingFailure(directory: relative, step: .read, errorNumber: error.rawValue)
                return listing
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if name == [UInt8(ascii: ".")] || name == [UInt8(ascii: "."), UInt8(ascii: ".")] { continue }
            guard let type = EntryType(directoryEntryType: entry.pointee.d_type) ?? Self.lstatType(path + [UInt8(ascii: "/")] + name) else {
                continue // gone between readdir and lstat: nothing left to hand out or count
            }
            listing.entries.append(Entry(name: name, type: type))
        }
    }

    /// The type by lstat, for DT_UNKNOWN; nil when the entry is gone.
    static func lstatType(_ path: [UInt8]) -> EntryType? {
        var info = stat()
        guard withCString(path, { lstat($0, &info) }) == 0 else { return nil }
        return EntryType(mode: info.st_mode)
    }

    static func withCString<Result>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) -> Result) -> Result {
        withPathCString(path, body)
    }
}

/// Each concurrentPerform iteration writes only its own slots, and the slots are read
/// after concurrentPerform returns, which waits for every iteration.
// @unchecked Sendable: each concurrentPerform iteration writes only its own slots.
private final class ListingSlots: @unchecked Sendable {
    private let slots: UnsafeMutableBufferPointer<TreeScanner.Listing>

    init(count: Int) {
        slots = .allocate(capacity: count)
        slots.initialize(repeating: TreeScanner.Listing())
    }

    deinit {
        slots.deinitialize()
        slots.deallocate()
    }

    func store(_ listing: TreeScanner.Listing, at index: Int) {
        slots[index] = listing
    }

    var values: [TreeScanner.Listing] { Array(slots) }
}
