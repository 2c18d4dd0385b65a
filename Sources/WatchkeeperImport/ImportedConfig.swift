// The configuration an importer builds: tasks and watch rules as ordered keys, with the
// comments that say where each came from and what could not be carried over, and the TOML
// writer that turns it into a file check-config accepts.

/// Where a source line is: `file:line` in every comment that refers to it.
import WatchkeeperCore

public struct ImportSource: Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var line: Int

    public init(file: String, line: Int) {
        self.file = file
        self.line = line
    }

    public var description: String { "\(file):\(line)" }
}

/// A value the writer knows how to spell in TOML.
public enum ImportValue: Sendable, Equatable {
    case string(String)
    case bool(Bool)
    case integer(Int)
    case strings([String])
    /// An inline table of strings, keys in the given order (`environment`).
    case table([(key: String, value: String)])

    public static func == (lhs: ImportValue, rhs: ImportValue) -> Bool {
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)): return a == b
        case (.bool(let a), .bool(let b)): return a == b
        case (.integer(let a), .integer(let b)): return a == b
        case (.strings(let a), .strings(let b)): return a == b
        case (.table(let a), .table(let b)): return a.map(\.key) == b.map(\.key) && a.map(\.value) == b.map(\.value)
        default: return false
        }
    }
}

/// One `[[task]]` or `[[watch]]`.
public struct ImportedEntry: Sendable {
    public enum Kind: String, Sendable { case task, watch }

    public var kind: Kind
    public var name: String
    public var source: ImportSource
    /// The source text the entry was made from, shown above it.
    public var original: String
    /// Keys after `name`, in order.
    public var keys: [(key: String, value: ImportValue)] = []
    /// What behaves differently from the source, one comment line each.
    public var notes: [String] = []
    /// The source's own schedule, for `import --check`.
    public var origin: ScheduleOrigin = .none

    public init(kind: Kind, name: String, source: ImportSource, original: String) {
        self.kind = kind
        self.name = name
        self.source = source
        self.original = original
    }

    public subscript(key: String) -> ImportValue? {
        get { keys.first { $0.key == key }?.value }
        set {
            if let index = keys.firstIndex(where: { $0.key == key }) {
                if let newValue { keys[index].value = newValue } else { keys.remove(at: index) }
            } else if let newValue {
                keys.append((key, newValue))
            }
        }
    }
}

/// A schedule as the source wrote it, so that `--check` can compute its fires by the
/// source's own rules.
public enum ScheduleOrigin: Sendable, Equatable {
    case none
    /// The five cron fields or an @-word, read in a zone by cronie (nil: the machine's),
    /// by the rules of that cron.
    case cron(String, timezone: String?, cron: CronFlavor)
    /// `OnCalendar=` values of a timer.
    case systemdCalendar([String])
}

/// A source line that became nothing, and why.
public struct UntranslatedLine: Sendable, Equatable {
    public var source: ImportSource
    public var text: String
    public var reason: String

    public init(source: ImportSource, text: String, reason: String) {
        self.source = source
        self.text = text
        self.reason = reason
    }
}

/// A file the cron being left reads nothing of (a line it cannot read, a missing final
/// newline, its name, owner or mode): its jobs never ran there.
public struct IgnoredFile: Sendable, Equatable {
    public var file: String
    public var reason: String
    /// Which cron, as the output names it.
    public var cron: String
    /// Its entries were translated all the same (without --as-cron-runs).
    public var translated: Bool
    /// How many entries it has.
    public var entries: Int

    /// One sentence, for the header and --check.
    public var sentence: String {
        let what = "\(cron) ignores \(file) as a whole: \(reason); none of its \(entries) entr\(entries == 1 ? "y" : "ies") ran under cron"
        return translated
            ? what + ". They are translated all the same and WILL run under watchkeeper (--as-cron-runs translates nothing from such a file)."
            : what + ". Nothing of it is translated (--as-cron-runs)."
    }
}

public struct ImportedConfig: Sendable {
    /// The files read, as given.
    public var sources: [String] = []
    /// Said once at the top (facts about the importing machine, general differences).
    public var notes: [String] = []
    public var entries: [ImportedEntry] = []
    public var untranslated: [UntranslatedLine] = []
    public var ignoredFiles: [IgnoredFile] = []
    private var usedNames: Set<String> = []

    public init() {}

    /// A valid, unique entry name from a word of the source (a program, a unit) and its line:
    /// letters, digits, `.`, `_`, `-`, starting with a letter or digit, at most 64 characters.
    public mutating func uniqueName(from word: String, line: Int?) -> String {
        var stem = ""
        for scalar in word.unicodeScalars {
            if scalar.isASCII, scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || scalar == "." || scalar == "_" || scalar == "-" {
                stem.unicodeScalars.append(scalar)
            } else if !stem.hasSuffix("-") {
                stem += "-"
            }
        }
        while let first = stem.unicodeScalars.first, !(first.properties.isAlphabetic || ("0"..."9").contains(first)) {
            stem.unicodeScalars.removeFirst()
        }
        if stem.isEmpty { stem = "job" }
        let suffix = line.map { "-l\($0)" } ?? ""
        stem = String(stem.prefix(64 - suffix.count - 4))
        var name = stem + suffix
        var counter = 2
        while usedNames.contains(name) {
            name = stem + suffix + "-\(counter)"
            counter += 1
        }
        usedNames.insert(name)
        return name
    }

    // MARK: - Writing

    /// The whole file: a header naming the sources, the general notes, the entries each with
    /// its source and notes, and at the end every untranslated line with its reason.
    public func toml() -> String {
        var out = "# Imported by `watchkeeper import` from:\n"
        for source in sources { out += "#   \(Self.commentText(source))\n" }
        for ignored in ignoredFiles { out += Self.comment("WARNING: " + ignored.sentence) }
        for note in notes { out += Self.comment(note) }
        out += "# Check it with `watchkeeper check-config FILE` and review every NOTE before use.\n"
        for entry in entries {
            out += "\n# from \(Self.commentText(entry.source.description)): \(Self.commentText(entry.original))\n"
            for note in entry.notes { out += Self.comment("NOTE: " + note) }
            out += "[[\(entry.kind.rawValue)]]\n"
            out += "name = \(Self.quoted(entry.name))\n"
            for (key, value) in entry.keys {
                out += "\(key) = \(Self.render(value))\n"
            }
        }
        if !untranslated.isEmpty {
            out += "\n# Not translated:\n"
            for line in untranslated {
                out += "# \(Self.commentText(line.source.description)): \(Self.commentText(line.text))\n"
                out += Self.comment("  -> " + line.reason)
            }
        }
        return out
    }

    static func render(_ value: ImportValue) -> String {
        switch value {
        case .string(let text): return quoted(text)
        case .bool(let flag): return flag ? "true" : "false"
        case .integer(let number): return String(number)
        case .strings(let items): return "[" + items.map(quoted).joined(separator: ", ") + "]"
        case .table(let pairs):
            return "{ " + pairs.map { "\(key($0.key)) = \(quoted($0.value))" }.joined(separator: ", ") + " }"
        }
    }

    /// A key bare when TOML allows it (A-Z a-z 0-9 _ -), quoted otherwise.
    static func key(_ text: String) -> String {
        let bare = !text.isEmpty && text.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_" || $0 == "-")
        }
        return bare ? text : quoted(text)
    }

    /// A TOML basic string: `"` and `\` escaped, control characters (U+0000-U+001F, U+007F)
    /// as `\n`, `\t`, `\r`, `\b`, `\f` or `\uXXXX`; everything else, non-ASCII included, as is.
    public static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F || isInvisible(scalar) {
                    out += escape(scalar)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    /// Format characters (a byte-order mark, zero-width spaces, bidi overrides) show as
    /// nothing or reorder the text around them: written as `\uXXXX` wherever shown.
    static func isInvisible(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.generalCategory == .format
    }

    /// `\uXXXX`, or TOML's `\UXXXXXXXX` beyond the first plane.
    private static func escape(_ scalar: Unicode.Scalar) -> String {
        let digits = String(scalar.value, radix: 16, uppercase: true)
        let width = scalar.value > 0xFFFF ? 8 : 4
        return (width == 8 ? "\\U" : "\\u") + String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    /// Comment text stays on its line: TOML allows no control character but tab in a
    /// comment, and a newline would end it; other text from the source is kept as is.
    static func commentText(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            default:
                if (scalar.value < 0x20 && scalar != "\t") || scalar.value == 0x7F || isInvisible(scalar) {
                    out += escape(scalar)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }

    /// A note as comment lines, wrapped at about 100 columns.
    static func comment(_ text: String) -> String {
        var out = ""
        var line = "#"
        for word in commentText(text).split(separator: " ", omittingEmptySubsequences: false) {
            if line.count + word.count + 1 > 100 && line != "#" && line != "#   " {
                out += line + "\n"
                line = "#  "
            }
            line += " " + word
        }
        return out + line + "\n"
    }
}
