import Synchronization

/// Parsed zones by path. Loading is rare (configuration load and reload) and lookups are
/// quick, so one Mutex suffices. The file is read outside the lock: two threads that
/// load the same zone at once both parse it and the second store wins, harmlessly.
final class TimeZoneCache: Sendable {
    static let shared = TimeZoneCache()

    private let zones = Mutex<[String: TimeZoneRules]>([:])

    func rules(forKey key: String) -> TimeZoneRules? {
        zones.withLock { $0[key] }
    }

    func store(_ rules: TimeZoneRules, forKey key: String) {
        zones.withLock { $0[key] = rules }
    }

    func removeAll() {
        zones.withLock { $0.removeAll() }
    }
}
