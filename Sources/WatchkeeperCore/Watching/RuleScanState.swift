/// A rule's walks of its tree beyond the events: the directories that could not be watched
/// (scanned by the fallback timer), a rescan's cut-off after lost events, and a fanotify
/// tree's listing in slices. TreeScans keeps it.
struct RuleScanState {
    /// Directories that could not be watched (the watch limit, EACCES, ...): scanned by the
    /// fallback scan, which also tries to watch them again.
    var unwatchable: [[UInt8]] = []
    var fallbackTimer: (any WatchTimer)?
    /// A rescan after lost events in a rule without catch-up: only files changed since then
    /// (nanoseconds since the epoch) are new; the others were there before (inotify's rescan,
    /// which is synchronous; a fanotify listing carries its own, `Listing.changedSince`).
    var rescanChangedSince: Int64?
    /// A fanotify tree's listing for the files already there, while it goes on in slices
    /// (TreeScans.listInSlices).
    var listing: Listing?
    /// Its next slice.
    var listingTimer: (any WatchTimer)?
    struct Listing {
        /// Directories still to list, the next at the end.
        var pending: [[UInt8]]
        let began: MonotonicInstant
        var directories = 0
        var slices = 0
        /// Set when the listing is a rescan after lost events in a rule without catch-up.
        var changedSince: Int64?
    }
}
