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

struct VixieCronSchedule: Sendable {
    private var minutes: UInt64 = 0, hours: UInt64 = 0, daysOfMonth: UInt64 = 0, months: UInt64 = 0, daysOfWeek: UInt64 = 0
    private var minuteStar = false, hourStar = false, dayOfMonthStar = false, dayOfWeekStar = false
    var isWildcard: Bool { minuteStar || hourStar }

    struct Refused: Error { let reason: String }

    private static let monthNames = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    private static let dayNames = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

    /// The five fields or an @-word as cron's entry.c reads them.
    init(parsing text: String) throws(Refused) {
        let words = text.split { $0 == " " || $0 == "\t" }.map(String.init)
        if words.count == 1, words[0].hasPrefix("@") {
            func all(_ count: Int) -> UInt64 { (1 << UInt64(count)) - 1 }
            minutes = 1
            switch words[0].dropFirst().lowercased() {
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
        (minutes, minuteStar) = try Self.list(words[0], low: 0, high: 59, names: [])
        (hours, hourStar) = try Self.list(words[1], low: 0, high: 23, names: [])
        (daysOfMonth, dayOfMonthStar) = try Self.list(words[2], low: 1, high: 31, names: [])
        (months, _) = try Self.list(words[3], low: 1, high: 12, names: Self.monthNames)
        (daysOfWeek, dayOfWeekStar) = try Self.list(words[4], low: 0, high: 7, names: Self.dayNames)
        // Cron makes 0 and 7 the same Sunday.
        if daysOfWeek & (1 | 1 << 7) != 0 { daysOfWeek |= 1 | 1 << 7 }
    }

    /// get_list: items separated by commas, each `*` or `n` or `n-m`, a range optionally
    /// `/step`. A single number takes no step (cron refuses `5/10`); a reversed range sets
    /// nothing. The star flag is the field's first character being `*`.
    private static func list(_ field: String, low: Int, high: Int, names: [String]) throws(Refused) -> (UInt64, Bool) {
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
            } else {
                guard step == 1, !item.contains("/") else { throw Refused(reason: "cron refuses a step after a single value in \"\(field)\"") }
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
    func runs(after utcSeconds: Int64, count: Int, in zone: TimeZoneRules, horizonYears: Int = 30) -> [Int64] {
        func wallMinute(_ utc: Int64) -> Int64 {
            CivilCalendar.floorDivide(utc + Int64(zone.offset(at: utc).offsetSeconds), 60)
        }
        let end = utcSeconds + Int64(horizonYears) * 366 * 86_400
        var virtualTime = wallMinute(utcSeconds)
        var now = CivilCalendar.floorDivide(utcSeconds, 60) * 60 + 60
        var fires: [Int64] = []
        while fires.count < count && now < end {
            let timeRunning = wallMinute(now)
            let difference = timeRunning - virtualTime
            func run(_ minute: Int64, wild: Bool, fixed: Bool) {
                if matches(wallMinute: minute) && (isWildcard ? wild : fixed) { fires.append(now) }
            }
            if difference == 1 {
                virtualTime = timeRunning
                run(virtualTime, wild: true, fixed: true)
            } else if difference > 180 || difference <= -180 {
                virtualTime = timeRunning
                run(timeRunning, wild: true, fixed: true)
            } else if difference > 5 {
                run(timeRunning, wild: true, fixed: false)
                while virtualTime < timeRunning {
                    virtualTime += 1
                    run(virtualTime, wild: false, fixed: true)
                }
            } else if difference > 0 {
                while virtualTime < timeRunning {
                    virtualTime += 1
                    run(virtualTime, wild: true, fixed: true)
                }
            } else {
                run(timeRunning, wild: true, fixed: false)
            }
            // In a steady stretch (the clock one minute ahead of the last look, no change of
            // offset before the next wall midnight) a day that cannot match is skipped whole:
            // cron would look at each of its minutes and run nothing.
            if virtualTime == timeRunning {
                let day = CivilCalendar.floorDivide(timeRunning + 1, 1_440)
                if !dayCanMatch(day) {
                    let nextMidnightWall = (day + 1) * 1_440
                    let jump = (nextMidnightWall - 1 - timeRunning) * 60
                    let transition = zone.nextTransition(after: now)
                    if jump > 0, transition.map({ $0.at > now + jump + 60 }) ?? true {
                        now += jump
                        virtualTime += jump / 60
                    }
                }
            }
            now += 60
        }
        return Array(fires.prefix(count))
    }
}
