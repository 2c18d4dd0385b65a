// Time zones for cron schedules, read from the system's tzdata (/usr/share/zoneinfo), the
// copy administrators update with their distribution, rather than from ICU's private copy.
// Nothing here touches TZ, tzset() or localtime(): those are process-global and the daemon
// is multi-threaded. A zone is a plain value (a transition table plus the POSIX rule that
// continues it), so conversions are pure functions any thread can call.

/// One entry of a zone's `ttinfo` table: what the clocks show during a period.
package struct LocalTimeType: Sendable, Equatable {
    var offsetSeconds: Int32
    var isDST: Bool
    var abbreviation: String
}

/// A change of local time type at an instant.
package struct ZoneTransition: Sendable, Equatable {
    package var at: Int64
    package var before: LocalTimeType
    package var after: LocalTimeType
}

/// The rules of one time zone: the TZif transition table and the POSIX TZ rule from its
/// footer, which takes over after the last listed transition. Debian's tzdata ships "fat"
/// files whose tables stop in 2037, so anything scheduled later depends on the footer.
public struct TimeZoneRules: Sendable, Equatable, CustomStringConvertible {
    /// The zone name (`Europe/Berlin`), or `localtime` when /etc/localtime is not a link
    /// into the zone directory.
    public let identifier: String
    let types: [LocalTimeType]
    /// The file's transitions, followed by the footer's up to `footerPrecomputedUntil`.
    let transitionTimes: [Int64]
    let transitionTypes: [LocalTimeType]
    let footer: PosixTimeZone?
    /// The last transition listed in the file, after which the footer's rule applies;
    /// nil when the file lists none.
    let footerTakesOverAt: Int64?
    /// The first transition computed from the footer, if any. Between `footerTakesOverAt`
    /// and this instant the footer is evaluated directly (see `footerPrecomputedFrom`).
    let footerPrecomputedStart: Int64?

    public var description: String { identifier }

    /// Evaluating the footer means date arithmetic for several years on every lookup;
    /// a schedule asks for many lookups, so the footer's transitions until then are
    /// computed once at load (two a year: a few kilobytes) and found by binary search.
    static let footerPrecomputedUntil: Int64 = CivilCalendar.days(year: 2200, month: 1, day: 1) * 86_400
    /// And from no earlier than 1900: a damaged file whose table ends millions of years ago
    /// would otherwise have loading count its way through every year since (found by
    /// fuzzing: loading never finished).
    static let footerPrecomputedFrom: Int64 = CivilCalendar.days(year: 1900, month: 1, day: 1) * 86_400

    init(identifier: String, types: [LocalTimeType], transitionTimes: [Int64], transitionTypeIndices: [Int], footer: PosixTimeZone?) {
        self.identifier = identifier
        self.types = types
        self.footer = footer
        var times = transitionTimes
        var typesAtTransitions = transitionTypeIndices.map { types[$0] }
        footerTakesOverAt = transitionTimes.last
        // Without a table the footer describes all of time and is evaluated directly.
        if let footer, let last = transitionTimes.last {
            var cursor = max(last, Self.footerPrecomputedFrom)
            while let transition = footer.nextTransition(after: cursor), transition.at < Self.footerPrecomputedUntil {
                times.append(transition.at)
                typesAtTransitions.append(transition.after)
                cursor = transition.at
            }
        }
        footerPrecomputedStart = times.count > transitionTimes.count ? times[transitionTimes.count] : nil
        self.transitionTimes = times
        self.transitionTypes = typesAtTransitions
    }

    /// Whether the footer, not the table, answers for the instant: after the table, and
    /// between the file's last transition and the first precomputed one.
    private func footerGoverns(_ utcSeconds: Int64) -> Bool {
        guard footer != nil else { return false }
        guard let last = transitionTimes.last, utcSeconds < last else { return true }
        guard let takesOver = footerTakesOverAt, let start = footerPrecomputedStart else { return false }
        return utcSeconds >= takesOver && utcSeconds < start
    }

    /// A zone defined only by a POSIX TZ string such as `CET-1CEST,M3.5.0,M10.5.0/3`.
    init(identifier: String, posixRule text: String) throws(PosixTimeZone.ParseError) {
        let rule = try PosixTimeZone(parsing: text)
        self.init(identifier: identifier, types: [rule.standard], transitionTimes: [], transitionTypeIndices: [], footer: rule)
    }

    public static let utc = TimeZoneRules(
        identifier: "UTC",
        types: [LocalTimeType(offsetSeconds: 0, isDST: false, abbreviation: "UTC")],
        transitionTimes: [], transitionTypeIndices: [], footer: nil
    )

    // MARK: Instants to wall time

    /// What the clocks show at the instant: seconds east of UTC, whether it is daylight
    /// saving time, and the abbreviation (`CEST`).
    public func offset(at utcSeconds: Int64) -> (offsetSeconds: Int32, isDST: Bool, abbreviation: String) {
        let type = localTimeType(at: utcSeconds)
        return (type.offsetSeconds, type.isDST, type.abbreviation)
    }

    public func localTime(utcSeconds: Int64) -> LocalDateTime {
        // Beyond this nothing is meaningful and t + offset could overflow.
        let clamped = min(max(utcSeconds, -Self.supportedRange), Self.supportedRange)
        return LocalDateTime(localSeconds: clamped + Int64(localTimeType(at: clamped).offsetSeconds))
    }

    /// About ±4 million years: plenty, and far from Int64 overflow in any arithmetic here.
    static let supportedRange: Int64 = 1 << 47

    func localTimeType(at utcSeconds: Int64) -> LocalTimeType {
        if let footer, footerGoverns(utcSeconds) {
            return footer.localTimeType(at: utcSeconds)
        }
        // RFC 8536 §3.2: before the first transition, time type 0 applies.
        guard let first = transitionTimes.first, utcSeconds >= first else { return types[0] }
        return transitionTypes[lastTransitionIndex(atOrBefore: utcSeconds)]
    }

    /// Index of the last table transition at or before the instant; the table must have one.
    private func lastTransitionIndex(atOrBefore utcSeconds: Int64) -> Int {
        var low = 0
        var high = transitionTimes.count
        while high - low > 1 {
            let middle = (low + high) / 2
            if transitionTimes[middle] <= utcSeconds { low = middle } else { high = middle }
        }
        return low
    }

    /// The first change of local time type strictly after the instant, or nil if the
    /// zone never changes again.
    package func nextTransition(after utcSeconds: Int64) -> ZoneTransition? {
        if let footer, footerGoverns(utcSeconds) {
            // Up to the table's next entry, which is the footer's own next transition.
            return footer.nextTransition(after: utcSeconds)
        }
        if let last = transitionTimes.last, utcSeconds < last {
            let index = utcSeconds < transitionTimes[0] ? 0 : lastTransitionIndex(atOrBefore: utcSeconds) + 1
            let before = index == 0 ? types[0] : transitionTypes[index - 1]
            return ZoneTransition(at: transitionTimes[index], before: before, after: transitionTypes[index])
        }
        return footer?.nextTransition(after: utcSeconds)
    }

    // MARK: Wall time to instants

    /// The instants at which the zone's clocks show this wall time (seconds included).
    public func resolve(_ local: LocalDateTime) -> LocalResolution {
        resolve(localSeconds: local.localSeconds)
    }

    /// No zone is 26 hours or more from UTC (RFC 8536 asks for -24:59:59 to +25:59:59, and
    /// the loader refuses more), so every instant that shows a wall time lies this close to it.
    static let maximumOffsetSeconds: Int64 = 26 * 3_600

    func resolve(localSeconds: Int64) -> LocalResolution {
        // Candidates are "wall time minus an offset in force nearby"; an instant counts if
        // the zone really has that offset then.
        let windowStart = localSeconds - Self.maximumOffsetSeconds - 1
        let windowEnd = localSeconds + Self.maximumOffsetSeconds + 1
        var offsets = [Int64(localTimeType(at: windowStart).offsetSeconds)]
        var transitions: [ZoneTransition] = []
        var cursor = windowStart
        while let transition = nextTransition(after: cursor), transition.at <= windowEnd {
            transitions.append(transition)
            offsets.append(Int64(transition.after.offsetSeconds))
            cursor = transition.at
        }
        var instants: [Int64] = []
        for offset in offsets {
            let instant = localSeconds - offset
            if Int64(localTimeType(at: instant).offsetSeconds) == offset, !instants.contains(instant) {
                instants.append(instant)
            }
        }
        instants.sort()
        if let first = instants.first {
            return instants.count == 1 ? .unique(first) : .repeated(first: first, second: instants[instants.count - 1])
        }
        // Not shown at any instant: the clocks jumped over it, at a transition T with
        // T + before <= wall time < T + after.
        for transition in transitions
        where transition.at + Int64(transition.before.offsetSeconds) <= localSeconds
            && localSeconds < transition.at + Int64(transition.after.offsetSeconds) {
            return .skipped(gapEndsAt: transition.at)
        }
        // Unreachable for a consistent table; answer with the instant the reading implies
        // under the offset in force just before.
        return .skipped(gapEndsAt: localSeconds - offsets[0])
    }
}
