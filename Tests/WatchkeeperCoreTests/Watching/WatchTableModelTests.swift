import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// The watch table against the path-keyed table it replaced (kept here as the reference:
/// every location's whole path as a map key), over random operations on a small tree:
/// every answer, and then every location's descriptor, must agree.
final class WatchTableModelTests: XCTestCase {
    typealias Table = WatchTable<String>

    struct Reference {
        typealias Owner = String
        private struct Entry: Sendable {
            var locations: [Table.Location]
            /// After IN_MOVE_SELF or IN_DELETE_SELF: the locations are kept (to tell owners
            /// on IN_IGNORED and to let them remove the watch) but no longer receive events.
            var detached = false
        }

        private var entries: [WatchDescriptor: Entry] = [:]
        private var descriptors: [Table.Location: WatchDescriptor] = [:]

        init() {}

        /// Number of live descriptors (the kernel's watches), not locations.
        var descriptorCount: Int { entries.count }
        var locationCount: Int { descriptors.count }

        func descriptor(for location: Table.Location) -> WatchDescriptor? {
            descriptors[location]
        }

        func descriptor(owner: String, relative: [UInt8]) -> WatchDescriptor? {
            descriptors[Table.Location(owner: owner, relative: relative)]
        }

        /// Every location `wd` stands for, attached or not.
        func locations(of wd: WatchDescriptor) -> [Table.Location] {
            entries[wd]?.locations ?? []
        }

        func isDetached(_ wd: WatchDescriptor) -> Bool {
            entries[wd]?.detached ?? false
        }

        /// Every location of `owner`, for rescans and for the dump.
        func locations(ofOwner owner: String) -> [Table.Location] {
            descriptors.keys.filter { $0.owner == owner }
        }


        /// Records that `location` is watched by `wd`, as `addWatch` returned it. A location
        /// that had another descriptor (its directory replaced) is moved to the new one; the
        /// old descriptor is returned in `replaced` if nobody else uses it, for removal. A
        /// detached descriptor that comes back (the same directory moved back and watched
        /// again, so the kernel returned the same descriptor) is attached again.
        @discardableResult
        mutating func insert(_ wd: WatchDescriptor, for location: Table.Location) -> (insertion: Table.Insertion, replaced: WatchDescriptor?) {
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
        mutating func remove(_ location: Table.Location) -> WatchDescriptor? {
            guard let wd = descriptors[location] else { return nil }
            return detachLocation(location, from: wd)
        }

        /// Forgets `owner`'s directory `prefix` and everything under it (a deleted or moved
        /// subtree, or a whole rule with ""); returns the descriptors nobody uses any more.
        mutating func removeSubtree(owner: String, under prefix: [UInt8]) -> [WatchDescriptor] {
            let doomed = descriptors.keys.filter { $0.owner == owner && $0.isWithin(prefix) }
            return doomed.compactMap { remove($0) }.sorted()
        }

        mutating func removeString(_ owner: String) -> [WatchDescriptor] {
            removeSubtree(owner: owner, under: [])
        }

        /// Interprets one event and updates the table for it (IN_IGNORED drops the entry,
        /// IN_MOVE_SELF and IN_DELETE_SELF detach it).
        mutating func interpret(_ event: InotifyEvent) -> Table.Interpretation {
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
        private mutating func detachLocation(_ location: Table.Location, from wd: WatchDescriptor) -> WatchDescriptor? {
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

    }

    func testRandomOperations_agreeWithThePathKeyedTable() {
        let owners = ["a", "b"]
        let names = ["x", "y", "z\u{0}", "\u{FF}"]
        for seed in UInt64(1)...25 {
            var random = SeededGenerator(seed: seed)
            var table = Table()
            var reference = Reference()
            var paths: [[UInt8]] = [[]]
            for first in names {
                paths.append(Array(first.utf8))
                for second in names { paths.append(Array("\(first)/\(second)".utf8)) }
            }
            paths.append(Array("x/y/z/x".utf8))
            func location() -> Table.Location {
                Table.Location(owner: owners.randomElement(using: &random)!, relative: paths.randomElement(using: &random)!)
            }
            for step in 0..<600 {
                let wd = WatchDescriptor(rawValue: Int32.random(in: 1...12, using: &random))
                let context = "seed \(seed) step \(step)"
                switch Int.random(in: 0..<10, using: &random) {
                case 0...3:
                    let at = location()
                    let got = table.insert(wd, for: at)
                    let want = reference.insert(wd, for: at)
                    XCTAssertEqual(got.insertion, want.insertion, context)
                    XCTAssertEqual(got.replaced, want.replaced, context)
                case 4:
                    let at = location()
                    XCTAssertEqual(table.remove(at), reference.remove(at), context)
                case 5:
                    let at = location()
                    XCTAssertEqual(table.removeSubtree(owner: at.owner, under: at.relative),
                                   reference.removeSubtree(owner: at.owner, under: at.relative), context)
                default:
                    let masks: [InotifyMask] = [.create, .ignored, .moveSelf, .deleteSelf, .unmount, .closeWrite]
                    let event = InotifyEvent(wd: wd, mask: masks.randomElement(using: &random)!, cookie: 0, name: Array("f".utf8))
                    XCTAssertEqual(table.interpret(event), reference.interpret(event), context)
                }
                XCTAssertEqual(table.descriptorCount, reference.descriptorCount, context)
                XCTAssertEqual(table.locationCount, reference.locationCount, context)
                for owner in owners {
                    for path in paths {
                        let at = Table.Location(owner: owner, relative: path)
                        XCTAssertEqual(table.descriptor(for: at), reference.descriptor(for: at), "\(context): \(at)")
                    }
                    XCTAssertEqual(Set(table.locations(ofOwner: owner)), Set(reference.locations(ofOwner: owner)), context)
                }
                for raw in Int32(1)...12 {
                    let wd = WatchDescriptor(rawValue: raw)
                    XCTAssertEqual(table.locations(of: wd), reference.locations(of: wd), context)
                    XCTAssertEqual(table.isDetached(wd), reference.isDetached(wd), context)
                }
            }
        }
    }
}
