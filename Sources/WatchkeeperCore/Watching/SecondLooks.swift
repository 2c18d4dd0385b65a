/// The files a TreePoller saw new or changed, each waiting for its second look `settle`
/// after the first, and the pause after the file system failed a look. A plain value of the
/// poller's queue.
///
/// Why the pause: a look the file system fails (ENOTCONN of an sshfs client that died, EIO,
/// ESTALE) leaves its file waiting, and a timer armed for the oldest wait would be in the
/// past at once: the poller stat'ed in a loop for the whole outage (25,879 failing statx in
/// 2 s, a core; issue 36). After a failure no look is due before `retryAt`, which doubles
/// from `settle` with each failure in a row up to `maximumPause`, and a look that answers,
/// or a pass that completes, ends it.
struct SecondLooks {
    struct Candidate {
        /// What the last look saw (as PolledTree gives it).
        var identity: FileIdentity
        var lookedAt: MonotonicInstant
        /// When it was first seen new or changed: where its latency is measured from.
        let firstSeen: MonotonicInstant
        /// The name held another inode before it was seen changed (TreePoller.Settled).
        var replacedAnother: Bool
    }

    let settle: Duration
    /// The longest pause between looks at a file system that fails them.
    let maximumPause: Duration
    private(set) var waiting: [[UInt8]: Candidate] = [:]
    /// No look before this: the file system failed the last one.
    private(set) var retryAt: MonotonicInstant?
    private var failuresInARow = 0

    init(settle: Duration, maximumPause: Duration) {
        self.settle = settle
        self.maximumPause = max(settle, maximumPause)
    }

    var count: Int { waiting.count }
    var isEmpty: Bool { waiting.isEmpty }

    /// Seen new or changed by a pass: it waits `settle` from now (its first sighting kept, and
    /// that the name held another inode, once seen).
    mutating func saw(_ path: [UInt8], as identity: FileIdentity, at now: MonotonicInstant, replacedAnother: Bool = false) {
        let before = waiting[path]
        waiting[path] = Candidate(identity: identity, lookedAt: now, firstSeen: before?.firstSeen ?? now,
                                  replacedAnother: replacedAnother || before?.replacedAnother == true)
    }

    mutating func forget(_ path: [UInt8]) {
        waiting[path] = nil
    }

    /// Taken out of the wait (settled, or gone); what waited for it.
    mutating func take(_ path: [UInt8]) -> Candidate? {
        waiting.removeValue(forKey: path)
    }

    /// The paths whose second look is due now, none while the file system is given a pause.
    func due(at now: MonotonicInstant) -> [(path: [UInt8], candidate: Candidate)] {
        if let retryAt, now < retryAt { return [] }
        return waiting.filter { $0.value.lookedAt + settle <= now }.map { ($0.key, $0.value) }
    }

    /// When the next look is due (never before `retryAt`), or nil with nothing waiting.
    var nextLook: MonotonicInstant? {
        guard let oldest = waiting.values.lazy.map(\.lookedAt).min() else { return nil }
        let due = oldest + settle
        guard let retryAt else { return due }
        return max(due, retryAt)
    }

    /// The file system failed a look: the next comes after a pause, twice as long as the
    /// last one, up to `maximumPause`.
    mutating func fileSystemFailed(at now: MonotonicInstant) {
        failuresInARow += 1
        let doublings = min(failuresInARow - 1, 16)
        // Never nothing: a settle of zero would make the pause nothing too.
        let pause = min(max(settle, .milliseconds(100)) * (1 << doublings), maximumPause)
        retryAt = now + pause
    }

    /// The file system answers again (a look did, or a pass completed): no pause.
    mutating func fileSystemAnswered() {
        failuresInARow = 0
        retryAt = nil
    }
}
