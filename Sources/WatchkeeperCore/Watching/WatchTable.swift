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
    }

    private struct Entry: Sendable {
        var locations: [Location]
        /// After IN_MOVE_SELF or IN_DELETE_SELF: the locations are kept (to tell owners
        /// on IN_IGNORED and to let them remove the watch) but no longer receive events.
        var detached = false
    }

    private var entries: [WatchDescriptor: Entry] = [:]
    private var descriptors: [Location: WatchDescriptor] = [:]

    public init() {}

    /// Number of live descriptors (the kernel's watches), not locations.
    public var descriptorCount: Int { entries.count }
    public var locationCount: Int { descriptors.count }

    public func descriptor(for location: Location) -> WatchDescriptor? {
        descriptors[location]
    }

    public func descriptor(owner: Owner, relative: [UInt8]) -> WatchDescriptor? {
        descriptors[Location(owner: owner, relative: relative)]
    }

    /// Every location `wd` stands for, attached or not.
    public func locations(of wd: WatchDescriptor) -> [Location] {
        entries[wd]?.locations ?? []
    }

    public func isDetached(_ wd: WatchDescriptor) -> Bool {
        entries[wd]?.detached ?? false
    }

    /// Every location of `owner`, for rescans and for the dump.
    public func locations(ofOwner owner: Owner) -> [Location] {
        descriptors.keys.filter { $0.owner == owner }
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
        var replaced: WatchDescriptor?
        if let previous = descriptors[location] {
            if previous == wd, entries[wd]?.detached == false { return (.unchanged, nil) }
            if previous != wd { replaced = detachLocation(location, from: previous) }
        }
        descriptors[location] = wd
        if var entry = entries[wd] {
            if entry.detached {
                // Back from a move: the old locations are stale, the new one is the truth.
                for stale in entry.locations where stale != location && descriptors[stale] == wd { descriptors[stale] = nil }
                entry = Entry(locations: [location])
                entries[wd] = entry
                return (.newWatch, replaced)
            }
            if !entry.locations.contains(location) { entry.locations.append(location) }
            entries[wd] = entry
            return (.sharedWatch, replaced)
        }
        entries[wd] = Entry(locations: [location])
        return (.newWatch, replaced)
    }

    /// Forgets `location`; returns its descriptor if no other location uses it, which the
    /// caller then removes with `InotifyWatcher.removeWatch`.
    public mutating func remove(_ location: Location) -> WatchDescriptor? {
        guard let wd = descriptors[location] else { return nil }
        return detachLocation(location, from: wd)
    }

    /// Forgets `owner`'s directory `prefix` and everything under it (a deleted or moved
    /// subtree, or a whole rule with ""); returns the descriptors nobody uses any more.
    public mutating func removeSubtree(owner: Owner, under prefix: [UInt8]) -> [WatchDescriptor] {
        let doomed = descriptors.keys.filter { $0.owner == owner && $0.isWithin(prefix) }
        return doomed.compactMap { remove($0) }.sorted()
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
            let entry = entries.removeValue(forKey: event.wd)
            for location in entry?.locations ?? [] where descriptors[location] == event.wd {
                descriptors[location] = nil
            }
            return .watchGone(event.wd, locations: entry?.locations ?? [])
        }
        guard var entry = entries[event.wd], !entry.detached else { return .unattributed(event) }
        if mask.contains(.unmount) {
            // Detached too: nothing more will arrive but IN_IGNORED.
            entry.detached = true
            entries[event.wd] = entry
            return .unmounted(event.wd, locations: entry.locations)
        }
        // IN_MOVE_SELF and IN_DELETE_SELF carry no name: they are about the watch itself.
        if mask.contains(.deleteSelf) {
            entry.detached = true
            entries[event.wd] = entry
            return .deleted(event.wd, locations: entry.locations)
        }
        if mask.contains(.moveSelf) {
            entry.detached = true
            entries[event.wd] = entry
            return .movedAway(event.wd, locations: entry.locations)
        }
        return .entry(event, locations: entry.locations)
    }

    /// Drops `location` from `wd`'s entry; returns `wd` when that was its last location.
    private mutating func detachLocation(_ location: Location, from wd: WatchDescriptor) -> WatchDescriptor? {
        descriptors[location] = nil
        guard var entry = entries[wd] else { return nil }
        entry.locations.removeAll { $0 == location }
        if entry.locations.isEmpty {
            entries[wd] = nil
            return wd
        }
        entries[wd] = entry
        return nil
    }

    /// Per owner: how many directories it watches; plus the instance's descriptor count.
    public func describe(ownerName: (Owner) -> String) -> DumpValue {
        var perOwner: [String: Int] = [:]
        for location in descriptors.keys { perOwner[ownerName(location.owner), default: 0] += 1 }
        return .object([
            .init("descriptors", .int(Int64(entries.count))),
            .init("detached", .int(Int64(entries.values.filter(\.detached).count))),
            .init("directories_by_owner", .object(perOwner.sorted { $0.key < $1.key }.map { .init($0.key, .int(Int64($0.value))) })),
        ])
    }
}
