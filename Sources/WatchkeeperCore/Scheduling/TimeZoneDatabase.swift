// Over 500 lines on purpose: a parser and its grammar read best in one file, top to bottom
// (the size rule in docs/architecture.md exempts parsers).
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

// Time zones for cron schedules, read from the system's tzdata (/usr/share/zoneinfo), the
// copy administrators update with their distribution, rather than from ICU's private copy.
// Nothing here touches TZ, tzset() or localtime(): those are process-global and the daemon
// is multi-threaded. A zone is a plain value (a transition table plus the POSIX rule that
// continues it), so conversions are pure functions any thread can call.

// MARK: - Civil calendar

/// Proleptic Gregorian calendar arithmetic on day numbers (days since 1970-01-01), after
/// Howard Hinnant's `days_from_civil`/`civil_from_days`. Wall times are handled as "local
/// seconds": the wall-clock reading counted as if it were UTC, so that "the next 02:30" is
/// integer arithmetic and only the final step needs the zone.
enum CivilCalendar {
    static func days(year: Int, month: Int, day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = floorDivide(y, 400)
        let yearOfEra = y - era * 400
        let shiftedMonth = Int64(month > 2 ? month - 3 : month + 9)
        let dayOfYear = (153 * shiftedMonth + 2) / 5 + Int64(day) - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func date(days: Int64) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = floorDivide(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * shiftedMonth + 2) / 5 + 1)
        let month = Int(shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9)
        let year = Int(yearOfEra + era * 400) + (month <= 2 ? 1 : 0)
        return (year, month, day)
    }

    /// 0 = Sunday, as in cron and `struct tm`. 1970-01-01 was a Thursday.
    static func weekday(days: Int64) -> Int {
        Int(floorModulo(days + 4, 7))
    }

    /// Division rounding toward minus infinity, so instants before 1970 fall on the right day.
    static func floorDivide(_ value: Int64, _ divisor: Int64) -> Int64 {
        let quotient = value / divisor
        return (value % divisor != 0 && (value < 0) != (divisor < 0)) ? quotient - 1 : quotient
    }

    static func floorModulo(_ value: Int64, _ divisor: Int64) -> Int64 {
        value - floorDivide(value, divisor) * divisor
    }

    static func isLeapYear(_ year: Int) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    static func daysInMonth(year: Int, month: Int) -> Int {
        switch month {
        case 2: return isLeapYear(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}


// MARK: - Wall time

/// A wall-clock reading in some zone. `weekday` is derived from the date (0 = Sunday).
///
/// Fields outside their usual range carry over as with timegm(3): month 13 is January of
/// the next year, minute 60 the next hour.
public struct LocalDateTime: Sendable, Hashable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int
    public var hour: Int
    public var minute: Int
    public var second: Int

    public init(year: Int, month: Int, day: Int, hour: Int = 0, minute: Int = 0, second: Int = 0) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
    }

    init(localSeconds: Int64) {
        let days = CivilCalendar.floorDivide(localSeconds, 86_400)
        let secondOfDay = Int(localSeconds - days * 86_400)
        let (year, month, day) = CivilCalendar.date(days: days)
        self.init(
            year: year, month: month, day: day,
            hour: secondOfDay / 3_600, minute: secondOfDay % 3_600 / 60, second: secondOfDay % 60
        )
    }

    public var weekday: Int {
        CivilCalendar.weekday(days: CivilCalendar.floorDivide(localSeconds, 86_400))
    }

    /// The reading counted as if it were UTC (see `CivilCalendar`).
    var localSeconds: Int64 {
        let monthIndex = Int64(year) * 12 + Int64(month - 1)
        let normalisedYear = Int(CivilCalendar.floorDivide(monthIndex, 12))
        let normalisedMonth = Int(CivilCalendar.floorModulo(monthIndex, 12)) + 1
        let days = CivilCalendar.days(year: normalisedYear, month: normalisedMonth, day: 1) + Int64(day - 1)
        return days * 86_400 + Int64(hour) * 3_600 + Int64(minute) * 60 + Int64(second)
    }

    /// `2026-03-29 02:30:00`
    public var description: String {
        func pad(_ value: Int, _ width: Int) -> String {
            let text = String(value.magnitude)
            return (value < 0 ? "-" : "") + String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2)) \(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2))"
    }
}

/// Which instants show a given wall time.
public enum LocalResolution: Sendable, Equatable {
    /// The usual case: exactly one instant.
    case unique(Int64)
    /// The clocks were set back (end of DST) and the wall time happened twice.
    case repeated(first: Int64, second: Int64)
    /// The clocks were set forward over this wall time; it never happened. The instant is
    /// when the gap ends, i.e. the transition itself (03:00 CEST on a Berlin spring day).
    case skipped(gapEndsAt: Int64)
}

// MARK: - Zone rules

/// One entry of a zone's `ttinfo` table: what the clocks show during a period.
struct LocalTimeType: Sendable, Equatable {
    var offsetSeconds: Int32
    var isDST: Bool
    var abbreviation: String
}

/// A change of local time type at an instant.
struct ZoneTransition: Sendable, Equatable {
    var at: Int64
    var before: LocalTimeType
    var after: LocalTimeType
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
    func nextTransition(after utcSeconds: Int64) -> ZoneTransition? {
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

// MARK: - POSIX TZ rules (TZif footer)

/// The POSIX TZ string of a TZif footer (tzfile(5), RFC 8536 §3.3), e.g.
/// `CET-1CEST,M3.5.0,M10.5.0/3`: standard time one hour east of UTC, summer time from the
/// last Sunday of March 02:00 to the last Sunday of October 03:00 (local times).
struct PosixTimeZone: Sendable, Equatable {
    struct ParseError: Error, Equatable {
        let reason: String
    }

    struct DaylightSaving: Sendable, Equatable {
        var type: LocalTimeType
        var start: TransitionDate
        var end: TransitionDate
    }

    /// A day of the year plus a local time of day, which may be negative or exceed 24
    /// hours (`M3.5.0/-1`, `J365/25`) since TZif version 3.
    struct TransitionDate: Sendable, Equatable {
        enum Day: Sendable, Equatable {
            /// `Jn`: 1...365, February 29 is never counted (J60 is always March 1).
            case julianSkippingLeapDay(Int)
            /// `n`: 0...365, February 29 is counted in leap years.
            case zeroBasedDayOfYear(Int)
            /// `Mm.w.d`: weekday d (0 = Sunday) of week w (1...5, 5 = last) of month m.
            case monthWeekDay(month: Int, week: Int, weekday: Int)
        }

        var day: Day
        var secondsAfterMidnight: Int64 = 2 * 3_600

        func dayNumber(year: Int) -> Int64 {
            switch day {
            case .julianSkippingLeapDay(let n):
                let skipsLeapDay = CivilCalendar.isLeapYear(year) && n >= 60
                return CivilCalendar.days(year: year, month: 1, day: 1) + Int64(n - 1) + (skipsLeapDay ? 1 : 0)
            case .zeroBasedDayOfYear(let n):
                return CivilCalendar.days(year: year, month: 1, day: 1) + Int64(n)
            case .monthWeekDay(let month, let week, let weekday):
                let firstOfMonth = CivilCalendar.days(year: year, month: month, day: 1)
                let firstWeekday = CivilCalendar.weekday(days: firstOfMonth)
                var day = 1 + (weekday - firstWeekday + 7) % 7 + (week - 1) * 7
                let length = CivilCalendar.daysInMonth(year: year, month: month)
                while day > length { day -= 7 }
                return firstOfMonth + Int64(day - 1)
            }
        }
    }

    var standard: LocalTimeType
    var daylight: DaylightSaving?

    func localTimeType(at utcSeconds: Int64) -> LocalTimeType {
        guard daylight != nil else { return standard }
        let changes = timeline(around: utcSeconds)
        return changes.last(where: { $0.at <= utcSeconds })?.type ?? standard
    }

    func nextTransition(after utcSeconds: Int64) -> ZoneTransition? {
        guard daylight != nil else { return nil }
        let changes = timeline(around: utcSeconds)
        // The last computed year has no successor to merge with, so stop a year short of it.
        let year = CivilCalendar.date(days: CivilCalendar.floorDivide(utcSeconds, 86_400)).year
        let reliableUntil = CivilCalendar.days(year: year + 2, month: 1, day: 1) * 86_400
        for index in changes.indices.dropFirst()
        where changes[index].at > utcSeconds && changes[index].at < reliableUntil
            && changes[index].type != changes[index - 1].type {
            return ZoneTransition(at: changes[index].at, before: changes[index - 1].type, after: changes[index].type)
        }
        // Equal types throughout: DST all year (e.g. `EST5EDT,0/0,J365/25`).
        return nil
    }

    /// The rule's changes from two years before the instant's year to three after, in
    /// order: a transition time of up to ±167 hours can move a change into the
    /// neighbouring year, and the next change can be more than a year away.
    private func timeline(around utcSeconds: Int64) -> [(at: Int64, type: LocalTimeType)] {
        guard let daylight else { return [] }
        let year = CivilCalendar.date(days: CivilCalendar.floorDivide(utcSeconds, 86_400)).year
        var changes: [(at: Int64, type: LocalTimeType, order: Int)] = []
        for y in (year - 2)...(year + 3) {
            // The start is given in standard time, the end in daylight time.
            let start = daylight.start.dayNumber(year: y) * 86_400 + daylight.start.secondsAfterMidnight
                - Int64(standard.offsetSeconds)
            let end = daylight.end.dayNumber(year: y) * 86_400 + daylight.end.secondsAfterMidnight
                - Int64(daylight.type.offsetSeconds)
            // At equal instants the end sorts first so the start wins: a rule whose end
            // meets the next start (`0/0,J365/25`) is daylight time all year.
            changes.append((end, standard, 0))
            changes.append((start, daylight.type, 1))
        }
        changes.sort { ($0.at, $0.order) < ($1.at, $1.order) }
        var merged: [(at: Int64, type: LocalTimeType)] = []
        for change in changes {
            if let last = merged.last, last.at == change.at {
                merged[merged.count - 1].type = change.type
            } else {
                merged.append((change.at, change.type))
            }
        }
        return merged
    }

    // MARK: Parsing

    init(parsing text: String) throws(ParseError) {
        var scanner = Scanner(bytes: Array(text.utf8))
        let standardName = try scanner.name()
        let standardOffset = try scanner.offset(maximumHours: 24)
        // POSIX offsets count west of UTC positive; TZif and everyone else count east.
        standard = LocalTimeType(offsetSeconds: Int32(-standardOffset), isDST: false, abbreviation: standardName)
        guard !scanner.atEnd else { return }
        guard scanner.peek != UInt8(ascii: ",") else { throw ParseError(reason: "unexpected text after the standard time") }
        let daylightName = try scanner.name()
        var daylightOffset = -standardOffset + 3_600
        if !scanner.atEnd, scanner.peek != UInt8(ascii: ",") {
            daylightOffset = -(try scanner.offset(maximumHours: 24))
        }
        let daylightType = LocalTimeType(offsetSeconds: Int32(daylightOffset), isDST: true, abbreviation: daylightName)
        if scanner.atEnd {
            // No rule: glibc (and POSIX's suggested default) use the US rules.
            daylight = DaylightSaving(
                type: daylightType,
                start: TransitionDate(day: .monthWeekDay(month: 3, week: 2, weekday: 0)),
                end: TransitionDate(day: .monthWeekDay(month: 11, week: 1, weekday: 0))
            )
            return
        }
        try scanner.expect(",")
        let start = try scanner.transitionDate()
        try scanner.expect(",")
        let end = try scanner.transitionDate()
        guard scanner.atEnd else { throw ParseError(reason: "unexpected text after the end rule") }
        daylight = DaylightSaving(type: daylightType, start: start, end: end)
    }

    private struct Scanner {
        let bytes: [UInt8]
        var index = 0

        var atEnd: Bool { index == bytes.count }
        var peek: UInt8? { atEnd ? nil : bytes[index] }

        mutating func expect(_ character: Unicode.Scalar) throws(ParseError) {
            guard peek == UInt8(ascii: character) else { throw ParseError(reason: "expected \"\(character)\"") }
            index += 1
        }

        /// `CET`, or a quoted `<+0330>` for names that are not alphabetic.
        mutating func name() throws(ParseError) -> String {
            let isQuoted = peek == UInt8(ascii: "<")
            if isQuoted { index += 1 }
            let start = index
            while let byte = peek {
                let isLetter = (byte | 0x20) >= UInt8(ascii: "a") && (byte | 0x20) <= UInt8(ascii: "z")
                let isQuotedOnly = (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                    || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-")
                guard isLetter || (isQuoted && isQuotedOnly) else { break }
                index += 1
            }
            let name = String(decoding: bytes[start..<index], as: UTF8.self)
            if isQuoted { try expect(">") }
            guard name.utf8.count >= 3 else { throw ParseError(reason: "zone abbreviation \"\(name)\" is shorter than 3 characters") }
            return name
        }

        /// `[+-]hh[:mm[:ss]]` in seconds.
        mutating func offset(maximumHours: Int64) throws(ParseError) -> Int64 {
            var sign: Int64 = 1
            if peek == UInt8(ascii: "+") {
                index += 1
            } else if peek == UInt8(ascii: "-") {
                sign = -1
                index += 1
            }
            let hours = try number(maximum: maximumHours, what: "hours")
            var minutes: Int64 = 0
            var seconds: Int64 = 0
            if peek == UInt8(ascii: ":") {
                index += 1
                minutes = try number(maximum: 59, what: "minutes")
                if peek == UInt8(ascii: ":") {
                    index += 1
                    seconds = try number(maximum: 59, what: "seconds")
                }
            }
            return sign * (hours * 3_600 + minutes * 60 + seconds)
        }

        mutating func number(maximum: Int64, what: String) throws(ParseError) -> Int64 {
            let start = index
            var value: Int64 = 0
            while let byte = peek, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), index - start < 4 {
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
                index += 1
            }
            guard index > start else { throw ParseError(reason: "expected \(what)") }
            guard value <= maximum else { throw ParseError(reason: "\(what) \(value) exceed \(maximum)") }
            return value
        }

        mutating func transitionDate() throws(ParseError) -> TransitionDate {
            var date: TransitionDate
            if peek == UInt8(ascii: "J") {
                index += 1
                let n = try number(maximum: 365, what: "Julian day")
                guard n >= 1 else { throw ParseError(reason: "Julian day J0 does not exist (J1 is January 1)") }
                date = TransitionDate(day: .julianSkippingLeapDay(Int(n)))
            } else if peek == UInt8(ascii: "M") {
                index += 1
                let month = try number(maximum: 12, what: "month")
                try expect(".")
                let week = try number(maximum: 5, what: "week")
                try expect(".")
                let weekday = try number(maximum: 6, what: "weekday")
                guard month >= 1, week >= 1 else { throw ParseError(reason: "month and week count from 1") }
                date = TransitionDate(day: .monthWeekDay(month: Int(month), week: Int(week), weekday: Int(weekday)))
            } else {
                date = TransitionDate(day: .zeroBasedDayOfYear(Int(try number(maximum: 365, what: "day of year"))))
            }
            if peek == UInt8(ascii: "/") {
                index += 1
                // TZif v3 extension: -167...167 hours.
                date.secondsAfterMidnight = try offset(maximumHours: 167)
            }
            return date
        }
    }
}

// MARK: - TZif files

extension TimeZoneRules {
    @_spi(Fuzzing) public struct FormatError: Error, Equatable {
        public let reason: String
    }

    /// Parses a TZif file (RFC 8536, versions 1 to 4). With version 2 and later the 64-bit
    /// block and the footer are used; the 32-bit block only exists for old readers.
    @_spi(Fuzzing) public init(tzif bytes: [UInt8], identifier: String) throws(FormatError) {
        var reader = ByteReader(bytes: bytes)
        guard bytes.count >= 44, bytes[0..<4].elementsEqual("TZif".utf8) else {
            throw FormatError(reason: "is not a TZif time zone file")
        }
        var header = try reader.header()
        if header.version >= UInt8(ascii: "2") {
            try reader.skip(header.dataLength(timeSize: 4))
            header = try reader.header()
        }
        let timeSize = header.version >= UInt8(ascii: "2") ? 8 : 4
        guard header.leapCount == 0 else {
            // Such files ("right/" zones) count leap seconds in their timestamps, so their
            // instants are not POSIX time and every schedule would drift by ~27 seconds.
            throw FormatError(reason: "counts leap seconds (a \"right/\" zone), which schedules do not support")
        }
        guard header.typeCount >= 1, header.typeCount <= 256, header.characterCount >= 1,
              header.standardIndicatorCount == 0 || header.standardIndicatorCount == header.typeCount,
              header.utIndicatorCount == 0 || header.utIndicatorCount == header.typeCount
        else { throw FormatError(reason: "has an inconsistent TZif header") }

        var times: [Int64] = []
        times.reserveCapacity(header.transitionCount)
        for _ in 0..<header.transitionCount {
            let time = timeSize == 8 ? try reader.int64() : Int64(try reader.int32())
            if let previous = times.last, time <= previous {
                throw FormatError(reason: "has transitions out of order")
            }
            times.append(time)
        }
        var indices: [Int] = []
        for _ in 0..<header.transitionCount {
            let index = Int(try reader.byte())
            guard index < header.typeCount else { throw FormatError(reason: "has a transition to an undefined time type") }
            indices.append(index)
        }
        var rawTypes: [(offset: Int32, isDST: Bool, abbreviationIndex: Int)] = []
        for _ in 0..<header.typeCount {
            let offset = try reader.int32()
            let isDST = try reader.byte()
            let abbreviationIndex = Int(try reader.byte())
            guard Int64(offset).magnitude < UInt64(Self.maximumOffsetSeconds), isDST <= 1,
                  abbreviationIndex < header.characterCount
            else { throw FormatError(reason: "has an invalid time type") }
            rawTypes.append((offset, isDST == 1, abbreviationIndex))
        }
        let characters = Array(try reader.take(header.characterCount))
        let types = rawTypes.map { raw in
            let abbreviation = characters[raw.abbreviationIndex...].prefix { $0 != 0 }
            return LocalTimeType(offsetSeconds: raw.offset, isDST: raw.isDST, abbreviation: String(decoding: abbreviation, as: UTF8.self))
        }
        try reader.skip(header.standardIndicatorCount + header.utIndicatorCount)

        var footer: PosixTimeZone?
        if timeSize == 8 {
            guard try reader.byte() == UInt8(ascii: "\n") else { throw FormatError(reason: "has no footer line") }
            let line = try reader.line()
            if !line.isEmpty {
                do {
                    footer = try PosixTimeZone(parsing: line)
                } catch {
                    throw FormatError(reason: "has a footer rule \"\(line)\" that cannot be read: \(error.reason)")
                }
            }
        }
        self.init(identifier: identifier, types: types, transitionTimes: times, transitionTypeIndices: indices, footer: footer)
    }

    private struct TZifHeader {
        var version: UInt8
        var utIndicatorCount, standardIndicatorCount, leapCount, transitionCount, typeCount, characterCount: Int

        func dataLength(timeSize: Int) -> Int {
            transitionCount * timeSize + transitionCount + typeCount * 6 + characterCount
                + leapCount * (timeSize + 4) + standardIndicatorCount + utIndicatorCount
        }
    }

    private struct ByteReader {
        let bytes: [UInt8]
        var index = 0

        mutating func take(_ count: Int) throws(FormatError) -> ArraySlice<UInt8> {
            guard count >= 0, count <= bytes.count - index else { throw FormatError(reason: "is truncated") }
            defer { index += count }
            return bytes[index..<(index + count)]
        }

        mutating func skip(_ count: Int) throws(FormatError) { _ = try take(count) }

        mutating func byte() throws(FormatError) -> UInt8 { try take(1).first! }

        mutating func int32() throws(FormatError) -> Int32 {
            Int32(bitPattern: try take(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        }

        mutating func int64() throws(FormatError) -> Int64 {
            Int64(bitPattern: try take(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
        }

        mutating func line() throws(FormatError) -> String {
            guard let end = bytes[index...].firstIndex(of: UInt8(ascii: "\n")) else {
                throw FormatError(reason: "has an unterminated footer line")
            }
            defer { index = end + 1 }
            return String(decoding: bytes[index..<end], as: UTF8.self)
        }

        mutating func header() throws(FormatError) -> TZifHeader {
            guard try take(4).elementsEqual("TZif".utf8) else { throw FormatError(reason: "is not a TZif time zone file") }
            let version = try byte()
            try skip(15)
            // Counts are unsigned 32-bit; anything near that size is a corrupt file, and the
            // cap keeps the length arithmetic far from overflow.
            func count(_ value: Int32) throws(FormatError) -> Int {
                guard value >= 0, value < 1 << 20 else { throw FormatError(reason: "has an implausible TZif header") }
                return Int(value)
            }
            return TZifHeader(
                version: version,
                utIndicatorCount: try count(try int32()),
                standardIndicatorCount: try count(try int32()),
                leapCount: try count(try int32()),
                transitionCount: try count(try int32()),
                typeCount: try count(try int32()),
                characterCount: try count(try int32())
            )
        }
    }
}

// MARK: - Loading from the system

/// `unable to load time zone "Europe/Berln": no such zone in /usr/share/zoneinfo (is tzdata installed?)`
public struct TimeZoneLoadError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What the message says was being loaded: `"Europe/Berlin"` (quoted) or `from /etc/localtime`.
    public let subject: String
    public let reason: String

    public var description: String { "unable to load time zone \(subject): \(reason)" }
}

extension TimeZoneRules {
    public static let zoneDirectory = "/usr/share/zoneinfo"
    public static let localTimePath = "/etc/localtime"

    /// The zone `/usr/share/zoneinfo/<identifier>`, parsed once per process (see
    /// `discardCachedZones()`).
    public static func load(identifier: String) throws(TimeZoneLoadError) -> TimeZoneRules {
        try load(identifier: identifier, directory: zoneDirectory)
    }

    static func load(identifier: String, directory: String) throws(TimeZoneLoadError) -> TimeZoneRules {
        let subject = "\"\(identifier)\""
        if let problem = identifierProblem(identifier) {
            throw TimeZoneLoadError(subject: subject, reason: problem)
        }
        let path = directory + "/" + identifier
        if let cached = TimeZoneCache.shared.rules(forKey: path) { return cached }
        let bytes: [UInt8]
        switch readZoneFile(path) {
        case .success(let contents):
            bytes = contents
        case .failure(let failure) where failure.code == ENOENT || failure.code == ENOTDIR:
            throw TimeZoneLoadError(subject: subject, reason: missingZoneReason(identifier, directory: directory))
        case .failure(let failure) where failure.code == EISDIR:
            throw TimeZoneLoadError(
                subject: subject,
                reason: "\(path) is a directory of zones; name a zone inside it, like \"Europe/Berlin\""
            )
        case .failure(let failure):
            throw TimeZoneLoadError(subject: subject, reason: "\(path): \(String(cString: strerror(failure.code)))")
        }
        let rules: TimeZoneRules
        do {
            rules = try TimeZoneRules(tzif: bytes, identifier: identifier)
        } catch {
            var reason = "\(path) \(error.reason)"
            if identifier.hasPrefix("right/") { reason += "; use \"\(identifier.dropFirst(6))\" instead" }
            throw TimeZoneLoadError(subject: subject, reason: reason)
        }
        TimeZoneCache.shared.store(rules, forKey: path)
        return rules
    }

    /// The machine's zone, /etc/localtime, as glibc and systemd use it. The TZ environment
    /// variable is deliberately not consulted: the daemon's schedule should follow the
    /// machine's setting (`timedatectl set-timezone`), not whatever its unit inherited.
    public static func local() throws(TimeZoneLoadError) -> TimeZoneRules {
        try local(path: localTimePath)
    }

    static func local(path: String) throws(TimeZoneLoadError) -> TimeZoneRules {
        let subject = "from \(path)"
        if let cached = TimeZoneCache.shared.rules(forKey: path) { return cached }
        let linkTarget = symbolicLinkTarget(path)
        var identifier = "localtime"
        if let linkTarget, let range = linkTarget.ranges(of: "zoneinfo/").last {
            identifier = String(linkTarget[range.upperBound...])
        }
        let bytes: [UInt8]
        switch readZoneFile(path) {
        case .success(let contents):
            bytes = contents
        case .failure(let failure) where failure.code == ENOENT && linkTarget == nil:
            // No /etc/localtime at all (common in containers): glibc, and so `date`, use UTC.
            return .utc
        case .failure(let failure) where failure.code == ENOENT:
            throw TimeZoneLoadError(
                subject: subject,
                reason: "it links to \(linkTarget ?? "?"), which does not exist (is tzdata installed? `timedatectl set-timezone ZONE` repairs the link)"
            )
        case .failure(let failure):
            throw TimeZoneLoadError(subject: subject, reason: String(cString: strerror(failure.code)))
        }
        let rules: TimeZoneRules
        do {
            rules = try TimeZoneRules(tzif: bytes, identifier: identifier)
        } catch {
            throw TimeZoneLoadError(subject: subject, reason: "\(path) \(error.reason)")
        }
        TimeZoneCache.shared.store(rules, forKey: path)
        return rules
    }

    /// Zones are cached for the life of the process; a configuration reload calls this so
    /// that a tzdata update (or `timedatectl set-timezone`) takes effect without a restart.
    public static func discardCachedZones() {
        TimeZoneCache.shared.removeAll()
    }

    /// Zone names are paths below the zone directory; anything that could climb out of it
    /// is refused before the file system is touched.
    static func identifierProblem(_ identifier: String) -> String? {
        let components = identifier.split(separator: "/", omittingEmptySubsequences: false)
        let escapes = identifier.hasPrefix("/") || components.contains { $0 == ".." || $0 == "." || $0.isEmpty }
        let allowed = identifier.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "/_-+.".unicodeScalars.contains(scalar))
        }
        if identifier.isEmpty {
            return "the name is empty; zone names look like \"Europe/Berlin\" (see /usr/share/zoneinfo/zone1970.tab)"
        }
        if escapes || !allowed {
            return "a zone name is a path below /usr/share/zoneinfo like \"Europe/Berlin\", without \"..\", a leading \"/\" or unusual characters"
        }
        return nil
    }

    private static func missingZoneReason(_ identifier: String, directory: String) -> String {
        var status = stat()
        guard stat(directory, &status) == 0 else {
            return "\(directory) does not exist (is tzdata installed?)"
        }
        if let suggestion = closestZoneName(to: identifier, directory: directory) {
            return "no such zone in \(directory); did you mean \"\(suggestion)\"?"
        }
        return "no such zone in \(directory) (is tzdata installed?)"
    }

    /// Walks the name component by component, replacing each missing one with the entry
    /// of that directory closest to it (at most two edits, ignoring case), so that
    /// "Europe/Berln" and "europe/berlin" both lead to "Europe/Berlin".
    static func closestZoneName(to identifier: String, directory: String) -> String? {
        var resolved: [String] = []
        for component in identifier.split(separator: "/") {
            let folder = ([directory] + resolved).joined(separator: "/")
            let entries = directoryEntries(folder)
            if entries.contains(String(component)) {
                resolved.append(String(component))
                continue
            }
            let wanted = Array(component.lowercased().unicodeScalars)
            let scored = entries.map { ($0, editDistance(wanted, Array($0.lowercased().unicodeScalars))) }
            // Short names need a closer match: "Mars" is not a misspelt "MST".
            let allowed = min(2, (wanted.count - 1) / 2)
            guard let best = scored.filter({ $0.1 <= allowed }).min(by: { $0.1 < $1.1 }) else { return nil }
            resolved.append(best.0)
        }
        let candidate = resolved.joined(separator: "/")
        guard candidate != identifier, !candidate.isEmpty else { return nil }
        var status = stat()
        guard stat(directory + "/" + candidate, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { return nil }
        return candidate
    }

    private static func directoryEntries(_ path: String) -> [String] {
        guard let stream = opendir(path) else { return [] }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if !name.hasPrefix(".") { names.append(name) }
        }
        return names.sorted()
    }

    private static func editDistance(_ a: [Unicode.Scalar], _ b: [Unicode.Scalar]) -> Int {
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }

    private static func symbolicLinkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4_096)
        let length = readlink(path, &buffer, buffer.count - 1)
        guard length > 0 else { return nil }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The whole file, or the errno that stopped it. Zone files are a few kilobytes; the
    /// cap only guards against a name that leads somewhere unexpected.
    struct SystemCallFailure: Error {
        let code: Int32
    }

    private static func readZoneFile(_ path: String) -> Result<[UInt8], SystemCallFailure> {
        readFileBytes(path, limit: 1 << 20).mapError { SystemCallFailure(code: $0.errno) }
    }
}

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
