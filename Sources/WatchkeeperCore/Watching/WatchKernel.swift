import SystemPackage

/// Where the watcher's kernel side comes from: the backends it opens the first time a rule
/// needs them, and whether it follows the mount table. `linux` in the daemon; the
/// watcher's unit tests bring backends whose events the test writes (FakeWatchBackend), as
/// watchman's tests bring a FakeWatcher.
struct WatchKernel {
    typealias OnChanges = ([WatchBackend.Change]) -> Void
    typealias Opener<Backend> = (SubsystemQueue, SourceRegistry, ProblemAggregator, @escaping OnChanges) throws(Errno) -> Backend

    /// One inotify instance for every rule (EMFILE: the per-user instance limit).
    var inotify: Opener<any WatchBackend>
    /// One fanotify group for the rules on huge trees.
    var fanotify: Opener<any TreeMarkingBackend>
    /// Follows /proc/self/mountinfo (MountWatcher): a file system mounted over a watched
    /// directory is watched again at once.
    var followsMounts: Bool

    static var linux: WatchKernel {
        WatchKernel(inotify: { queue, sources, problems, onChanges throws(Errno) in
            try InotifyBackend(queue: queue, sources: sources, problems: problems, onChanges: onChanges)
        }, fanotify: { queue, sources, problems, onChanges throws(Errno) in
            try FanotifyBackend(queue: queue, sources: sources, problems: problems, onChanges: onChanges)
        }, followsMounts: true)
    }
}
