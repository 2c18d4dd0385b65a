/// Why a calendar event was refused: the message and the 0-based column it points at.
public struct CalendarParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    public let column: Int

    public var description: String { message }
}

/// A systemd.time(7) calendar event: `Mon..Fri *-*-* 02:30:00 Europe/Berlin`, `*-*~01`,
/// `quarterly`. The grammar, the normalized form and the next elapse follow systemd 252's
/// calendarspec.c, checked against `systemd-analyze calendar` (CalendarEventOracleTests).
///
/// Across daylight-saving changes it does what systemd does, which is not what our cron does:
/// - A wall time the clocks skip never fires; the search goes on from that wall time moved by
///   the jump (glibc's mktime normalizes 02:30 to 03:30), so `*:0/20` fires at 03:00.
/// - A wall time the clocks show twice fires once: at its first occurrence, unless the search
///   starts inside the second one (the previous fire was there). The repeated hour is never
///   walked twice, so `*:0/20` does not fire in it again.
///
/// Refused although systemd takes them: fractions of seconds (`*:*:0/0.5`), and a trailing
/// zone abbreviation of the machine's own zone (`CET`, unless it names a zone file).
public struct CalendarEvent: Sendable, Equatable, CustomStringConvertible {
    /// `start[..stop][/repeat]`; `stop` nil for none, `repeat` 0 for none.
    struct Component: Sendable, Equatable, Comparable {
        var start: Int
        var stop: Int?
        var repeatEvery: Int

        static func < (lhs: Component, rhs: Component) -> Bool {
            (lhs.start, lhs.stop ?? -1, lhs.repeatEvery) < (rhs.start, rhs.stop ?? -1, rhs.repeatEvery)
        }
    }

    /// Monday = bit 0 … Sunday = bit 6, as in systemd; 0 for every day.
    private(set) var weekdays: UInt8 = 0
    /// nil: `*`.
    private(set) var years: [Component]?
    private(set) var months: [Component]?
    private(set) var days: [Component]?
    /// `~`: days count from the month's end, `~01` being its last day.
    private(set) var endOfMonth = false
    private(set) var hours: [Component]?
    private(set) var minutes: [Component]?
    private(set) var seconds: [Component]?
    /// `UTC` or a zone named at the end; nil: the task's zone.
    public private(set) var timezone: String?
    /// The rules of `timezone`, loaded while parsing.
    public private(set) var zone: TimeZoneRules?
    /// `@SECONDS`: one instant, whose zone (UTC) nobody wrote and no zone changes.
    public private(set) var isTimestamp = false

    public static let minimumYear = 1970
    public static let maximumYear = 2199
    static let componentLimit = 240

    public init(parsing text: String) throws(CalendarParseError) {
        var parser = CalendarEventParser(text: Array(text.utf8))
        try parser.parse(into: &self)
        normalize()
        try validate(text: text)
    }

    /// systemd's "Normalized form".
    public var normalized: String {
        var out = ""
        if weekdays != 0 { out += Self.format(weekdays: weekdays) + " " }
        out += Self.format(years, width: 4) + "-" + Self.format(months, width: 2) + (endOfMonth ? "~" : "-") + Self.format(days, width: 2)
        out += " " + Self.format(hours, width: 2) + ":" + Self.format(minutes, width: 2) + ":" + Self.format(seconds, width: 2)
        if let timezone { out += " " + timezone }
        return out
    }

    public var description: String { normalized }

    // MARK: Next elapse

    /// The first instant strictly after `utcSeconds` the event elapses, read in the event's
    /// own zone if it names one, else in `zone`; nil if it never elapses again (before 2200).
    public func nextFire(after utcSeconds: Int64, in zone: TimeZoneRules) -> Int64? {
        nextFire(after: utcSeconds, readingIn: self.zone ?? zone)
    }

    /// The same, read in `zone` whatever the event names (`watchkeeper next` reads it in
    /// fixed offsets to find the fires a clock change moved).
    public func nextFire(after utcSeconds: Int64, readingIn zone: TimeZoneRules) -> Int64? {
        // systemd reads the wall clock at `utcSeconds` and looks for a later second of it: a
        // search that starts just before a fall-back does not walk the repeated hour.
        var offset = zone.offset(at: utcSeconds).offsetSeconds
        let start = Civil(localSeconds: utcSeconds + Int64(offset))
        guard let match = findNext(from: start, zone: zone, offset: &offset) else { return nil }
        let wall = match.localSeconds
        switch zone.resolve(localSeconds: wall) {
        case .unique(let instant):
            return instant
        case .repeated(let first, let second):
            return Self.choose(first: first, second: second, wall: wall, offset: offset)
        case .skipped(let gapEnd):
            // findNext moved off skipped times; a zone that skips again right away is read as mktime would.
            return gapEnd
        }
    }

    /// glibc's mktime reads a wall time shown twice in the offset it used last (its guess
    /// for the next call): the search's own, so where it stands decides.
    private static func choose(first: Int64, second: Int64, wall: Int64, offset: Int32) -> Int64 {
        Int64(offset) == wall - second ? second : first
    }

    /// A wall-clock reading whose fields may be out of range until normalized, as `struct tm`.
    struct Civil: Equatable {
        var year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int

        init(localSeconds: Int64) {
            let local = LocalDateTime(localSeconds: localSeconds)
            self.init(year: local.year, month: local.month, day: local.day, hour: local.hour, minute: local.minute, second: local.second)
        }

        init(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
            self.year = year; self.month = month; self.day = day; self.hour = hour; self.minute = minute; self.second = second
        }

        var localSeconds: Int64 {
            LocalDateTime(year: year, month: month, day: day, hour: hour, minute: minute, second: second).localSeconds
        }
    }

    /// What mktime(3) makes of a reading: fields carried (timegm), and a skipped wall time
    /// read in the offset before the jump (glibc), i.e. moved forward by the jump. `isDST`
    /// is the reading's tm_isdst (nil: -1); the result's is returned beside it.
    private static func mktime(_ c: Civil, _ zone: TimeZoneRules, _ offset: inout Int32, isDST hint: Bool? = nil) -> (Civil, isDST: Bool) {
        let local = c.localSeconds
        let instant: Int64
        switch zone.resolve(localSeconds: local) {
        case .unique(let only):
            instant = hint.map { hint in zone.offset(at: only).isDST == hint ? only : glibcNearestIsDST(hint, wall: local, guess: only, zone) } ?? only
        case .repeated(let first, let second):
            let matching = [first, second].filter { zone.offset(at: $0).isDST == hint }
            instant = matching.count == 1 ? matching[0] : choose(first: first, second: second, wall: local, offset: offset)
        case .skipped(let gapEnd):
            let before = zone.offset(at: gapEnd - 1), after = zone.offset(at: gapEnd)
            // Read in the offset before the jump it lands past the gap, in the one after it
            // before: glibc prefers the side whose tm_isdst differs from the one asked for.
            let past = local - Int64(before.offsetSeconds), short = local - Int64(after.offsetSeconds)
            instant = hint != nil && after.isDST == hint && before.isDST != hint ? short : past
            // Its guess for the next call is the offset after the jump.
            offset = after.offsetSeconds
            let result = zone.offset(at: instant)
            return (Civil(localSeconds: instant + Int64(result.offsetSeconds)), result.isDST)
        }
        offset = Int32(local - instant)
        let result = zone.offset(at: instant)
        return (Civil(localSeconds: instant + Int64(result.offsetSeconds)), result.isDST)
    }

    /// glibc's mktime asked for a tm_isdst the wall time does not have there: the offset
    /// of the nearest instant that has it, probed a week (601,200 s) at a time in both
    /// directions, earlier first; none within 7.25 years: one hour off (mktime.c).
    private static func glibcNearestIsDST(_ wanted: Bool, wall: Int64, guess: Int64, _ zone: TimeZoneRules) -> Int64 {
        let stride: Int64 = 601_200
        var delta = stride
        while delta < 457_243_200 / 2 + stride {
            for probe in [guess - delta, guess + delta] {
                let there = zone.offset(at: probe)
                if there.isDST == wanted { return wall - Int64(there.offsetSeconds) }
            }
            delta += stride
        }
        return guess + (wanted ? -3_600 : 3_600)
    }

    private enum Bounds: Equatable {
        case good, failed
        /// With the tm_isdst mktime gave the normalized reading, which systemd's find_next
        /// hands to its next mktime.
        case normalized(isDST: Bool)
    }

    /// systemd 252's tm_within_bounds: if mktime changed the reading, the unit below the
    /// highest changed one starts over, and the search goes on from there; never backwards.
    private static func withinBounds(_ c: inout Civil, _ zone: TimeZoneRules, _ offset: inout Int32) -> Bounds {
        guard c.year <= maximumYear else { return .failed }
        var (t, isDST) = mktime(c, zone, &offset)
        let cmp: Int
        func compare(_ a: Int, _ b: Int) -> Int { a < b ? -1 : a > b ? 1 : 0 }
        if compare(t.year, c.year) != 0 { cmp = compare(t.year, c.year); t.month = 1 }
        else if compare(t.month, c.month) != 0 { cmp = compare(t.month, c.month); t.day = 1 }
        else if compare(t.day, c.day) != 0 { cmp = compare(t.day, c.day); t.hour = 0 }
        else if compare(t.hour, c.hour) != 0 { cmp = compare(t.hour, c.hour); t.minute = 0 }
        else if compare(t.minute, c.minute) != 0 { cmp = compare(t.minute, c.minute); t.second = 0 }
        else { cmp = compare(t.second, c.second) }
        if cmp < 0 { return .failed }
        if cmp > 0 { c = t; return .normalized(isDST: isDST) }
        return .good
    }

    /// systemd's find_matching_component: the least value of the chain at or after `value`,
    /// which may run past the field's end (the caller's normalization carries it).
    /// -1: none; 0: `value` itself; 1: a later one.
    private func matching(_ chain: [Component]?, _ value: inout Int, endOfMonthIn month: (year: Int, month: Int)? = nil) -> Int {
        guard let chain else { return 0 }
        var best: Int?
        for component in chain {
            var low = component.start
            var high = component.stop ?? -1
            if let month {
                let length = CivilCalendar.daysInMonth(year: month.year, month: month.month)
                low = length + 1 - component.start
                high = component.stop.map { length + 1 - $0 } ?? -1
                if high > 0 { swap(&low, &high) }
            }
            if low >= value {
                best = min(best ?? low, low)
            } else if component.repeatEvery > 0 {
                let k = low + component.repeatEvery * ((value - low + component.repeatEvery - 1) / component.repeatEvery)
                if high < 0 || k <= high { best = min(best ?? k, k) }
            }
        }
        guard let best else { return -1 }
        let changed = best != value
        value = best
        return changed ? 1 : 0
    }

    /// systemd 252's find_next, field by field, on a wall-clock reading.
    private func findNext(from start: Civil, zone: TimeZoneRules, offset: inout Int32) -> Civil? {
        var c = start
        // The search is for a second after the reading (systemd adds a microsecond).
        var afterSecond = true
        // The reading's tm_isdst: localtime's at the start, then -1, except after a
        // normalization, whose own systemd's next mktime reads the reading with.
        var isDST: Bool? = zone.offset(at: c.localSeconds - Int64(offset)).isDST
        for _ in 0..<200_000 {
            (c, _) = Self.mktime(c, zone, &offset, isDST: isDST)
            isDST = nil
            var r = matching(years, &c.year)
            if r > 0 { c.month = 1; c.day = 1; c.hour = 0; c.minute = 0; c.second = 0; afterSecond = false }
            if r < 0 { return nil }
            switch Self.withinBounds(&c, zone, &offset) {
            case .failed: return nil
            case .normalized(let normalizedIsDST): isDST = normalizedIsDST; continue
            case .good: break
            }

            r = matching(months, &c.month)
            if r > 0 { c.day = 1; c.hour = 0; c.minute = 0; c.second = 0; afterSecond = false }
            var bounds = r < 0 ? .failed : Self.withinBounds(&c, zone, &offset)
            if bounds == .failed {
                c.year += 1; c.month = 1; c.day = 1; c.hour = 0; c.minute = 0; c.second = 0; afterSecond = false
                continue
            }
            if case .normalized(let normalizedIsDST) = bounds { isDST = normalizedIsDST; continue }

            r = matching(days, &c.day, endOfMonthIn: endOfMonth ? (c.year, c.month) : nil)
            if r > 0 { c.hour = 0; c.minute = 0; c.second = 0; afterSecond = false }
            bounds = r < 0 ? .failed : Self.withinBounds(&c, zone, &offset)
            if bounds == .failed {
                c.month += 1; c.day = 1; c.hour = 0; c.minute = 0; c.second = 0; afterSecond = false
                continue
            }
            if case .normalized(let normalizedIsDST) = bounds { isDST = normalizedIsDST; continue }

            if !matchesWeekday(CivilCalendar.days(year: c.year, month: c.month, day: c.day)) {
                c.day += 1; c.hour = 0; c.minute = 0; c.second = 0; afterSecond = false
                continue
            }

            r = matching(hours, &c.hour)
            if r > 0 { c.minute = 0; c.second = 0; afterSecond = false }
            bounds = r < 0 ? .failed : Self.withinBounds(&c, zone, &offset)
            if bounds == .failed {
                c.day += 1; c.hour = 0; c.minute = 0; c.second = 0; afterSecond = false
                continue
            }
            if case .normalized(let normalizedIsDST) = bounds { isDST = normalizedIsDST; continue }

            r = matching(minutes, &c.minute)
            if r > 0 { c.second = 0; afterSecond = false }
            bounds = r < 0 ? .failed : Self.withinBounds(&c, zone, &offset)
            if bounds == .failed {
                c.hour += 1; c.minute = 0; c.second = 0; afterSecond = false
                continue
            }
            if case .normalized(let normalizedIsDST) = bounds { isDST = normalizedIsDST; continue }

            var second = afterSecond ? c.second + 1 : c.second
            r = matching(seconds, &second)
            c.second = second
            afterSecond = false
            bounds = r < 0 ? .failed : Self.withinBounds(&c, zone, &offset)
            if bounds == .failed {
                c.minute += 1; c.second = 0
                continue
            }
            if case .normalized(let normalizedIsDST) = bounds { isDST = normalizedIsDST; continue }
            return c
        }
        return nil
    }

    private func matchesWeekday(_ dayNumber: Int64) -> Bool {
        guard weekdays != 0 else { return true }
        // CivilCalendar counts from Sunday = 0; systemd from Monday = 0.
        let monday0 = (CivilCalendar.weekday(days: dayNumber) + 6) % 7
        return weekdays & (1 << UInt8(monday0)) != 0
    }

    // MARK: Normalizing and checking, as calendar_spec_normalize and calendar_spec_valid

    private mutating func normalize() {
        if weekdays == 0x7F { weekdays = 0 }
        if endOfMonth && days == nil { endOfMonth = false }
        years = years.map { chain in
            chain.map { component in
                var fixed = component
                func century(_ value: Int) -> Int { value < 70 ? value + 2000 : value < 100 ? value + 1900 : value }
                fixed.start = century(component.start)
                fixed.stop = component.stop.map(century)
                return fixed
            }
        }
        func normalized(_ chain: [Component]?) -> [Component]? {
            guard let chain else { return nil }
            var result: [Component] = []
            for var component in chain {
                if let stop = component.stop, stop > component.start, component.repeatEvery > 0 {
                    component.stop = stop - (stop - component.start) % component.repeatEvery
                }
                // A range that cannot repeat even once is its start: `5..5`, `10..20/50`.
                if let stop = component.stop, stop == component.start || (stop > component.start && component.repeatEvery > 0 && component.start + component.repeatEvery > stop) {
                    component.stop = nil
                    component.repeatEvery = 0
                }
                result.append(component)
            }
            result.sort()
            var unique: [Component] = []
            for component in result where unique.last != component { unique.append(component) }
            return unique
        }
        years = normalized(years)
        months = normalized(months)
        days = normalized(days)
        hours = normalized(hours)
        minutes = normalized(minutes)
        seconds = normalized(seconds)
    }

    private func validate(text: String) throws(CalendarParseError) {
        func check(_ chain: [Component]?, _ name: String, from: Int, to: Int, endOfMonth: Bool = false) throws(CalendarParseError) {
            guard let chain else { return }
            var to = to
            for component in chain {
                // systemd's chain_valid takes 3 off the end for each day counted from the
                // month's end, item after item: `~28` alone passes, `~03,28` does not.
                if endOfMonth { to -= 3 }
                let shown = Self.format([component], width: 0)
                func fail(_ why: String) -> CalendarParseError {
                    // Not one place in the text: the error points at the value as a whole.
                    CalendarParseError(message: "\(name) \"\(shown)\" \(why)", column: -1)
                }
                guard component.start >= from, component.start <= to else {
                    throw fail(endOfMonth ? "is out of range: days from the month's end are 1 to \(to)" : "is out of range \(from) to \(to)")
                }
                guard component.repeatEvery <= to - from else { throw fail("repeats at a step longer than the field's range") }
                if let stop = component.stop {
                    guard stop >= from, stop <= to else { throw fail("ends out of range \(from) to \(to)") }
                    guard component.start + component.repeatEvery <= stop else { throw fail("is a range that starts after it ends, or repeats at a step longer than itself") }
                } else if endOfMonth {
                    guard component.start - component.repeatEvery >= from else { throw fail("repeats past the month's end") }
                } else {
                    guard component.start + component.repeatEvery <= to else { throw fail("repeats at a step that never repeats in \(from) to \(to)") }
                }
            }
        }
        try check(years, "year", from: Self.minimumYear, to: Self.maximumYear)
        try check(months, "month", from: 1, to: 12)
        try check(days, "day", from: 1, to: 31, endOfMonth: endOfMonth)
        try check(hours, "hour", from: 0, to: 23)
        try check(minutes, "minute", from: 0, to: 59)
        try check(seconds, "second", from: 0, to: 59)
    }

    // MARK: Formatting

    static let weekdayNames = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]

    private static func format(weekdays: UInt8) -> String {
        var parts: [String] = []
        var runStart = -1
        for index in 0...7 {
            let set = index < 7 && weekdays & (1 << UInt8(index)) != 0
            if set, runStart < 0 { runStart = index }
            if !set, runStart >= 0 {
                let last = index - 1
                switch last - runStart {
                case 0: parts.append(weekdayNames[runStart])
                case 1: parts.append(weekdayNames[runStart] + "," + weekdayNames[last])
                default: parts.append(weekdayNames[runStart] + ".." + weekdayNames[last])
                }
                runStart = -1
            }
        }
        return parts.joined(separator: ",")
    }

    private static func format(_ chain: [Component]?, width: Int) -> String {
        guard let chain else { return "*" }
        func pad(_ value: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return chain.map { component in
            var text = pad(component.start)
            if let stop = component.stop { text += ".." + pad(stop) }
            if component.repeatEvery > 0, !(component.stop != nil && component.repeatEvery == 1) { text += "/\(component.repeatEvery)" }
            return text
        }.joined(separator: ",")
    }

    // MARK: What CalendarEventParser (calendar_spec_from_string) sets

    mutating func setShorthand(_ word: String) -> Bool {
        let zero = [Component(start: 0, stop: nil, repeatEvery: 0)]
        let one = [Component(start: 1, stop: nil, repeatEvery: 0)]
        switch word.lowercased() {
        case "minutely": seconds = zero
        case "hourly": minutes = zero; seconds = zero
        case "daily": hours = zero; minutes = zero; seconds = zero
        case "monthly": days = one; hours = zero; minutes = zero; seconds = zero
        case "annually", "yearly", "anually": months = one; days = one; hours = zero; minutes = zero; seconds = zero
        case "weekly": weekdays = 1; hours = zero; minutes = zero; seconds = zero
        case "quarterly":
            months = [1, 4, 7, 10].map { Component(start: $0, stop: nil, repeatEvery: 0) }
            days = one; hours = zero; minutes = zero; seconds = zero
        case "biannually", "bi-annually", "semiannually", "semi-annually":
            months = [1, 7].map { Component(start: $0, stop: nil, repeatEvery: 0) }
            days = one; hours = zero; minutes = zero; seconds = zero
        default: return false
        }
        return true
    }

    mutating func setTimestamp() {
        isTimestamp = true
    }

    mutating func setZone(_ name: String?, rules: TimeZoneRules?) {
        timezone = name
        zone = rules
    }

    mutating func setFields(
        weekdays: UInt8, years: [Component]?, months: [Component]?, days: [Component]?, endOfMonth: Bool,
        hours: [Component]?, minutes: [Component]?, seconds: [Component]?
    ) {
        self.weekdays = weekdays
        self.years = years
        self.months = months
        self.days = days
        self.endOfMonth = endOfMonth
        self.hours = hours
        self.minutes = minutes
        self.seconds = seconds
    }

}
