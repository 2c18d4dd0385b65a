import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// What a TreePoller is told and tells (its settings, the files it hands on, its reports),
/// and the facts of file systems it goes by: which errors mean the file system is unwell,
/// how often a share's unchanged directories have their files stat'ed, how long it waits
/// after failures.
extension TreePoller {
    struct Settings: Sendable {
        /// The rule's root (real path).
        var root: [UInt8]
        var tree: PolledTree
        var interval: Duration
        var settle: Duration
        var recursive: Bool
        var followSymlinks: Bool
        /// The first pass hands on every file found (the ledger and this life's memory say
        /// which were handled); without it only files changed since the poller started.
        var catchUp: Bool
        /// The rule has no include or exclude: no path is built to ask the filter.
        var selectsAll = false
        /// The files of a directory that did not change are stat'ed every this many passes
        /// (each directory in its own turn): 1 on a local file system, where a stat costs a
        /// microsecond; on a network one each is a round trip (200 µs over sshfs, 13.5 s a
        /// pass for 100,000 files), so new files, which change their directory, are found
        /// at every pass and a file rewritten in place within this many.
        var sweepEvery = 1
        /// The largest share of one core a pass takes while it runs.
        var share: Double = 0.25
    }

    /// A file that was the same in two looks `settle` apart.
    struct Settled: Sendable {
        let relative: [UInt8]
        /// As PolledTree gives it (on a network or FUSE file system, the form that survives a remount).
        let identity: FileIdentity
        /// As the last look's statx gave it, for the watcher to give it the form it knows
        /// (a file that came by a rename keeps the identity of its first path).
        let status: FileIdentity
        /// When it was first seen new or changed: where its latency is measured from.
        let firstSeen: MonotonicInstant
        /// The name held another file (another inode) at the look before: this one came by a
        /// rename (renameat2's exchange, a `mv` over it), not by a change in place.
        var replacedAnother = false
    }

    enum Report: Sendable {
        /// A pass stopped at a file system error (ENOTCONN, ESTALE, EIO, ...): said once.
        case unreachable(path: [UInt8], error: Errno)
        /// A pass completed after passes that stopped.
        case reachableAgain(after: Duration)
        /// Entries skipped because they are not regular files, by type (each entry once).
        case skipped(TreeScanner.TypeCounts)
        /// A file renamed within the tree (PolledMoves), relative to the rule's root.
        case moved(from: [UInt8], to: [UInt8])
    }

    /// Errors that mean the file system, not this entry, is unwell: the pass stops.
    static func isFileSystemFailure(_ error: Errno) -> Bool {
        fileSystemFailures.contains(error.rawValue)
    }

    static let fileSystemFailures: Set<Int32> = [
        ENOTCONN, ESTALE, EIO, EHOSTDOWN, EHOSTUNREACH, ETIMEDOUT, ECONNABORTED, ECONNRESET, ENETDOWN, ENETUNREACH,
        EREMOTEIO, ENODEV, ENXIO, ENOLINK, ECOMM,
    ]

    /// `sweepEvery` on a network or FUSE file system: each stat there is a round trip that
    /// costs the daemon ~12 µs of kernel CPU (sshfs), and a file rewritten in place is the
    /// only one an unchanged directory hides. Every sixth pass cost 0.244 s a pass on
    /// 100,000 files over sshfs, over issue 24's 0.2 s (docs/measurements/polling.md).
    static let remoteSweepEvery = 10

    /// The longest pause between passes, or second looks, at a file system that fails them:
    /// each failure in a row doubles the pause, from the interval (the settle) up to this.
    static func longestPause(interval: Duration) -> Duration { max(interval, .seconds(10)) }

    /// The CPU this thread has used: what a pass or a round of second looks costs.
    static func threadCPU() -> Duration {
        var spec = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec)
        return .seconds(Int64(spec.tv_sec)) + .nanoseconds(Int64(spec.tv_nsec))
    }

}
