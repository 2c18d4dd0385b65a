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
