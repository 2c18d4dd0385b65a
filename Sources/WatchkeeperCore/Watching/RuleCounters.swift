/// One rule's counters for the dump and the metrics: none is reset by reading them.
struct RuleCounters {
    /// The last `recent_events` raw events, oldest first (off unless configured).
    var recentEvents: [(time: WallTime, event: InotifyEvent, path: [UInt8])] = []

    var eventsSeen: UInt64 = 0
    var matched: UInt64 = 0
    var duplicates: UInt64 = 0
    var movesFollowed: UInt64 = 0
    /// Renames and attribute changes of handled files followed (confirmed), and O_TMPFILE
    /// files handled under the name they were linked to.
    var changesFollowed: UInt64 = 0
    var tmpfilesLinked: UInt64 = 0
    /// New names of files whose job was pending or running when they were renamed.
    var renamesFollowed: UInt64 = 0
    /// Files a scan found still changing, whose wait started again.
    var scanWaitsRestarted: UInt64 = 0
    /// Hard links (and files that appeared whole) handled from their IN_CREATE.
    var linksHandled: UInt64 = 0
    var jobsSubmitted: UInt64 = 0
    var batchesStarted: UInt64 = 0
    var overflows: UInt64 = 0
    var rescans: UInt64 = 0
    var fallbackScans: UInt64 = 0
    var rootsLost: UInt64 = 0
    var lastEventAt: MonotonicInstant?
    /// Entries scans and events skipped because they are not regular files.
    var skipped = TreeScanner.TypeCounts()

    /// Files the pollers handed on.
    var polledFiles: UInt64 = 0
    /// Files a rescan after lost events found unchanged since before they were lost.
    var rescanOlderSkipped: UInt64 = 0

    mutating func noteRawEvent(_ event: InotifyEvent, path: [UInt8], at now: MonotonicInstant, wallNow: @autoclosure () -> WallTime, keep: Int) {
        eventsSeen += 1
        lastEventAt = now
        guard keep > 0 else { return }
        recentEvents.append((wallNow(), event, path))
        if recentEvents.count > keep { recentEvents.removeFirst(recentEvents.count - keep) }
    }
}
