// Cron's own rules, for `import --check`: when Debian's cron (Vixie cron 3.0 with Debian's
// patches) would run an entry, written apart from CronExpression so that the two can be
// compared. Cron wakes every minute, looks at the wall clock (the zone's offset applied,
// in whole minutes) and runs the entries that match that minute; its cron.c classifies a
// clock that moved by more than one minute since the last look:
//   +2..+5 minutes     every skipped minute is run, wildcard and fixed entries alike;
//   +6..+180 minutes   (a forward DST jump) the wildcard entries for the new minute once,
//                      then the fixed-time entries of every skipped minute, all at once;
//   -180..0 minutes    (a backward jump) only the wildcard entries, until the clock is
//                      back past the last minute looked at: fixed-time entries do not repeat;
//   beyond 3 hours     the clock is taken as it is, and everything matching now runs.
// An entry is "wildcard" when its minute or hour field starts with `*` (cron's MIN_STAR and
// HR_STAR flags); its day rule is cron's: when either day field starts with `*` both must
// match, otherwise either does.

import WatchkeeperCore

struct VixieCronSchedule: Sendable {
    private var minutes: UInt64 = 0, hours: UInt64 = 0, daysOfMonth: UInt64 = 0, months: UInt64 = 0, daysOfWeek: UInt64 = 0
    private var minuteStar = false, hourStar = false, dayOfMonthStar = false, dayOfWeekStar = false
    var isWildcard: Bool { minuteStar || hourStar }

    struct Refused: Error { let reason: String }

    private static let monthNames = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    private static let dayNames = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

    /// The five fields or an @-word as cron's entry.c reads them; cronie's also takes a
    /// step after a single value (`5/10` is `5-59/10`).
    init(parsing text: String, stepAfterSingleValue: Bool = false) throws(Refused) {
        let words = text.split { $0 == " " || $0 == "\t" }.map(String.init)
        if words.count == 1, words[0].hasPrefix("@") {
            func all(_ count: Int) -> UInt64 { (1 << UInt64(count)) - 1 }
            minutes = 1
            switch String(words[0].dropFirst()) {  // strcmp: `@Daily` is refused
            case "yearly", "annually":
                hours = 1; daysOfMonth = 1 << 1; months = 1 << 1; daysOfWeek = all(8); dayOfWeekStar = true
            case "monthly":
                hours = 1; daysOfMonth = 1 << 1; months = all(13) & ~1; daysOfWeek = all(8); dayOfWeekStar = true
            case "weekly":
                hours = 1; daysOfMonth = all(32) & ~1; dayOfMonthStar = true; months = all(13) & ~1; daysOfWeek = 1 | 1 << 7
            case "daily", "midnight":
                hours = 1; daysOfMonth = all(32) & ~1; months = all(13) & ~1; daysOfWeek = all(8)
            case "hourly":
                hours = all(24); daysOfMonth = all(32) & ~1; months = all(13) & ~1; daysOfWeek = all(8); hourStar = true
            default:
                throw Refused(reason: "cron does not know \(words[0])")
            }
            return
        }
        guard words.count == 5 else { throw Refused(reason: "cron reads five time fields") }
        let single = stepAfterSingleValue
        (minutes, minuteStar) = try Self.list(words[0], low: 0, high: 59, names: [], stepAfterSingle: single)
        (hours, hourStar) = try Self.list(words[1], low: 0, high: 23, names: [], stepAfterSingle: single)
        (daysOfMonth, dayOfMonthStar) = try Self.list(words[2], low: 1, high: 31, names: [], stepAfterSingle: single)
        (months, _) = try Self.list(words[3], low: 1, high: 12, names: Self.monthNames, stepAfterSingle: single)
        (daysOfWeek, dayOfWeekStar) = try Self.list(words[4], low: 0, high: 7, names: Self.dayNames, stepAfterSingle: single)
        // Cron makes 0 and 7 the same Sunday.
        if daysOfWeek & (1 | 1 << 7) != 0 { daysOfWeek |= 1 | 1 << 7 }
    }

    /// get_list: items separated by commas, each `*` or `n` or `n-m`, a range optionally
    /// `/step`. A single number takes no step (cron refuses `5/10`); a reversed range sets
    /// nothing. The star flag is the field's first character being `*`.
    private static func list(_ field: String, low: Int, high: Int, names: [String], stepAfterSingle: Bool) throws(Refused) -> (UInt64, Bool) {
        var bits: UInt64 = 0
        for item in field.split(separator: ",", omittingEmptySubsequences: false) {
            var rangeText = Substring(item)
            var step = 1
            if let slash = item.firstIndex(of: "/") {
                rangeText = item[..<slash]
                guard let value = Int(item[item.index(after: slash)...]), value > 0 else { throw Refused(reason: "cron refuses the step in \"\(field)\"") }
                step = value
            }
            let first: Int, last: Int
            if rangeText == "*" {
                first = low
                last = high
            } else if let dash = rangeText.firstIndex(of: "-") {
                first = try number(rangeText[..<dash], low: low, high: high, names: names, field: field)
                last = try number(rangeText[rangeText.index(after: dash)...], low: low, high: high, names: names, field: field)
            } else if item.contains("/") {
                guard stepAfterSingle else { throw Refused(reason: "a step after a single value (\"\(field)\"), which this cron refuses") }
                first = try number(rangeText, low: low, high: high, names: names, field: field)
                last = high
            } else {
                first = try number(rangeText, low: low, high: high, names: names, field: field)
                last = first
            }
            var value = first
            while value <= last {
                bits |= 1 << UInt64(value)
                value += step
            }
        }
        return (bits, field.hasPrefix("*"))
    }

    private static func number(_ text: Substring, low: Int, high: Int, names: [String], field: String) throws(Refused) -> Int {
        if let value = Int(text), value >= low, value <= high { return value }
        if let index = names.firstIndex(of: text.lowercased()) { return low == 0 ? index : index + 1 }
        throw Refused(reason: "cron refuses \"\(text)\" in \"\(field)\"")
    }

    /// find_jobs' test for one wall-clock minute (minutes since the epoch, local).
    func matches(wallMinute: Int64) -> Bool {
        let dayNumber = CivilCalendar.floorDivide(wallMinute, 1_440)
        let minuteOfDay = Int(wallMinute - dayNumber * 1_440)
        let date = CivilCalendar.date(days: dayNumber)
        let weekday = CivilCalendar.weekday(days: dayNumber)
        func has(_ bits: UInt64, _ value: Int) -> Bool { bits >> UInt64(value) & 1 == 1 }
        guard has(minutes, minuteOfDay % 60), has(hours, minuteOfDay / 60), has(months, date.month) else { return false }
        let domMatches = has(daysOfMonth, date.day)
        let dowMatches = has(daysOfWeek, weekday)
        return dayOfMonthStar || dayOfWeekStar ? domMatches && dowMatches : domMatches || dowMatches
    }

    /// Whether any minute of this wall day can match (month and day rule only).
    private func dayCanMatch(_ dayNumber: Int64) -> Bool {
        let date = CivilCalendar.date(days: dayNumber)
        func has(_ bits: UInt64, _ value: Int) -> Bool { bits >> UInt64(value) & 1 == 1 }
        guard has(months, date.month) else { return false }
        let domMatches = has(daysOfMonth, date.day)
        let dowMatches = has(daysOfWeek, CivilCalendar.weekday(days: dayNumber))
        return dayOfMonthStar || dayOfWeekStar ? domMatches && dowMatches : domMatches || dowMatches
    }

    /// The instants (UTC seconds, each at the real minute cron runs the entry) of the next
    /// `count` runs after `utcSeconds`, cron started then with the zone as its local time.
    /// An instant appears twice when cron runs the entry twice in one minute.
    ///
    /// `entryZone`: cronie's CRON_TZ. cronie walks its minutes in the machine's zone as
    /// above, and reads such an entry at the real instant of each minute it looks at, in
    /// CRON_TZ (cron.c's find_jobs); while it catches up minutes a change of the machine's
    /// offset skipped, it runs no CRON_TZ entry, and in a repeated hour of the machine it
    /// runs none of their fixed times. In CRON_TZ's own gap a fixed time never comes, and
    /// in its repeated hour it comes twice.
    func runs(after utcSeconds: Int64, count: Int, in zone: TimeZoneRules, entryZone: TimeZoneRules? = nil, horizonYears: Int = 30) -> [Int64] {
        func wallMinute(_ utc: Int64, _ rules: TimeZoneRules) -> Int64 {
            CivilCalendar.floorDivide(utc + Int64(rules.offset(at: utc).offsetSeconds), 60)
        }
        let end = utcSeconds + Int64(horizonYears) * 366 * 86_400
        var virtualTime = wallMinute(utcSeconds, zone)
        var now = CivilCalendar.floorDivide(utcSeconds, 60) * 60 + 60
        // cronie's oldGMToff: the machine's offset of the last minute looked at.
        var oldOffset = Int64(zone.offset(at: utcSeconds).offsetSeconds)
        var fires: [Int64] = []
        while fires.count < count && now < end {
            let timeRunning = wallMinute(now, zone)
            let offset = Int64(zone.offset(at: now).offsetSeconds)
            let difference = timeRunning - virtualTime
            func run(_ minute: Int64, wild: Bool, fixed: Bool, readOffset: Int64) {
                guard isWildcard ? wild : fixed else { return }
                if let entryZone {
                    guard readOffset == offset else { return }
                    if matches(wallMinute: wallMinute(minute * 60 - readOffset, entryZone)) { fires.append(now) }
                } else if matches(wallMinute: minute) {
                    fires.append(now)
                }
            }
            if difference == 1 || difference > 180 || difference <= -180 {
                virtualTime = timeRunning
                oldOffset = offset
                run(timeRunning, wild: true, fixed: true, readOffset: offset)
            } else if difference > 0 {
                // Over 5 minutes (a jump forward): the wildcard entries for now first.
                if difference > 5 { run(timeRunning, wild: true, fixed: false, readOffset: offset) }
                while virtualTime < timeRunning {
                    virtualTime += 1
                    if virtualTime >= timeRunning { oldOffset = offset }
                    run(virtualTime, wild: difference <= 5, fixed: true, readOffset: oldOffset)
                }
            } else {
                run(timeRunning, wild: true, fixed: false, readOffset: offset)
            }
            now += skippableSeconds(now: now, timeRunning: timeRunning, virtualTime: &virtualTime, zone: zone, entryZone: entryZone) + 60
        }
        return Array(fires.prefix(count))
    }

    /// In a steady stretch (the clock one minute ahead of the last look, no change of
    /// offset before the next midnight of the zone the entry is read in) a day that cannot
    /// match is skipped whole: cron would look at each of its minutes and run nothing.
    private func skippableSeconds(now: Int64, timeRunning: Int64, virtualTime: inout Int64, zone: TimeZoneRules, entryZone: TimeZoneRules?) -> Int64 {
        guard virtualTime == timeRunning else { return 0 }
        let readIn = entryZone ?? zone
        let wall = CivilCalendar.floorDivide(now + Int64(readIn.offset(at: now).offsetSeconds), 60)
        let day = CivilCalendar.floorDivide(wall + 1, 1_440)
        guard !dayCanMatch(day) else { return 0 }
        let jump = ((day + 1) * 1_440 - 1 - wall) * 60
        guard jump > 0 else { return 0 }
        for rules in entryZone.map({ [zone, $0] }) ?? [zone] {
            if let transition = rules.nextTransition(after: now), transition.at <= now + jump + 60 { return 0 }
        }
        virtualTime += jump / 60
        return jump
    }
}
