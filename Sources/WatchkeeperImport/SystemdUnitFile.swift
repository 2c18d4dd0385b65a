// Unit files and their command lines as systemd reads them (systemd.syntax(7),
// systemd.service(5) "Command lines"), for the importer.

/// A unit file as systemd reads it: sections of `Key=value` lines, `#` and `;` comments,
/// a trailing backslash continuing a line.
import WatchkeeperCore

struct UnitFile {
    struct Setting {
        var section: String
        var key: String
        var value: String
        var line: Int
        var text: String
    }

    var path: String
    var name: String
    var settings: [Setting] = []

    init(path: String, text: String) {
        self.path = path
        name = path.split(separator: "/").last.map(String.init) ?? path
        var section = ""
        var pending: (text: String, line: Int)? = nil
        // systemd reads CR LF as a line end and skips a byte-order mark (conf-parser.c).
        for sourceLine in SourceLines(text).lines {
            let index = sourceLine.number - 1
            var line = sourceLine.text
            if pending == nil {
                let trimmed = Substring(line).trimmingBlanks()
                if trimmed.isEmpty || trimmed.hasPrefix("#") || trimmed.hasPrefix(";") { continue }
            }
            if line.hasSuffix("\\") {
                line.removeLast()
                pending = ((pending?.text ?? "") + line + " ", pending?.line ?? index + 1)
                continue
            }
            let whole = (pending?.text ?? "") + line
            let number = pending?.line ?? index + 1
            pending = nil
            let trimmed = Substring(whole).trimmingBlanks()
            if trimmed.hasPrefix("[") && trimmed.hasSuffix("]") {
                section = String(trimmed.dropFirst().dropLast())
                continue
            }
            guard let equals = trimmed.firstIndex(of: "=") else {
                settings.append(Setting(section: section, key: "", value: trimmed, line: number, text: trimmed))
                continue
            }
            settings.append(Setting(section: section, key: Substring(trimmed[..<equals]).trimmingBlanks(),
                                    value: Substring(trimmed[trimmed.index(after: equals)...]).trimmingBlanks(), line: number, text: trimmed))
        }
    }

    /// Values of a list setting: an empty assignment resets what came before.
    func list(_ section: String, _ key: String) -> [Setting] {
        var values: [Setting] = []
        for setting in settings where setting.section == section && setting.key == key {
            if setting.value.isEmpty { values.removeAll() } else { values.append(setting) }
        }
        return values
    }

    func last(_ section: String, _ key: String) -> Setting? {
        settings.last { $0.section == section && $0.key == key }
    }

    var stem: String { name.split(separator: ".").dropLast().joined(separator: ".") }
}

extension UnitFile {
    static func fileStem(_ path: String) -> String {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        return name.split(separator: ".").dropLast().joined(separator: ".")
    }
}

struct ExecProblem: Error { let text: String }

/// One `ExecStart=` line: its prefixes, and its words with the variables and specifiers
/// systemd would replace.
struct ExecCommand {
    var ignoreFailure = false
    var elevated = false
    var noExpansion = false
    var argumentZero: String? = nil
    /// Literal words (variables left as written): for an argument array when there are none.
    var arguments: [String] = []
    /// The same command for /bin/sh: literal parts quoted, `${NAME}` as one word ("${NAME}"),
    /// `$NAME` alone split on blanks as systemd does.
    var shellText = ""
    var usesVariables = false

    static func parse(_ value: String, unitName: String) -> Result<ExecCommand, ExecProblem> {
        var command = ExecCommand()
        var text = Substring(value)
        while let first = text.first, "-@:+!".contains(first) {
            switch first {
            case "-": command.ignoreFailure = true
            case "+", "!": command.elevated = true
            case ":": command.noExpansion = true
            default: command.argumentZero = ""
            }
            text = text.dropFirst()
        }
        guard var words = words(String(text)), !words.isEmpty else { return .failure(ExecProblem(text: "unable to read the command line (unbalanced quotes)")) }
        if command.argumentZero != nil, words.count >= 2 {
            command.argumentZero = words.remove(at: 1)
        }
        let stem = unitName.split(separator: ".").dropLast().joined(separator: ".")
        var shellWords: [String] = []
        for word in words {
            // Specifiers first (systemd.unit(5)); those that need the running manager are refused.
            var expanded = ""
            var characters = Array(word)[...]
            while let character = characters.first {
                characters = characters.dropFirst()
                guard character == "%" else { expanded.append(character); continue }
                guard let specifier = characters.first else { return .failure(ExecProblem(text: "a lone % at the end of \"\(word)\"")) }
                characters = characters.dropFirst()
                switch specifier {
                case "%": expanded += "%"
                case "n": expanded += unitName
                case "N", "p": expanded += stem
                case "i", "I": expanded += ""
                default: return .failure(ExecProblem(text: "the specifier %\(specifier) depends on the running service manager and has no translation"))
                }
            }
            if expanded.contains("$") && !command.noExpansion {
                command.usesVariables = true
                shellWords.append(shellWord(expanded))
            } else {
                shellWords.append(ShellQuoting.quote(expanded))
            }
            command.arguments.append(expanded)
        }
        command.shellText = shellWords.joined(separator: " ")
        return .success(command)
    }

    /// `$NAME` as a whole word stays unquoted (split, like systemd's); `${NAME}` and any
    /// variable inside other text are double-quoted; `$$` is a literal `$`.
    static func shellWord(_ word: String) -> String {
        if word.hasPrefix("$"), !word.hasPrefix("${"), !word.hasPrefix("$$"), word.dropFirst().allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) {
            return word
        }
        var out = ""
        var literal = ""
        var characters = Array(word)[...]
        func flush() {
            if !literal.isEmpty { out += ShellQuoting.quote(literal) }
            literal = ""
        }
        while let character = characters.first {
            characters = characters.dropFirst()
            if character == "$" {
                if characters.first == "$" { literal += "$"; characters = characters.dropFirst(); continue }
                var name = ""
                if characters.first == "{" {
                    characters = characters.dropFirst()
                    while let next = characters.first, next != "}" { name.append(next); characters = characters.dropFirst() }
                    characters = characters.dropFirst()
                } else {
                    while let next = characters.first, next.isLetter || next.isNumber || next == "_" { name.append(next); characters = characters.dropFirst() }
                }
                if name.isEmpty { literal += "$"; continue }
                flush()
                out += "\"${\(name)}\""
                continue
            }
            literal.append(character)
        }
        flush()
        return out.isEmpty ? "''" : out
    }

    /// systemd's word splitting: blanks separate words, "..." and '...' quote, backslash
    /// escapes (C escapes and a quoted quote); nil for an unbalanced quote.
    static func words(_ text: String) -> [String]? {
        var words: [String] = []
        var current = ""
        var inWord = false
        var quote: Character? = nil
        var characters = Array(text)[...]
        while let character = characters.first {
            characters = characters.dropFirst()
            if character == "\\", let next = characters.first {
                characters = characters.dropFirst()
                inWord = true
                switch next {
                case "n": current += "\n"
                case "t": current += "\t"
                case "r": current += "\r"
                case "s": current += " "
                default: current.append(next)
                }
                continue
            }
            if let open = quote {
                if character == open { quote = nil } else { current.append(character) }
                continue
            }
            if character == "\"" || character == "'" {
                quote = character
                inWord = true
                continue
            }
            if character == " " || character == "\t" {
                if inWord { words.append(current) }
                current = ""
                inWord = false
                continue
            }
            current.append(character)
            inWord = true
        }
        guard quote == nil else { return nil }
        if inWord { words.append(current) }
        return words
    }
}
