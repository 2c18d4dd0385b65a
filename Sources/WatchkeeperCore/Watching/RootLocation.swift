/// Where a rule's configured path leads now: the directory watched (symbolic links
/// resolved), what was said about it, the links on the path, and while it is missing, the
/// name awaited in the nearest directory above it. RootTracking keeps it current.
struct RootLocation: Equatable {
    /// The directory actually watched: the configured root with symbolic links resolved
    /// (nil while it is missing). Jobs get paths under it: a link retargeted later cannot
    /// make a job run on another file than the one whose event it was.
    var root: [UInt8]?
    /// Said once in the log and kept for the dump: "a symbolic link to /data/in".
    var note: String?
    /// The symbolic links on the configured path (absolute, without the leading slash, under
    /// their real directory): a change of one of these names is a possible retarget.
    var links: Set<[UInt8]> = []
    /// While the root is missing: the name whose appearance in the watched directory above it
    /// (the nearest that exists) brings it, or its next missing parent, closer.
    var awaitedName: [UInt8] = []
}
