/// Which owner's directory each watch descriptor stands for, both ways, and the one place
/// where inotify's events about the watches themselves are interpreted.
///
/// An owner is whatever watches a tree (a watch rule's name); a location is a directory
/// relative to the owner's root, as bytes ("" is the root). One descriptor can stand for
/// several locations: inotify gives every watch of one inode the same descriptor, so two
/// rules watching /srv/in share it (and must add with IN_MASK_ADD, see
/// `InotifyWatcher.ExistingWatch`). The descriptor is only unwatched when its last
/// location goes: the removing calls return the descriptors nobody uses any more.
///
/// A value type with no locking: its owner keeps it on the watching queue.
public struct WatchTable<Owner: Hashable & Sendable>: Sendable {
    public struct Location: Hashable, Sendable, CustomStringConvertible {
        public let owner: Owner
        /// The watched directory relative to the owner's root, "" for the root itself.
        public let relative: [UInt8]

        public init(owner: Owner, relative: [UInt8]) {
            self.owner = owner
            self.relative = relative
        }

        /// The path relative to the owner's root of an entry named `name` in this directory.
        public func path(of name: [UInt8]) -> [UInt8] {
            if name.isEmpty { return relative }
            return relative.isEmpty ? name : relative + [UInt8(ascii: "/")] + name
        }

        /// Whether this directory is `prefix` or lies under it, by whole path components:
        /// "a" covers "a" and "a/b", not "ab"; "" covers everything.
        public func isWithin(_ prefix: [UInt8]) -> Bool {
            if prefix.isEmpty || relative == prefix { return true }
            return relative.count > prefix.count && relative.starts(with: prefix) && relative[prefix.count] == UInt8(ascii: "/")
        }

        public var description: String { "\(owner):\(relative.isEmpty ? "." : String(decoding: relative, as: UTF8.self))" }
    }

    /// What one event means for the owners. Events about the watch itself (the directory
    /// renamed, deleted or unmounted, the watch gone) are told apart here, once, so owners
    /// do not each test IN_MOVE_SELF and friends.
    public enum Interpretation: Equatable, Sendable {
        /// An event on an entry of a watched directory (or on the directory itself, with
        /// an empty name): `locations` are every owner's directory it happened in.
        case entry(InotifyEvent, locations: [Location])
        /// IN_Q_OVERFLOW: events were lost, for every watch of the instance. Each owner
        /// has to rescan its trees to find what changed.
        case overflow
        /// IN_MOVE_SELF: the watched directory was renamed. The watch follows the inode to
        /// its new name, which the table cannot know, so its later events are no longer
        /// attributed to the old path (`unattributed`). For a root, the owner should
        /// remove the watch and watch the path again when something is there; for a
        /// subdirectory, the parent's IN_MOVED_FROM/IN_MOVED_TO tell where it went.
        case movedAway(WatchDescriptor, locations: [Location])
        /// IN_DELETE_SELF: the watched directory was deleted; IN_IGNORED follows.
        case deleted(WatchDescriptor, locations: [Location])
        /// IN_UNMOUNT: the file system under the watch was unmounted; IN_IGNORED follows.
        /// The path may now show the directory the mount covered: watch it again.
        case unmounted(WatchDescriptor, locations: [Location])
        /// IN_IGNORED: the watch is gone (after the three above, or a removal). The entry
        /// has been dropped from the table; `locations` are the owners who still had it
        /// (empty when the owner had removed it, which needs no action).
        case watchGone(WatchDescriptor, locations: [Location])
        /// An event for a descriptor the table no longer attributes: removed by its owner
        /// (events still queued), or detached by a move. Nothing to do but count it.
        case unattributed(InotifyEvent)
        /// Events of these owners' trees (their roots' locations) were lost without an
        /// overflow (fanotify: a directory handle that could not be resolved): they rescan.
        case missed(locations: [Location])
    }

    /// Every location is a node of the tree (its name and its parent's index, not its path);
    /// a descriptor's locations are a chain of nodes from `heads`.
    private var tree = DirectoryTree()
    private var owners: [Owner] = []
    private var ownerIndexes: [Owner: Int32] = [:]
    /// Each live descriptor's first location.
    private var heads: [WatchDescriptor: Int32] = [:]
    public private(set) var locationCount = 0

    public init() {}

    /// Number of live descriptors (the kernel's watches), not locations.
    public var descriptorCount: Int { heads.count }

    public func descriptor(for location: Location) -> WatchDescriptor? {
        guard let node = node(of: location), tree[node].wd >= 0 else { return nil }
        return WatchDescriptor(rawValue: tree[node].wd)
    }

    public func descriptor(owner: Owner, relative: [UInt8]) -> WatchDescriptor? {
        descriptor(for: Location(owner: owner, relative: relative))
    }

    /// Every location `wd` stands for, attached or not.
    public func locations(of wd: WatchDescriptor) -> [Location] {
        chain(of: wd).map { location($0) }
    }

    public func isDetached(_ wd: WatchDescriptor) -> Bool {
        heads[wd].map { tree[$0].detached } ?? false
    }

    /// Every location of `owner`, for rescans and for the dump.
    public func locations(ofOwner owner: Owner) -> [Location] {
        guard let index = ownerIndexes[owner] else { return [] }
        return tree.nodes.indices.compactMap { position in
            let node = Int32(position)
            guard tree.isLive(node), tree[node].owner == index, tree[node].wd >= 0 else { return nil }
            return location(node)
        }
    }

    public enum Insertion: Equatable, Sendable {
        /// The descriptor was new to the table.
        case newWatch
        /// The descriptor already stood for other locations: another owner, or the same
        /// inode reached by a second path.
        case sharedWatch
        /// The location already had this descriptor.
        case unchanged
    }

    /// Records that `location` is watched by `wd`, as `addWatch` returned it. A location
    /// that had another descriptor (its directory replaced) is moved to the new one; the
    /// old descriptor is returned in `replaced` if nobody else uses it, for removal. A
    /// detached descriptor that comes back (the same directory moved back and watched
    /// again, so the kernel returned the same descriptor) is attached again.
    @discardableResult
    public mutating func insert(_ wd: WatchDescriptor, for location: Location) -> (insertion: Insertion, replaced: WatchDescriptor?) {
        let node = tree.ensure(owner: ownerIndex(location.owner), relative: location.relative)
        var replaced: WatchDescriptor?
        if tree[node].wd >= 0 {
            let previous = WatchDescriptor(rawValue: tree[node].wd)
            if previous == wd, !tree[node].detached { return (.unchanged, nil) }
            if previous != wd { replaced = detach(node, from: previous) }
        }
        guard let head = heads[wd] else {
            attach(node, to: wd, after: nil)
            return (.newWatch, replaced)
        }
        if tree[head].detached {
            // Back from a move: the old locations are stale, the new one is the truth.
            let stale = chain(of: wd).filter { $0 != node }
            for old in stale { unwatch(old) }
            heads[wd] = nil
            attach(node, to: wd, after: nil)
            // Only now: a stale location may be the new one's only child, which must stay.
            for old in stale { tree.pruneIfUnused(old) }
            return (.newWatch, replaced)
        }
        let existing = chain(of: wd)
        if !existing.contains(node) { attach(node, to: wd, after: existing.last) }
        return (.sharedWatch, replaced)
    }

    /// Forgets `location`; returns its descriptor if no other location uses it, which the
    /// caller then removes with `InotifyWatcher.removeWatch`.
    public mutating func remove(_ location: Location) -> WatchDescriptor? {
        guard let node = node(of: location), tree[node].wd >= 0 else { return nil }
        let unused = detach(node, from: WatchDescriptor(rawValue: tree[node].wd))
        tree.pruneIfUnused(node)
        return unused
    }

    /// Forgets `owner`'s directory `prefix` and everything under it (a deleted or moved
    /// subtree, or a whole rule with ""); returns the descriptors nobody uses any more.
    public mutating func removeSubtree(owner: Owner, under prefix: [UInt8]) -> [WatchDescriptor] {
        guard let index = ownerIndexes[owner], let top = tree.find(owner: index, relative: prefix) else { return [] }
        // A leaf is the common case (one directory deleted); otherwise one pass over all.
        let doomed = tree[top].children == 0
            ? [top]
            : tree.nodes.indices.map { Int32($0) }.filter { tree.isLive($0) && tree[$0].owner == index && tree.isWithin($0, top) }
        var unused: [WatchDescriptor] = []
        for node in doomed where tree[node].wd >= 0 {
            if let wd = detach(node, from: WatchDescriptor(rawValue: tree[node].wd)) { unused.append(wd) }
        }
        // A prune walks up through every ancestor left empty, so the order does not matter.
        for node in doomed.reversed() where tree.isLive(node) { tree.pruneIfUnused(node) }
        return unused.sorted()
    }

    public mutating func removeOwner(_ owner: Owner) -> [WatchDescriptor] {
        removeSubtree(owner: owner, under: [])
    }

    /// Interprets one event and updates the table for it (IN_IGNORED drops the entry,
    /// IN_MOVE_SELF and IN_DELETE_SELF detach it).
    public mutating func interpret(_ event: InotifyEvent) -> Interpretation {
        let mask = event.mask
        if mask.contains(.queueOverflow) { return .overflow }
        if mask.contains(.ignored) {
            let nodes = chain(of: event.wd)
            let locations = nodes.map { location($0) }
            heads[event.wd] = nil
            for node in nodes {
                unwatch(node)
                tree.pruneIfUnused(node)
            }
            return .watchGone(event.wd, locations: locations)
        }
        guard let head = heads[event.wd], !tree[head].detached else { return .unattributed(event) }
        // IN_UNMOUNT, IN_DELETE_SELF, IN_MOVE_SELF are about the watch itself: detached,
        // nothing more will be attributed to these paths (IN_IGNORED follows the first two).
        let detaching = mask.contains(.unmount) || mask.contains(.deleteSelf) || mask.contains(.moveSelf)
        // An entry's event on a descriptor of one location, nearly every event: no chain to
        // collect (an array per event, on the way from a file's close to its job).
        if !detaching && tree[head].nextOfDescriptor < 0 { return .entry(event, locations: [location(head)]) }
        let nodes = chain(of: event.wd)
        if detaching {
            for node in nodes { tree[node].detached = true }
        }
        // A closure, not `map(location)`: the unapplied method would capture a copy of the
        // whole table (a retain and release of each of its arrays) per event.
        let locations = nodes.map { location($0) }
        if mask.contains(.unmount) { return .unmounted(event.wd, locations: locations) }
        if mask.contains(.deleteSelf) { return .deleted(event.wd, locations: locations) }
        if mask.contains(.moveSelf) { return .movedAway(event.wd, locations: locations) }
        return .entry(event, locations: locations)
    }

    // MARK: - Nodes

    private mutating func ownerIndex(_ owner: Owner) -> Int32 {
        if let index = ownerIndexes[owner] { return index }
        owners.append(owner)
        let index = Int32(owners.count - 1)
        ownerIndexes[owner] = index
        return index
    }

    private func node(of location: Location) -> Int32? {
        guard let index = ownerIndexes[location.owner] else { return nil }
        return tree.find(owner: index, relative: location.relative)
    }

    private func location(_ node: Int32) -> Location {
        Location(owner: owners[Int(tree[node].owner)], relative: tree.path(of: node))
    }

    /// `wd`'s locations, in the order they were added.
    private func chain(of wd: WatchDescriptor) -> [Int32] {
        var nodes: [Int32] = []
        var current = heads[wd] ?? -1
        while current >= 0 {
            nodes.append(current)
            current = tree[current].nextOfDescriptor
        }
        return nodes
    }

    private mutating func attach(_ node: Int32, to wd: WatchDescriptor, after last: Int32?) {
        if tree[node].wd < 0 { locationCount += 1 }
        tree[node].wd = wd.rawValue
        tree[node].nextOfDescriptor = -1
        tree[node].detached = false
        if let last { tree[last].nextOfDescriptor = node } else { heads[wd] = node }
    }

    /// `node` is no longer a location (its chain is the caller's to mend); it stays a node
    /// until pruned.
    private mutating func unwatch(_ node: Int32) {
        tree[node].wd = -1
        tree[node].nextOfDescriptor = -1
        tree[node].detached = false
        locationCount -= 1
    }

    /// Takes `node` out of `wd`'s chain; returns `wd` when that was its last location. The
    /// node itself stays (the caller prunes it, or gives it another descriptor).
    private mutating func detach(_ node: Int32, from wd: WatchDescriptor) -> WatchDescriptor? {
        let nodes = chain(of: wd)
        let remaining = nodes.filter { $0 != node }
        unwatch(node)
        guard let first = remaining.first else {
            heads[wd] = nil
            return wd
        }
        heads[wd] = first
        for (index, member) in remaining.enumerated() {
            tree[member].nextOfDescriptor = index + 1 < remaining.count ? remaining[index + 1] : -1
        }
        return nil
    }

    /// Per owner: how many directories it watches; plus the instance's descriptor count.
    public func describe(ownerName: (Owner) -> String) -> DumpValue {
        var perOwner = [Int](repeating: 0, count: owners.count)
        for node in tree.nodes where node.parent != -2 && node.wd >= 0 { perOwner[Int(node.owner)] += 1 }
        var byName: [String: Int] = [:]
        for index in owners.indices where perOwner[index] > 0 { byName[ownerName(owners[index]), default: 0] += perOwner[index] }
        let named = byName.map { ($0.key, $0.value) }
        return .object([
            .init("descriptors", .int(Int64(heads.count))),
            .init("detached", .int(Int64(heads.values.filter { tree[$0].detached }.count))),
            .init("directories_by_owner", .object(named.sorted { $0.0 < $1.0 }.map { .init($0.0, .int(Int64($0.1))) })),
        ])
    }
}
