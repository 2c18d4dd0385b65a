/// Durations in the configuration are written the way administrators write them
/// elsewhere (systemd, Go): a sequence of `<number><unit>` parts, largest unit first,
/// e.g. "250ms", "5m", "1h30m", "1.5s". A bare number is refused: "30" could mean
/// seconds or milliseconds, and guessing wrong is worse than asking.
public enum DurationParser {
    public struct Failure: Error, Equatable, Sendable {
        public let reason: String
    }

    static let units: [(name: String, nanoseconds: Int64)] = [
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ]

    public static let expectation = #"expected a number and a unit (ms, s, m, h, d), like "250ms", "5m" or "1h30m""#

    public static func parse(_ text: String) -> Result<Duration, Failure> {
        let scalars = Array(text.unicodeScalars)
        guard !scalars.isEmpty else { return .failure(Failure(reason: "empty duration; \(expectation)")) }
        var index = 0
        var total: Int64 = 0
        var previousUnitRank = -1
        while index < scalars.count {
            let numberStart = index
            while index < scalars.count, scalars[index].properties.numericType != nil || scalars[index] == "." {
                guard scalars[index].isASCII else { return .failure(Failure(reason: expectation)) }
                index += 1
            }
            let number = String(String.UnicodeScalarView(scalars[numberStart..<index]))
            guard !number.isEmpty, let value = Double(number), value.isFinite else {
                return .failure(Failure(reason: expectation))
            }
            let unitStart = index
            while index < scalars.count, scalars[index].properties.isAlphabetic { index += 1 }
            let unit = String(String.UnicodeScalarView(scalars[unitStart..<index]))
            guard !unit.isEmpty else {
                return .failure(Failure(reason: "missing unit after \(number); \(expectation)"))
            }
            guard let rank = units.firstIndex(where: { $0.name == unit }) else {
                return .failure(Failure(reason: "unknown unit \"\(unit)\"; \(expectation)"))
            }
            guard rank > previousUnitRank else {
                return .failure(Failure(reason: "units must go from largest to smallest, each once; \(expectation)"))
            }
            previousUnitRank = rank
            let part = value * Double(units[rank].nanoseconds)
            guard part < Double(Int64.max / 2), total < Int64.max / 2 else {
                return .failure(Failure(reason: "duration too long"))
            }
            total += Int64(part.rounded())
        }
        return .success(.nanoseconds(total))
    }
}

// Duration's conversions to nanoseconds and to Dispatch live in System/DurationConversions.swift.
extension Duration {
    /// The same short form the configuration accepts, so an operator can paste a
    /// figure from the dump back into the file: 90s → "1m30s", 0.25s → "250ms".
    public var compactDescription: String {
        var rest = nanosecondsClamped
        if rest == 0 { return "0s" }
        var text = rest < 0 ? "-" : ""
        rest = rest.magnitude > UInt64(Int64.max) ? Int64.max : abs(rest)
        if rest < 1_000_000_000 {
            if rest >= 1_000_000 {
                let ms = Double(rest) / 1e6
                return text + (ms == ms.rounded() ? "\(Int64(ms))ms" : "\(roundedString(ms, digits: 1))ms")
            }
            return text + "\(roundedString(Double(rest) / 1e3, digits: 1))us"
        }
        for (name, size) in DurationParser.units where size >= 1_000_000_000 {
            if size == 1_000_000_000 {
                let seconds = Double(rest) / 1e9
                if seconds >= 0.001 || text.isEmpty || text == "-" {
                    text += seconds == seconds.rounded() ? "\(Int64(seconds))s" : "\(roundedString(seconds, digits: 1))s"
                }
                break
            }
            if rest >= size {
                text += "\(rest / size)\(name)"
                rest %= size
            }
        }
        return text
    }
}

func roundedString(_ value: Double, digits: Int) -> String {
    guard value.isFinite else { return "-" }
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    // Past Int64's range the fixed-point form below would trap; such figures read fine as they are.
    guard abs(value * scale) < 9.2e18 else { return String(value) }
    let scaled = (value * scale).rounded()
    let whole = Int64(scaled / scale)
    let fraction = Int64(abs(scaled).truncatingRemainder(dividingBy: scale))
    if digits == 0 { return "\(whole)" }
    var fractionText = "\(fraction)"
    while fractionText.count < digits { fractionText = "0" + fractionText }
    return "\(value < 0 && whole == 0 ? "-" : "")\(whole).\(fractionText)"
}
