/// The two kernel interfaces a rule's tree can be watched with.
enum WatchBackendKind: String, Hashable, Sendable {
    /// One inotify watch per directory (InotifyBackend).
    case inotify
    /// One fanotify mark per file system (FanotifyBackend).
    case fanotify
}

/// Which backend watches a rule's tree, and when it moves to fanotify: at the start when
/// the rule says `method = "fanotify"`, and under `auto` when the tree outgrows a number
/// of inotify watches or meets the inotify watch limit. A pure value: its methods say
/// what to do, TreeScans.take does it (through WatchBackends.moveToFanotify) and tells it
/// how that went. A tree fanotify refused stays on inotify until it is watched anew, and the
/// refusal is said once per reason.
struct TreeBackendChoice: Equatable {
    private(set) var backend: WatchBackendKind = .inotify
    /// inotify watches added for the tree since it was last watched from scratch: what
    /// `auto` compares with its threshold.
    private(set) var inotifyDirectories = 0
    /// Why fanotify cannot take the tree, until it is watched anew: `auto` does not ask
    /// again at every directory past the threshold.
    private(set) var refused: String?
    /// The refusal last said in the log.
    private var said: String?

    enum Step: Equatable {
        case stay
        /// Ask the fanotify backend to take the tree, because of `why`.
        case moveToFanotify(why: String)
    }

    var usesFanotify: Bool { backend == .fanotify }

    /// The tree is about to be watched from its root.
    func atStart(method: WatchMethod) -> Step {
        method == .fanotify ? ask(because: "the rule says method = \"fanotify\"") : .stay
    }

    /// An inotify watch was added for a directory of the tree.
    mutating func watchedDirectory(method: WatchMethod, above threshold: Int) -> Step {
        guard backend == .inotify else { return .stay }
        inotifyDirectories += 1
        guard method == .auto, inotifyDirectories > threshold else { return .stay }
        return ask(because: "it has more than \(threshold) directories")
    }

    /// inotify refused a watch with ENOSPC (the limit named in `limit`).
    func watchLimitReached(method: WatchMethod, limit: String) -> Step {
        guard method == .auto, backend == .inotify else { return .stay }
        return ask(because: "the inotify watch limit (fs.inotify.max_user_watches=\(limit)) was reached")
    }

    private func ask(because why: String) -> Step {
        backend == .inotify && refused == nil ? .moveToFanotify(why: why) : .stay
    }

    /// fanotify took the tree: the inotify watches it had (to be handed over) are returned.
    mutating func movedToFanotify() -> Int {
        backend = .fanotify
        defer { inotifyDirectories = 0 }
        return inotifyDirectories
    }

    /// fanotify could not take the tree: true when `why` is to be said (once per reason).
    mutating func fanotifyRefused(_ why: String) -> Bool {
        refused = why
        guard said != why else { return false }
        said = why
        return true
    }

    /// The tree is unwatched: it starts again on inotify, and fanotify may be asked again.
    mutating func unwatched() {
        backend = .inotify
        inotifyDirectories = 0
        refused = nil
    }
}
