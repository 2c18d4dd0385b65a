// Values of unit files as systemd reads them: booleans (systemd's parse_boolean) and time
// spans (systemd.time(7)), and a span written back as a watchkeeper duration.

import WatchkeeperCore

extension SystemdUnitImporter {
    static func boolean(_ text: String) -> Bool? {
        switch text.lowercased() {
        case "1", "yes", "y", "true", "t", "on": return true
        case "0", "no", "n", "false", "f", "off": return false
        default: return nil
        }
    }

    /// systemd.time(7) time spans: "5min 20s", "1h30m", "90" (seconds); nil if unreadable.
    static func timeSpan(_ text: String) -> Double? {
        let units: [String: Double] = [
            "usec": 1e-6, "us": 1e-6, "µs": 1e-6, "msec": 0.001, "ms": 0.001,
            "seconds": 1, "second": 1, "sec": 1, "s": 1, "": 1,
            "minutes": 60, "minute": 60, "min": 60, "m": 60,
            "hours": 3_600, "hour": 3_600, "hr": 3_600, "h": 3_600,
            "days": 86_400, "day": 86_400, "d": 86_400,
            "weeks": 604_800, "week": 604_800, "w": 604_800,
            "months": 2_629_800, "month": 2_629_800, "M": 2_629_800,
            "years": 31_557_600, "year": 31_557_600, "y": 31_557_600,
        ]
        var total = 0.0
        var characters = Array(text)[...]
        var sawPart = false
        while true {
            while characters.first == " " { characters = characters.dropFirst() }
            guard !characters.isEmpty else { break }
            var number = ""
            while let character = characters.first, character.isNumber || character == "." { number.append(character); characters = characters.dropFirst() }
            while characters.first == " " { characters = characters.dropFirst() }
            var unit = ""
            while let character = characters.first, character.isLetter || character == "µ" { unit.append(character); characters = characters.dropFirst() }
            guard let value = Double(number), let factor = units[unit] else { return nil }
            total += value * factor
            sawPart = true
        }
        return sawPart ? total : nil
    }

    /// Seconds as a watchkeeper duration: "1d2h", "15m", "1500ms".
    static func durationText(_ seconds: Double) -> String {
        var milliseconds = Int64((seconds * 1_000).rounded())
        if milliseconds == 0 { return "0s" }
        var out = ""
        for (unit, size) in [("d", Int64(86_400_000)), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] where milliseconds >= size {
            out += "\(milliseconds / size)\(unit)"
            milliseconds %= size
        }
        return out
    }
}
