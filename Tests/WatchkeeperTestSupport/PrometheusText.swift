#if canImport(XCTest)
/// The Prometheus text exposition format read back: every series with its labels and
/// value, and the TYPE of every family, for tests of what the daemon exports and of what
/// node_exporter serves of it.
public struct PrometheusText {
    public struct Series: Equatable {
        public let name: String
        public let labels: [String: String]
        public let value: Double
    }

    public private(set) var series: [Series] = []
    /// Family name → counter, gauge, histogram...
    public private(set) var types: [String: String] = [:]
    /// Lines that are neither comments nor series; a valid exposition has none.
    public private(set) var malformed: [String] = []

    public init(_ text: String) {
        for line in text.split(separator: "\n").map(String.init) {
            if line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ")
                if parts.count == 4 { types[String(parts[2])] = String(parts[3]) } else { malformed.append(line) }
            } else if line.hasPrefix("#") || line.isEmpty {
                continue
            } else if let parsed = Self.parseSeries(line) {
                series.append(parsed)
            } else {
                malformed.append(line)
            }
        }
    }

    /// The value of the one series of `name` whose labels include `labels`; nil if there is
    /// none or more than one.
    public func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        let matching = all(name, labels)
        return matching.count == 1 ? matching[0].value : nil
    }

    public func all(_ name: String, _ labels: [String: String] = [:]) -> [Series] {
        series.filter { series in series.name == name && labels.allSatisfy { key, value in series.labels[key] == value } }
    }

    public var names: Set<String> { Set(series.map(\.name)) }

    /// `name{a="x",b="y\"z"} 1.5` (an optional timestamp after the value is ignored).
    static func parseSeries(_ line: String) -> Series? {
        var characters = Array(line)
        var index = 0
        var name = ""
        while index < characters.count, characters[index] != "{", characters[index] != " " {
            name.append(characters[index])
            index += 1
        }
        var labels: [String: String] = [:]
        if index < characters.count, characters[index] == "{" {
            index += 1
            while index < characters.count, characters[index] != "}" {
                var key = ""
                while index < characters.count, characters[index] != "=" {
                    key.append(characters[index])
                    index += 1
                }
                index += 1
                guard index < characters.count, characters[index] == "\"" else { return nil }
                index += 1
                var value = ""
                while index < characters.count, characters[index] != "\"" {
                    if characters[index] == "\\", index + 1 < characters.count {
                        index += 1
                        value.append(characters[index] == "n" ? "\n" : characters[index])
                    } else {
                        value.append(characters[index])
                    }
                    index += 1
                }
                index += 1
                labels[key.trimmingSpaces] = value
                if index < characters.count, characters[index] == "," { index += 1 }
            }
            index += 1
        }
        characters = Array(characters.dropFirst(index))
        let fields = String(characters).split(separator: " ")
        guard !name.isEmpty, let first = fields.first else { return nil }
        let value: Double?
        switch first {
        case "+Inf": value = .infinity
        case "-Inf": value = -.infinity
        case "NaN": value = .nan
        default: value = Double(first)
        }
        guard let value else { return nil }
        return Series(name: name, labels: labels, value: value)
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
#endif
