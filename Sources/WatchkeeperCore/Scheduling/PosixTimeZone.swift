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
