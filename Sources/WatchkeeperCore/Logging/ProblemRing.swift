import Synchronization

/// The last N warnings and errors, for the dump: an operator who sends SIGUSR1
/// should see what went wrong recently without searching the journal.
/// Appended from any thread that logs; a Mutex, since appends are rare and the
/// dump needs a consistent copy (docs/measurements/sync-primitives.md).
public final class ProblemRing: Sendable {
    public struct Entry: Sendable, Equatable {
        public let time: WallTime
        public let level: String
        public let message: String
    }

    private struct Storage {
        var entries: [Entry] = []
        var capacity: Int
        var total: UInt64 = 0
    }

    private let storage: Mutex<Storage>

    public init(capacity: Int) {
        storage = Mutex(Storage(capacity: max(1, capacity)))
    }

    public func record(level: String, message: String) {
        let entry = Entry(time: .now(), level: level, message: message)
        storage.withLock { storage in
            storage.entries.append(entry)
            storage.total += 1
            if storage.entries.count > storage.capacity {
                storage.entries.removeFirst(storage.entries.count - storage.capacity)
            }
        }
    }

    public func resize(capacity: Int) {
        storage.withLock { storage in
            storage.capacity = max(1, capacity)
            if storage.entries.count > storage.capacity {
                storage.entries.removeFirst(storage.entries.count - storage.capacity)
            }
        }
    }

    /// Oldest first, plus how many were recorded since start (including those dropped).
    public func snapshot() -> (entries: [Entry], total: UInt64, capacity: Int) {
        storage.withLock { ($0.entries, $0.total, $0.capacity) }
    }
}
