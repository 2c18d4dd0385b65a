// calendar_spec_from_string of systemd 252: the text of a calendar event into its fields,
// with the errors check-config shows (message and column). CalendarEvent normalizes and
// checks what it returns.

struct CalendarEventParser {
    let text: [UInt8]
    var position = 0
    /// Where the part being parsed starts in the original text (a zone is cut off the end).
    var end: Int

    init(text: [UInt8]) {
        self.text = text
        self.end = text.count
    }

    typealias Component = CalendarEvent.Component

    func failure(_ message: String, at column: Int? = nil) -> CalendarParseError {
        CalendarParseError(message: message, column: column ?? position)
    }

    var current: UInt8? { position < end ? text[position] : nil }

    func isDigit(_ byte: UInt8?) -> Bool { byte.map { $0 >= 48 && $0 <= 57 } ?? false }

    mutating func parse(into event: inout CalendarEvent) throws(CalendarParseError) {
        // A trailing zone: " UTC" in any case, else a last word that names a zone file.
        if text.count >= 4, String(decoding: text[(text.count - 4)...], as: UTF8.self).lowercased() == " utc" {
            end = text.count - 4
            event.setZone("UTC", rules: .utc)
        } else if let space = text.lastIndex(of: 32) {
            let word = String(decoding: text[(space + 1)...], as: UTF8.self)
            if Self.mayBeZoneName(word), let rules = try? TimeZoneRules.load(identifier: word) {
                end = space
                event.setZone(word, rules: rules)
            }
        }
        guard end > 0 else { throw failure("an empty calendar event", at: 0) }
        let body = String(decoding: text[0..<end], as: UTF8.self)
        if event.setShorthand(body) { return }

        let weekdays = try parseWeekdays()
        var years: [Component]?
        var months: [Component]?
        var days: [Component]?
        var endOfMonth = false
        var hours: [Component]? = [Component(start: 0, stop: nil, repeatEvery: 0)]
        var minutes: [Component]? = hours
        var seconds: [Component]? = hours

        if current == UInt8(ascii: "@") { return try parseTimestamp(weekdays: weekdays, into: &event) }

        // The date, if the first chain is followed by '-' or '~' rather than ':'.
        if current != nil {
            let start = position
            let first = try chain()
            if current == nil || current == UInt8(ascii: ":") {
                position = start
            } else {
                if current == UInt8(ascii: "~") { endOfMonth = true } else if current != UInt8(ascii: "-") {
                    throw failure("expected '-' or '~' in the date")
                }
                position += 1
                let second = try chain()
                if current == nil || current == 32 {
                    months = first
                    days = second
                    skipSpaces()
                } else {
                    if endOfMonth { throw failure("'~' can only come before the day") }
                    if current == UInt8(ascii: "~") { endOfMonth = true } else if current != UInt8(ascii: "-") {
                        throw failure("expected '-' or '~' before the day")
                    }
                    position += 1
                    let third = try chain()
                    guard current == nil || current == 32 else { throw failure("expected a space after the date") }
                    skipSpaces()
                    years = first
                    months = second
                    days = third
                }
            }
        }
        // The time: HOUR:MINUTE[:SECOND]; none is 00:00:00.
        if current != nil {
            hours = try chain()
            guard current == UInt8(ascii: ":") else { throw failure("expected ':' after the hour") }
            position += 1
            minutes = try chain()
            if current == nil {
                seconds = [Component(start: 0, stop: nil, repeatEvery: 0)]
            } else {
                guard current == UInt8(ascii: ":") else { throw failure("expected ':' after the minute") }
                position += 1
                seconds = try chain(seconds: true)
                guard current == nil else { throw failure("unexpected text after the seconds") }
            }
        }
        event.setFields(weekdays: weekdays, years: years, months: months, days: days, endOfMonth: endOfMonth,
                        hours: hours, minutes: minutes, seconds: seconds)
    }

    /// `@SECONDS`: one instant, in UTC.
    private mutating func parseTimestamp(weekdays: UInt8, into event: inout CalendarEvent) throws(CalendarParseError) {
        position += 1
        guard let (value, _) = number() else { throw failure("expected seconds since the epoch after @") }
        guard current == nil else { throw failure("unexpected text after the timestamp") }
        let local = LocalDateTime(localSeconds: Int64(value))
        func one(_ value: Int) -> [Component] { [Component(start: value, stop: nil, repeatEvery: 0)] }
        event.setFields(weekdays: weekdays, years: one(local.year), months: one(local.month), days: one(local.day), endOfMonth: false,
                        hours: one(local.hour), minutes: one(local.minute), seconds: one(local.second))
        event.setZone("UTC", rules: .utc)
        event.setTimestamp()
    }

    static func mayBeZoneName(_ word: String) -> Bool {
        !word.isEmpty && word.utf8.allSatisfy { $0 > 32 && $0 != UInt8(ascii: ":") && $0 != UInt8(ascii: "*") && $0 != UInt8(ascii: "~") }
            && word.utf8.contains { ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) }
            && !word.hasPrefix("/") && !word.contains(utf8: "..")
    }

    mutating func skipSpaces() {
        while current == 32 { position += 1 }
    }

    static let dayNames: [(String, Int)] = [
        ("monday", 0), ("mon", 0), ("tuesday", 1), ("tue", 1), ("wednesday", 2), ("wed", 2),
        ("thursday", 3), ("thu", 3), ("friday", 4), ("fri", 4), ("saturday", 5), ("sat", 5),
        ("sunday", 6), ("sun", 6),
    ]

    mutating func parseWeekdays() throws(CalendarParseError) -> UInt8 {
        var bits: UInt8 = 0
        var rangeStart = -1
        var first = true
        while true {
            var matched: (String, Int)?
            for (name, number) in Self.dayNames {
                let bytes = Array(name.utf8)
                guard position + bytes.count <= end else { continue }
                if zip(text[position..<(position + bytes.count)], bytes).allSatisfy({ ($0 | 0x20) == $1 }) {
                    matched = (name, number)
                    break
                }
            }
            guard let (name, number) = matched else {
                if first { return 0 }
                throw failure("expected a weekday")
            }
            let after = position + name.utf8.count
            let next: UInt8? = after < end ? text[after] : nil
            guard next == nil || [UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: ","), 32].contains(next!) else {
                throw failure("unknown weekday (Mon, Tue ... or Monday, Tuesday ...)")
            }
            bits |= 1 << UInt8(number)
            if rangeStart >= 0 {
                guard rangeStart <= number else { throw failure("a weekday range must run from Monday towards Sunday") }
                for day in rangeStart...number { bits |= 1 << UInt8(day) }
            }
            position = after
            if current == nil { return bits }
            if current == 32 { skipSpaces(); return bits }
            if current == UInt8(ascii: ".") {
                guard rangeStart < 0 else { throw failure("a weekday range can have only two ends") }
                guard position + 1 < end, text[position + 1] == UInt8(ascii: ".") else { throw failure("expected '..' in a weekday range") }
                rangeStart = number
                position += 2
            } else if current == UInt8(ascii: "-") {
                guard rangeStart < 0 else { throw failure("a weekday range can have only two ends") }
                rangeStart = number
                position += 1
            } else if current == UInt8(ascii: ",") {
                rangeStart = -1
                position += 1
            }
            if current == nil || current == 32 {
                skipSpaces()
                guard rangeStart < 0 else { throw failure("a weekday range without its end") }
                return bits
            }
            first = false
        }
    }

    mutating func number() -> (Int, Int)? {
        let start = position
        var value = 0
        while isDigit(current) {
            value = value > Int(Int32.max) ? value : value * 10 + Int(text[position] - 48)
            position += 1
        }
        return position > start ? (value, start) : nil
    }

    /// `*`, or components separated by ','.
    mutating func chain(seconds: Bool = false) throws(CalendarParseError) -> [Component]? {
        if current == UInt8(ascii: "*") {
            position += 1
            return nil
        }
        var components: [Component] = []
        while true {
            guard components.count < CalendarEvent.componentLimit else { throw failure("too many values in one field") }
            guard let (start, _) = number() else { throw failure("expected a number or '*'") }
            var component = Component(start: start, stop: nil, repeatEvery: 0)
            if current == UInt8(ascii: "."), position + 1 < end, text[position + 1] == UInt8(ascii: ".") {
                position += 2
                guard let (stop, _) = number() else { throw failure("expected the end of the range after '..'") }
                component.stop = stop
                component.repeatEvery = 1
            } else if current == UInt8(ascii: ".") {
                throw failure("fractions of a second are not supported")
            }
            if current == UInt8(ascii: "/") {
                position += 1
                guard let (step, at) = number() else { throw failure("expected a number after '/'") }
                if current == UInt8(ascii: ".") { throw failure("fractions of a second are not supported") }
                guard step > 0 else { throw failure("a repetition of 0 never repeats", at: at) }
                component.repeatEvery = step
            } else if seconds, let stop = component.stop, component.start + 1 > stop {
                // systemd's seconds are microseconds: a range with no step must span a second.
                throw failure("a range of seconds must end after it starts")
            }
            guard current == nil || [32, UInt8(ascii: ","), UInt8(ascii: "-"), UInt8(ascii: "~"), UInt8(ascii: ":")].contains(current!) else {
                throw failure("unexpected character")
            }
            guard component.start <= Int(Int32.max), (component.stop ?? 0) <= Int(Int32.max), component.repeatEvery <= Int(Int32.max) else {
                throw failure("a number too large")
            }
            components.append(component)
            guard current == UInt8(ascii: ",") else { return components }
            position += 1
        }
    }
}
