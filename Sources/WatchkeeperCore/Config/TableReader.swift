import TOMLKit

/// Collects diagnostics while the whole file is walked.
final class ValidationContext {
    let file: String
    let sourceMap: TOMLSourceMap
    private(set) var diagnostics: [ConfigDiagnostic] = []
    /// The keys each table's reader asked for, by dotted table path ("task.retry"), in order;
    /// kept only for `acceptedKeys`, not on every load.
    private(set) var keysReadByTable: [String: [String]] = [:]
    private let collectingKeys: Bool

    init(file: String, sourceMap: TOMLSourceMap, collectingKeys: Bool = false) {
        self.collectingKeys = collectingKeys
        self.file = file
        self.sourceMap = sourceMap
    }

    /// Every problem found; only the first `stored` are kept (ConfigErrors lists 20).
    private(set) var found = 0
    static let stored = 1_000

    func error(at position: SourcePosition?, _ message: String) {
        found += 1
        guard diagnostics.count < Self.stored else { return }
        diagnostics.append(ConfigDiagnostic(file: file, position: position, message: message))
    }

    func noteKeysRead(_ keys: [String], inTable table: String) {
        guard collectingKeys else { return }
        var known = keysReadByTable[table] ?? []
        for key in keys where !known.contains(key) { known.append(key) }
        keysReadByTable[table] = known
    }
}

/// Typed access to one TOML table that reports every wrong type, bad value and
/// unknown key at its position. Each accessor marks its key as known.
struct TableReader {
    let table: TOMLTable
    let path: [TOMLPathComponent]
    let displayName: String
    let context: ValidationContext
    private(set) var knownKeys: [String] = []

    init(table: TOMLTable, path: [TOMLPathComponent], displayName: String, context: ValidationContext, knownKeys: [String] = []) {
        self.table = table
        self.path = path
        self.displayName = displayName
        self.context = context
        self.knownKeys = knownKeys
    }

    /// Where a problem with this whole table is reported: its header.
    var headerPosition: SourcePosition? { context.sourceMap.keyPosition(path) }

    func keyPosition(_ key: String) -> SourcePosition? { context.sourceMap.keyPosition(path + [.key(key)]) }
    func valuePosition(_ key: String) -> SourcePosition? {
        context.sourceMap.valuePosition(path + [.key(key)]) ?? keyPosition(key)
    }

    func dotted(_ key: String) -> String {
        tablePath.isEmpty ? key : tablePath + "." + key
    }

    /// The table's keys without array indexes: "task.retry" for every task's retry table.
    var tablePath: String {
        path.compactMap { component -> String? in
            if case .key(let name) = component { return name }
            return nil
        }.joined(separator: ".")
    }

    /// The raw value with its type checked; nil (and a diagnostic) on a type mismatch.
    private mutating func value(_ key: String, expected: TOMLType, required: Bool = false) -> TOMLValueConvertible? {
        knownKeys.append(key)
        guard let value = table[key] else {
            if required {
                context.error(at: context.sourceMap.keyPosition(path), "missing required key \"\(key)\" in \(displayName)")
            }
            return nil
        }
        guard value.type == expected else {
            context.error(at: valuePosition(key), "\(dotted(key)) must be \(article(expected)), not \(article(value.type))")
            return nil
        }
        return value
    }

    mutating func string(_ key: String, required: Bool = false) -> String? {
        value(key, expected: .string, required: required)?.string
    }

    mutating func table(_ key: String) -> TOMLTable? {
        value(key, expected: .table)?.table
    }

    /// An array of tables, `[[key]]`, with each element's index for position lookups.
    mutating func arrayOfTables(_ key: String) -> [(TOMLTable, Int)]? {
        guard let array = value(key, expected: .array)?.array else { return nil }
        var tables: [(TOMLTable, Int)] = []
        for (index, element) in array.enumerated() {
            guard let table = element.table else {
                context.error(at: context.sourceMap.valuePosition(path + [.key(key), .index(index)]) ?? valuePosition(key),
                              "\(dotted(key)) must be a list of tables, like [[\(key)]]")
                continue
            }
            tables.append((table, index))
        }
        return tables
    }

    mutating func bool(_ key: String) -> Bool? {
        value(key, expected: .bool)?.bool
    }

    /// A key that takes `true`/`false` or one of a few words (`batch = "stdin"`).
    enum BoolOrWord: Equatable {
        case bool(Bool)
        case word(String)
    }

    mutating func boolOrWord(_ key: String, words: [String]) -> BoolOrWord? {
        knownKeys.append(key)
        guard let value = table[key] else { return nil }
        let allowed = (["true", "false"] + words.map { "\"\($0)\"" }).joined(separator: ", ")
        if value.type == .bool, let flag = value.bool { return .bool(flag) }
        if value.type == .string, let text = value.string {
            if words.contains(text) { return .word(text) }
            context.error(at: valuePosition(key), "\(dotted(key)) must be one of \(allowed), not \"\(text)\"")
            return nil
        }
        context.error(at: valuePosition(key), "\(dotted(key)) must be one of \(allowed), not \(article(value.type))")
        return nil
    }

    /// A non-empty array of strings, such as an argv.
    mutating func stringArray(_ key: String, allowEmpty: Bool = false) -> [String]? {
        guard let array = value(key, expected: .array)?.array else { return nil }
        var strings: [String] = []
        for (index, element) in array.enumerated() {
            guard let text = element.string else {
                context.error(at: context.sourceMap.valuePosition(path + [.key(key), .index(index)]) ?? valuePosition(key),
                              "\(dotted(key)) must be an array of strings; element \(index + 1) is \(article(element.type))")
                return nil
            }
            strings.append(text)
        }
        if strings.isEmpty && !allowEmpty {
            context.error(at: valuePosition(key), "\(dotted(key)) must not be empty")
            return nil
        }
        return strings
    }

    /// The raw value whatever its type, for keys that accept several (`command`).
    mutating func any(_ key: String) -> TOMLValueConvertible? {
        knownKeys.append(key)
        return table[key]
    }

    mutating func integer(_ key: String, range: ClosedRange<Int>) -> Int? {
        guard let number = value(key, expected: .int)?.int else { return nil }
        guard range.contains(number) else {
            context.error(at: valuePosition(key), "\(dotted(key)) = \(number) is out of range (\(range.lowerBound) to \(range.upperBound))")
            return nil
        }
        return number
    }

    mutating func duration(_ key: String, range: ClosedRange<Duration>) -> Duration? {
        guard let text = string(key) else { return nil }
        switch DurationParser.parse(text) {
        case .failure(let failure):
            context.error(at: valuePosition(key), "bad duration \"\(text)\" for \(dotted(key)): \(failure.reason)")
            return nil
        case .success(let duration):
            guard range.contains(duration) else {
                context.error(at: valuePosition(key), "\(dotted(key)) = \"\(text)\" is out of range (\(range.lowerBound.compactDescription) to \(range.upperBound.compactDescription))")
                return nil
            }
            return duration
        }
    }

    mutating func absolutePath(_ key: String) -> String? {
        guard let text = string(key) else { return nil }
        guard text.hasPrefix("/") else {
            context.error(at: valuePosition(key), "\(dotted(key)) must be an absolute path, not the relative \"\(text)\"")
            return nil
        }
        // Where "/srv/in/../../etc" leads depends on symlinks met on the way: ask for the place itself.
        guard !text.split(separator: "/").contains("..") else {
            context.error(at: valuePosition(key), "\(dotted(key)) = \"\(text)\" must not contain \"..\": write the directory it should lead to")
            return nil
        }
        return text
    }

    mutating func oneOf(_ key: String, allowed: [String]) -> String? {
        guard let text = string(key) else { return nil }
        guard allowed.contains(text) else {
            context.error(at: valuePosition(key), "\(dotted(key)) = \"\(text)\" is not one of: \(allowed.joined(separator: ", "))")
            return nil
        }
        return text
    }

    func reportUnknownKeys() {
        context.noteKeysRead(knownKeys, inTable: tablePath)
        for key in table.keys where !knownKeys.contains(key) {
            var message = "unknown key \"\(key)\" in \(displayName)"
            if let suggestion = closestMatch(to: key, among: knownKeys) {
                message += "; did you mean \"\(suggestion)\"?"
            } else if !knownKeys.isEmpty {
                var seen = Set<String>()
                message += " (known keys: \(knownKeys.filter { seen.insert($0).inserted }.joined(separator: ", ")))"
            }
            context.error(at: keyPosition(key), message)
        }
    }
}

func article(_ type: TOMLType) -> String {
    switch type {
    case .string: return "a string"
    case .int: return "an integer"
    case .double: return "a floating-point number"
    case .bool: return "a boolean"
    case .date: return "a date"
    case .time: return "a time"
    case .dateTime: return "a date-time"
    case .array: return "an array"
    case .table: return "a table"
    }
}

/// A known key within two edits of a misspelt one.
func closestMatch(to word: String, among candidates: [String]) -> String? {
    func distance(_ a: [Character], _ b: [Character]) -> Int {
        var previous = Array(0...b.count)
        for (i, ca) in a.enumerated() {
            var current = [i + 1]
            for (j, cb) in b.enumerated() {
                current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (ca == cb ? 0 : 1)))
            }
            previous = current
        }
        return previous[b.count]
    }
    // The distance is at least the difference in length: skipping those candidates keeps
    // a file of thousands of long unknown keys from costing minutes.
    let letters = Array(word)
    let scored = candidates.filter { abs($0.count - letters.count) <= 2 }
        .map { ($0, distance(letters, Array($0))) }.filter { $0.1 <= 2 }
    return scored.min { $0.1 < $1.1 }?.0
}
