/// `watchkeeper next --from TIME`: the instant the fires are counted from, written as
/// `systemd-analyze calendar --base-time` takes it: `@SECONDS` (since the epoch), or a date
/// and time of the machine's zone, `2027-03-27`, `2027-03-27 01:30`, `2027-03-27T01:30:15`,
/// optionally followed by a zone (`UTC`, `Z`, `Europe/Berlin`) to read it in instead.
public enum BaseTime {
    public struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        public let description: String
    }

    /// A wall time shown twice is its first occurrence, one the clocks skipped the end of
    /// the gap (where a search from it would start anyway).
    public static func parse(_ text: String, machineZone: () throws -> TimeZoneRules) throws(ParseError) -> WallTime {
        func refuse(_ why: String) -> ParseError {
            ParseError(description: "\"\(LineEscaping.escaped(text))\" \(why): write @SECONDS or YYYY-MM-DD [HH:MM[:SS]] [ZONE]")
        }
        var words = text.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        if words.count == 1, words[0].hasPrefix("@") {
            guard let seconds = Int64(words[0].dropFirst()), seconds >= 0 else { throw refuse("is not a number of seconds") }
            return WallTime(secondsSinceEpoch: seconds, nanoseconds: 0)
        }
        if let first = words.first, let t = first.firstIndex(of: "T") {
            words.replaceSubrange(0..<1, with: [String(first[..<t]), String(first[first.index(after: t)...])])
        }
        var zone: TimeZoneRules?
        if let last = words.last, words.count >= 2, last.hasSuffix("Z") && last.count > 1 && last.dropLast().allSatisfy({ $0.isNumber || $0 == ":" }) {
            words[words.count - 1] = String(last.dropLast())
            zone = .utc
        } else if let last = words.last, words.count >= 2, last.contains(where: \.isLetter) {
            do {
                zone = last == "UTC" || last == "Z" ? .utc : try TimeZoneRules.load(identifier: last)
            } catch {
                throw refuse("names no zone this machine has (\(error))")
            }
            words.removeLast()
        }
        guard (1...2).contains(words.count) else { throw refuse("is not a date and a time") }
        let date = words[0].split(separator: "-", omittingEmptySubsequences: false).map { Int($0) }
        guard date.count == 3, let year = date[0], let month = date[1], let day = date[2], words[0].count == 10,
              (1970...2199).contains(year), (1...12).contains(month), (1...CivilCalendar.daysInMonth(year: year, month: month)).contains(day)
        else { throw refuse("has no date YYYY-MM-DD from 1970 to 2199") }
        var clock = [0, 0, 0]
        if words.count == 2 {
            let parts = words[1].split(separator: ":", omittingEmptySubsequences: false).map { Int($0) }
            guard (2...3).contains(parts.count), parts.allSatisfy({ $0 != nil }) else { throw refuse("has no time HH:MM[:SS]") }
            for (index, value) in parts.enumerated() { clock[index] = value! }
            guard (0...23).contains(clock[0]), (0...59).contains(clock[1]), (0...59).contains(clock[2]) else { throw refuse("has a time out of range") }
        }
        let rules: TimeZoneRules
        do {
            rules = try zone ?? machineZone()
        } catch {
            throw refuse("cannot be read in the machine's zone (\(error))")
        }
        switch rules.resolve(LocalDateTime(year: year, month: month, day: day, hour: clock[0], minute: clock[1], second: clock[2])) {
        case .unique(let instant), .repeated(first: let instant, second: _), .skipped(gapEndsAt: let instant):
            return WallTime(secondsSinceEpoch: instant, nanoseconds: 0)
        }
    }
}
