// Over 500 lines on purpose: a parser and its grammar read best in one file, top to bottom
// (the size rule in docs/architecture.md exempts parsers).
// Cron schedules for periodic tasks: the five-field syntax of Vixie cron/cronie, evaluated
// in a zone's wall time, with the daylight-saving behaviour documented in docs/cron.md.

/// Why a cron expression was refused, and where: `column` is 1-based and counts Unicode
/// scalars of the expression, so the config loader can add it to the column of the
/// string's first character and point at the exact field.
public struct CronParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    public let column: Int

    public var description: String { message }
}

/// A parsed cron expression: `minute hour day-of-month month day-of-week`, or a macro.
///
/// Days follow Vixie cron/cronie: when both day fields are restricted a day matches if
/// either does (`0 0 1,15 * 1` is the 1st, the 15th and every Monday); when either day
/// field starts with `*` (`*`, `*/2`) both must match, which with a plain `*` means only
/// the other field counts.
public struct CronExpression: Sendable, Equatable, CustomStringConvertible {
    let minutes, hours, daysOfMonth, months: CronValues
    /// Sunday is 0; a 7 in the text is stored as 0.
    let daysOfWeek: CronValues
    let dayOfMonthIsWildcard, dayOfWeekIsWildcard: Bool

    public init(parsing text: String) throws(CronParseError) {
        let scalars = Array(text.unicodeScalars)
        var tokens: [Range<Int>] = []
        var index = 0
        while index < scalars.count {
            if scalars[index].properties.isWhitespace {
                index += 1
                continue
            }
            let start = index
            while index < scalars.count, !scalars[index].properties.isWhitespace { index += 1 }
            tokens.append(start..<index)
        }
        guard let first = tokens.first else {
            throw CronParseError(
                message: "empty cron expression; expected 5 fields (minute hour day-of-month month day-of-week) or a macro such as @daily",
                column: 1
            )
        }
        if scalars[first.lowerBound] == "@" {
            let name = String(String.UnicodeScalarView(scalars[first])).lowercased()
            if tokens.count > 1 {
                throw CronParseError(
                    message: "unexpected text after \(name); a macro stands for all five fields",
                    column: tokens[1].lowerBound + 1
                )
            }
            let fields: String
            switch name {
            case "@yearly", "@annually": fields = "0 0 1 1 *"
            case "@monthly": fields = "0 0 1 * *"
            case "@weekly": fields = "0 0 * * 0"
            case "@daily", "@midnight": fields = "0 0 * * *"
            case "@hourly": fields = "0 * * * *"
            case "@reboot":
                throw CronParseError(
                    message: "@reboot is not a schedule here; to run a task when watchkeeper starts, set run_on_start = true",
                    column: first.lowerBound + 1
                )
            default:
                throw CronParseError(
                    message: "unknown macro \"\(name)\"; expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly",
                    column: first.lowerBound + 1
                )
            }
            self = try CronExpression(parsing: fields)
            return
        }
        guard tokens.count == 5 else {
            var message = "expected 5 fields (minute hour day-of-month month day-of-week), found \(tokens.count)"
            if tokens.count == 6 { message += "; a seconds or year field is not supported" }
            let column = tokens.count > 5 ? tokens[5].lowerBound + 1 : tokens[tokens.count - 1].upperBound + 1
            throw CronParseError(message: message, column: column)
        }
        var parsed: [(values: CronValues, isWildcard: Bool)] = []
        for (field, token) in zip(CronField.all, tokens) {
            var parser = CronFieldParser(field: field, scalars: scalars, index: token.lowerBound, end: token.upperBound)
            parsed.append(try parser.parse())
        }
        minutes = parsed[0].values
        hours = parsed[1].values
        daysOfMonth = parsed[2].values
        dayOfMonthIsWildcard = parsed[2].isWildcard
        months = parsed[3].values
        daysOfWeek = parsed[4].values
        dayOfWeekIsWildcard = parsed[4].isWildcard
    }

    /// The normalised five fields: `0 9 * * 1-5`. Macros are expanded (`@daily` is
    /// `0 0 * * *`) and names become numbers; parsing it gives back an equal expression.
    public var description: String {
        [
            CronField.minute.render(minutes),
            CronField.hour.render(hours),
            CronField.dayOfMonth.render(daysOfMonth, isWildcard: dayOfMonthIsWildcard),
            CronField.month.render(months),
            CronField.dayOfWeek.render(daysOfWeek, isWildcard: dayOfWeekIsWildcard),
        ].joined(separator: " ")
    }

    /// Whether the wall time (to the minute; seconds are ignored) is one the expression names.
    public func matches(_ local: LocalDateTime) -> Bool {
        let minuteStart = CivilCalendar.floorDivide(local.localSeconds, 60) * 60
        let dayNumber = CivilCalendar.floorDivide(minuteStart, 86_400)
        let date = CivilCalendar.date(days: dayNumber)
        let secondOfDay = Int(minuteStart - dayNumber * 86_400)
        return months.contains(date.month) && matchesDay(date.day, dayNumber: dayNumber)
            && hours.contains(secondOfDay / 3_600) && minutes.contains(secondOfDay % 3_600 / 60)
    }

    private func matchesDay(_ day: Int, dayNumber: Int64) -> Bool {
        let dayOfMonthMatches = daysOfMonth.contains(day)
        let dayOfWeekMatches = daysOfWeek.contains(CivilCalendar.weekday(days: dayNumber))
        if dayOfMonthIsWildcard || dayOfWeekIsWildcard {
            return dayOfMonthMatches && dayOfWeekMatches
        }
        return dayOfMonthMatches || dayOfWeekMatches
    }

    /// Expressions whose hour field covers every hour (`*/15 * * * *`, `0 * * * *`) are
    /// intervals rather than times of day, and follow the wall clock through DST changes;
    /// see `nextFire(after:in:)`.
    var matchesEveryHour: Bool { hours == CronField.hour.everyValue }

    /// True when no date can ever match, like `0 0 30 2 *` or `0 0 31 4 *`. The config
    /// loader refuses such an expression (cron would accept it and never run it), and
    /// `nextFire` returns nil for it.
    public var neverFires: Bool {
        // With the "either day field" rule, every month has every weekday.
        if !dayOfMonthIsWildcard && !dayOfWeekIsWildcard { return false }
        // Otherwise some named day must exist in some named month; any date falls on
        // every weekday in some year.
        for month in months.values {
            let longest = month == 2 ? 29 : CivilCalendar.daysInMonth(year: 2001, month: month)
            if daysOfMonth.values.contains(where: { $0 <= longest }) { return false }
        }
        return true
    }

    // MARK: - Next fire time

    /// The first instant strictly after `utcSeconds` at which the task fires, with the
    /// expression read in the zone's wall time; nil if it never fires.
    ///
    /// Fires are at second 0 of a wall-clock minute. Across daylight-saving changes:
    /// - A wall time the clocks skip (02:30 on a spring-forward night in Berlin) fires
    ///   once, at the instant the gap ends (03:00 CEST); several skipped times that match
    ///   (`*/15 2 * * *`) fire once in total.
    /// - A wall time the clocks show twice (02:30 on a fall-back night) fires once, at its
    ///   first occurrence.
    /// - Except: expressions whose hour field matches every hour (`*/15 * * * *`,
    ///   `30 * * * *`) are intervals, and fire whenever the clock shows a matching time:
    ///   in both occurrences of a repeated hour, and not at all for skipped times. So
    ///   "every 15 minutes" stays every 15 real minutes and "hourly" stays hourly.
    /// This follows what cronie documents for jobs in the changed hour.
    public func nextFire(after utcSeconds: Int64, in zone: TimeZoneRules) -> Int64? {
        guard !neverFires else { return nil }
        let limit = TimeZoneRules.supportedRange - Self.searchHorizonSeconds
        guard utcSeconds > -limit, utcSeconds < limit else { return nil }
        let horizon = utcSeconds + Self.searchHorizonSeconds
        var cursor = utcSeconds + 1
        var type = zone.localTimeType(at: cursor)
        // The walk goes from one constant-offset period of the zone to the next. A period
        // that opens with a forward jump may owe a fire for the wall times it skipped.
        let typeBefore = zone.localTimeType(at: cursor - 1)
        var opening: ZoneTransition? = typeBefore == type ? nil : ZoneTransition(at: cursor, before: typeBefore, after: type)
        while true {
            if let opening, let fire = gapFire(opening, in: zone) { return fire }
            let next = zone.nextTransition(after: cursor)
            let periodEnd = min(next?.at ?? horizon, horizon)
            let offset = Int64(type.offsetSeconds)
            var from = cursor + offset
            while let wall = firstMatch(atOrAfterLocal: from, beforeLocal: periodEnd + offset) {
                let instant = wall - offset
                if firesAtOccurrence(instant, of: wall, in: zone) { return instant }
                from = wall + 60
            }
            guard let next, next.at < horizon else { return nil }
            cursor = next.at
            type = next.after
            opening = next
        }
    }

    /// Long enough for any expression that can fire: the rarest realistic one, February
    /// 29 on a given weekday, recurs within 40 years; the Gregorian calendar repeats
    /// every 400. Expressions that can never fire are answered by `neverFires` before
    /// the search, so this only bounds the work for a corrupt zone.
    static let searchHorizonSeconds: Int64 = 401 * 366 * 86_400

    /// Whether a wall time the zone shows at this instant fires here: always for interval
    /// expressions, otherwise only at the wall time's first occurrence.
    private func firesAtOccurrence(_ instant: Int64, of wall: Int64, in zone: TimeZoneRules) -> Bool {
        if matchesEveryHour { return true }
        switch zone.resolve(localSeconds: wall) {
        case .unique:
            return true
        case .repeated(let first, _):
            return instant == first
        case .skipped:
            return true  // Cannot happen: the zone shows this wall time at `instant`.
        }
    }

    /// The single fire owed at the end of a forward jump, if a matching wall time fell in it.
    private func gapFire(_ transition: ZoneTransition, in zone: TimeZoneRules) -> Int64? {
        guard !matchesEveryHour, transition.after.offsetSeconds > transition.before.offsetSeconds else { return nil }
        let gapEnd = transition.at + Int64(transition.after.offsetSeconds)
        var from = transition.at + Int64(transition.before.offsetSeconds)
        while let wall = firstMatch(atOrAfterLocal: from, beforeLocal: gapEnd) {
            // A zone could in principle show the wall time again later; then it fires there.
            if case .skipped(let end) = zone.resolve(localSeconds: wall), end == transition.at {
                return transition.at
            }
            from = wall + 60
        }
        return nil
    }

    /// The first matching wall time (local seconds, second 0) in [start, limit). Skips by
    /// month, then day, then hour, so rare dates cost a few steps per month, not one per
    /// minute.
    func firstMatch(atOrAfterLocal start: Int64, beforeLocal limit: Int64) -> Int64? {
        let minuteStart = CivilCalendar.floorDivide(start + 59, 60) * 60
        let startDay = CivilCalendar.floorDivide(minuteStart, 86_400)
        var (year, month, day) = CivilCalendar.date(days: startDay)
        let secondOfDay = Int(minuteStart - startDay * 86_400)
        var hour = secondOfDay / 3_600
        var minute = secondOfDay % 3_600 / 60

        func nextDay() {
            hour = 0
            minute = 0
            day += 1
            if day > CivilCalendar.daysInMonth(year: year, month: month) {
                day = 1
                month += 1
                if month > 12 {
                    month = 1
                    year += 1
                }
            }
        }

        while true {
            let dayNumber = CivilCalendar.days(year: year, month: month, day: day)
            guard dayNumber * 86_400 + Int64(hour * 3_600 + minute * 60) < limit else { return nil }
            if !months.contains(month) {
                if let nextMonth = months.first(atOrAfter: month + 1) {
                    month = nextMonth
                } else {
                    month = months.first(atOrAfter: 1)!
                    year += 1
                }
                day = 1
                hour = 0
                minute = 0
                continue
            }
            if !matchesDay(day, dayNumber: dayNumber) {
                // When only the day of month counts, jump straight to the next named day.
                if dayOfWeekIsWildcard, daysOfWeek == CronField.dayOfWeek.everyValue,
                   let namedDay = daysOfMonth.first(atOrAfter: day + 1),
                   namedDay <= CivilCalendar.daysInMonth(year: year, month: month) {
                    day = namedDay
                    hour = 0
                    minute = 0
                } else {
                    nextDay()
                }
                continue
            }
            guard let matchingHour = hours.first(atOrAfter: hour) else {
                nextDay()
                continue
            }
            if matchingHour != hour {
                hour = matchingHour
                minute = 0
            }
            guard let matchingMinute = minutes.first(atOrAfter: minute) else {
                minute = 0
                hour += 1
                if hour == 24 { nextDay() }
                continue
            }
            let wall = dayNumber * 86_400 + Int64(hour * 3_600 + matchingMinute * 60)
            return wall < limit ? wall : nil
        }
    }
}

// MARK: - Fields

/// A set of small numbers (0...63) as bits.
struct CronValues: Sendable, Equatable {
    var bits: UInt64 = 0

    func contains(_ value: Int) -> Bool {
        value >= 0 && value < 64 && bits >> UInt64(value) & 1 == 1
    }

    mutating func insert(_ value: Int) {
        bits |= 1 << UInt64(value)
    }

    func first(atOrAfter value: Int) -> Int? {
        guard value < 64 else { return nil }
        let remaining = bits & (~0 << UInt64(max(value, 0)))
        return remaining == 0 ? nil : remaining.trailingZeroBitCount
    }

    var values: [Int] {
        (0..<64).filter { contains($0) }
    }
}

/// What one of the five fields accepts.
struct CronField: Sendable {
    let name: String
    /// Values that may be written (0...7 for the day of week: 0 and 7 are Sunday).
    let bounds: ClosedRange<Int>
    /// Where `*` and `a/n` stop (6 for the day of week, so `*/2` is not also Sunday twice).
    let wildcardEnd: Int
    /// Three-letter names, the first one standing for `bounds.lowerBound`.
    let names: [String]
    let nameKind: String
    /// What `*` stands for.
    let everyValue: CronValues

    init(name: String, bounds: ClosedRange<Int>, wildcardEnd: Int, names: [String], nameKind: String) {
        self.name = name
        self.bounds = bounds
        self.wildcardEnd = wildcardEnd
        self.names = names
        self.nameKind = nameKind
        var every = CronValues()
        for value in bounds.lowerBound...wildcardEnd { every.insert(value) }
        everyValue = every
    }

    static let minute = CronField(name: "minute", bounds: 0...59, wildcardEnd: 59, names: [], nameKind: "")
    static let hour = CronField(name: "hour", bounds: 0...23, wildcardEnd: 23, names: [], nameKind: "")
    static let dayOfMonth = CronField(name: "day of month", bounds: 1...31, wildcardEnd: 31, names: [], nameKind: "")
    static let month = CronField(
        name: "month", bounds: 1...12, wildcardEnd: 12,
        names: ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
        nameKind: "a month name (jan-dec)"
    )
    static let dayOfWeek = CronField(
        name: "day of week", bounds: 0...7, wildcardEnd: 6,
        names: ["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
        nameKind: "a day name (sun-sat)"
    )
    static let all = [minute, hour, dayOfMonth, month, dayOfWeek]

    var isDayOfWeek: Bool { wildcardEnd != bounds.upperBound }

    var boundsText: String { "\(bounds.lowerBound)-\(bounds.upperBound)" }

    /// For the minute, hour and month: only the values matter, so the shortest usual
    /// spelling is used (`*`, `*/15` for three or more evenly spaced values from the start).
    func render(_ values: CronValues) -> String {
        let list = values.values
        if values == everyValue { return "*" }
        if list.count >= 3, list[0] == bounds.lowerBound {
            let step = list[1] - list[0]
            var progression = CronValues()
            for value in stride(from: bounds.lowerBound, through: wildcardEnd, by: step) { progression.insert(value) }
            if progression == values { return "*/\(step)" }
        }
        return render(values, isWildcard: false)
    }

    /// `*`, `*/n`, or a list of numbers and ranges. A day field written as a wildcard must
    /// come back as one, and a restricted one must not: that decides between the "either"
    /// and "both" day rules.
    func render(_ values: CronValues, isWildcard: Bool) -> String {
        let list = values.values
        if isWildcard {
            if values == everyValue { return "*" }
            let step = list.count > 1 ? list[1] - list[0] : wildcardEnd - bounds.lowerBound + 1
            return "*/\(step)"
        }
        var parts: [String] = []
        var index = 0
        while index < list.count {
            var runEnd = index
            while runEnd + 1 < list.count, list[runEnd + 1] == list[runEnd] + 1 { runEnd += 1 }
            if runEnd - index >= 2 {
                parts.append("\(list[index])-\(list[runEnd])")
            } else {
                parts += list[index...runEnd].map(String.init)
            }
            index = runEnd + 1
        }
        return parts.joined(separator: ",")
    }
}

/// Parses one field: a comma-separated list of `*`, `n`, `a-b`, each optionally `/step`
/// (`a/n` runs from a to the end of the field).
private struct CronFieldParser {
    let field: CronField
    let scalars: [Unicode.Scalar]
    var index: Int
    let end: Int

    private var atEnd: Bool { index == end }
    private var peek: Unicode.Scalar? { atEnd ? nil : scalars[index] }

    private func failure(_ message: String, at position: Int) -> CronParseError {
        CronParseError(message: message, column: position + 1)
    }

    private func text(_ range: Range<Int>) -> String {
        String(String.UnicodeScalarView(scalars[range]))
    }

    mutating func parse() throws(CronParseError) -> (values: CronValues, isWildcard: Bool) {
        var values = CronValues()
        var itemCount = 0
        var wildcardItem: Range<Int>?
        while true {
            let itemStart = index
            itemCount += 1
            if atEnd || peek == "," {
                throw failure("empty item in the \(field.name) list", at: itemStart)
            }
            var low: Int
            var high: Int
            var step = 1
            var isWildcard = false
            if peek == "*" {
                index += 1
                isWildcard = true
                low = field.bounds.lowerBound
                high = field.wildcardEnd
            } else {
                let first = try value(after: nil)
                low = first.value
                high = first.value
                if peek == "-" {
                    index += 1
                    var second = try value(after: "-")
                    // "sat-sun" means Saturday to Sunday, not a reversed range.
                    if field.isDayOfWeek, second.value == 0, second.isName, first.value > 0 { second.value = 7 }
                    guard first.value <= second.value else {
                        // 7 is Sunday, the start of the week as 0: "7-1" is "0-1" (a range
                        // from 7 cannot wrap, and "7-6,0-1" would itself be refused).
                        if field.isDayOfWeek, first.value == 7, !first.isName {
                            throw failure("\(field.name) range \(text(itemStart..<index)) is reversed; Sunday is also 0, so write it as 0-\(text(second.range))",
                                          at: itemStart)
                        }
                        let wrapped = "\(text(first.range))-\(wrapEndText(named: first.isName)),\(wrapStartText(named: second.isName))-\(text(second.range))"
                        throw failure(
                            "\(field.name) range \(text(itemStart..<index)) is reversed; to wrap around, list two ranges like \(wrapped)",
                            at: itemStart
                        )
                    }
                    high = second.value
                } else if peek == "/" {
                    high = max(low, field.wildcardEnd)
                }
            }
            if peek == "/" {
                index += 1
                step = try stepValue(from: low)
            }
            for value in stride(from: low, through: high, by: step) {
                values.insert(field.isDayOfWeek && value == 7 ? 0 : value)
            }
            if isWildcard { wildcardItem = itemStart..<index }
            if atEnd { break }
            guard peek == "," else {
                throw failure("unexpected \"\(peek!)\" in the \(field.name) field", at: index)
            }
            index += 1
            if atEnd { throw failure("empty item in the \(field.name) list", at: index) }
        }
        if let wildcardItem, itemCount > 1 {
            // cronie treats "*/2,5" as a wildcard but "5,*/2" as not; refuse rather than
            // pick a side.
            throw failure(
                "\"\(text(wildcardItem))\" cannot be combined with other items in the \(field.name) list; list the values instead",
                at: wildcardItem.lowerBound
            )
        }
        return (values, wildcardItem != nil)
    }

    private func wrapEndText(named: Bool) -> String {
        named ? field.names[field.wildcardEnd - field.bounds.lowerBound] : "\(field.wildcardEnd)"
    }

    private func wrapStartText(named: Bool) -> String {
        named ? field.names[0] : "\(field.bounds.lowerBound)"
    }

    private mutating func digits() -> (value: Int, range: Range<Int>)? {
        let start = index
        var value = 0
        while let scalar = peek, ("0"..."9").contains(scalar) {
            // Saturate: anything this long is out of range anyway.
            value = min(value * 10 + Int(scalar.value - 48), 1_000_000)
            index += 1
        }
        return index > start ? (value, start..<index) : nil
    }

    private mutating func value(after separator: String?) throws(CronParseError) -> (value: Int, isName: Bool, range: Range<Int>) {
        let start = index
        if let number = digits() {
            guard field.bounds.contains(number.value) else {
                let hint = field.isDayOfWeek ? " (0 and 7 are Sunday)" : ""
                throw failure("\(field.name) \(text(number.range)) is out of range \(field.boundsText)\(hint)", at: start)
            }
            return (number.value, false, number.range)
        }
        while let scalar = peek, scalar.isASCII, scalar.properties.isAlphabetic { index += 1 }
        guard index > start else {
            let context = separator.map { " after \"\($0)\"" } ?? ""
            let expected = field.names.isEmpty ? "a number (\(field.boundsText))" : "a number (\(field.boundsText)) or \(field.nameKind)"
            let found = peek.map { ", found \"\($0)\"" } ?? ""
            throw failure("expected \(expected)\(context) in the \(field.name) field\(found)", at: start)
        }
        let word = text(start..<index)
        if let position = field.names.firstIndex(of: word.lowercased()) {
            return (field.bounds.lowerBound + position, true, start..<index)
        }
        guard !field.names.isEmpty else {
            throw failure("\(field.name) \"\(word)\" is not a number (\(field.boundsText))", at: start)
        }
        var message = "\(field.name) \"\(word)\" is not a number (\(field.boundsText)) or \(field.nameKind)"
        if word.count > 3, let abbreviated = field.names.first(where: { word.lowercased().hasPrefix($0) }) {
            message += "; names are three letters, like \"\(abbreviated)\""
        }
        throw failure(message, at: start)
    }

    private mutating func stepValue(from low: Int) throws(CronParseError) -> Int {
        let start = index
        guard let step = digits() else {
            throw failure("expected a step number after \"/\" in the \(field.name) field", at: start)
        }
        guard step.value >= 1 else {
            throw failure("\(field.name) step 0 is invalid; a step must be at least 1", at: start)
        }
        // "*/90" in the minute field is not "every 90 minutes": steps restart each hour.
        let span = field.wildcardEnd - field.bounds.lowerBound + 1
        guard step.value <= span else {
            throw failure(
                "\(field.name) step \(text(step.range)) is larger than the field's \(span) values; steps do not carry over into the next \(field.carryUnit)",
                at: start
            )
        }
        return step.value
    }
}

extension CronField {
    /// What a step restarts with, for the message about oversized steps.
    fileprivate var carryUnit: String {
        switch name {
        case "minute": return "hour"
        case "hour": return "day"
        case "day of month": return "month"
        case "month": return "year"
        default: return "week"
        }
    }
}
