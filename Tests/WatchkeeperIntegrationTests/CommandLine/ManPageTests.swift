import Foundation
import WatchkeeperCore
import WatchkeeperTestSupport
import XCTest

/// The man pages and docs/configuration.md against the code: every configuration key the
/// parser accepts and every command and option of the CLI is documented, nothing that does
/// not exist is, and both pages render without a groff warning.
///
/// What counts as documented, in both directions:
/// - watchkeeper.toml(5): inside `.SH SETTINGS`, a `.SS` heading names a table by its first
///   word (`[daemon]`, `[[task]]`, `[[watch]]`, `retry`), and each `.TP` tag line under it
///   starts with its keys, `\fBkey\fR`, several separated by ", ".
/// - docs/configuration.md: a `##` heading names a table by its first code span, and each
///   table row under it whose first cell holds only code spans (`| \`key\`, \`key\` |`) lists keys.
/// - watchkeeper(8): a command is a `.TP` tag line under `.SH COMMANDS` starting with
///   `\fBname\fR`; an option is `\fB\-\-long\fR` or `\fB\-x\fR` in a `.TP` tag line.
final class ManPageTests: XCTestCase {
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    private static func text(_ relativePath: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(relativePath), encoding: .utf8)
    }

    // MARK: configuration keys

    /// The parser's keys by the name a document gives the table: the last part of its path
    /// ("task.retry" and "watch.retry" are both "retry"); the top level's keys are the tables.
    private func parserTables() -> (tables: Set<String>, keys: [String: Set<String>]) {
        var keys: [String: Set<String>] = [:]
        var tables: Set<String> = []
        for (path, names) in ConfigLoader.acceptedKeys() {
            if path.isEmpty {
                tables.formUnion(names)
            } else {
                let table = String(path.split(separator: ".").last ?? Substring(path))
                keys[table, default: []].formUnion(names)
                tables.insert(table)
            }
        }
        return (tables, keys)
    }

    private func assertSameKeys(_ documented: [String: Set<String>], in document: String,
                                file: StaticString = #filePath, line: UInt = #line) {
        let parser = parserTables()
        XCTAssertFalse(parser.keys.isEmpty, "the parser reported no keys", file: file, line: line)
        XCTAssertEqual(Set(documented.keys), parser.tables,
                       "\(document): the tables documented differ from the parser's", file: file, line: line)
        for table in parser.tables.sorted() {
            let accepted = parser.keys[table] ?? []
            let written = documented[table] ?? []
            XCTAssertEqual(accepted.subtracting(written).sorted(), [],
                           "\(document): keys of \(table) the parser accepts but the document does not describe", file: file, line: line)
            XCTAssertEqual(written.subtracting(accepted).sorted(), [],
                           "\(document): keys of \(table) the document describes but the parser refuses", file: file, line: line)
        }
    }

    func testConfigurationManPage_documentsExactlyTheKeysTheParserAccepts() throws {
        assertSameKeys(ManPageStructure.settings(inManPage: try Self.text("man/watchkeeper.toml.5")), in: "watchkeeper.toml(5)")
    }

    func testConfigurationReference_documentsExactlyTheKeysTheParserAccepts() throws {
        assertSameKeys(ManPageStructure.settings(inMarkdown: try Self.text("docs/configuration.md")), in: "docs/configuration.md")
    }

    // MARK: command line

    func testDaemonManPage_documentsEveryCommandAndOption() throws {
        let page = ManPageStructure.commandLine(inManPage: try Self.text("man/watchkeeper.8"))
        let cli = try commandLineFromBinary()
        XCTAssertFalse(cli.commands.isEmpty, "the binary's help dump named no subcommand")
        XCTAssertEqual(cli.commands.subtracting(page.commands).sorted(), [], "commands missing from watchkeeper(8)")
        XCTAssertEqual(page.commands.subtracting(cli.commands).sorted(), [], "commands in watchkeeper(8) that the binary does not have")
        XCTAssertEqual(cli.options.subtracting(page.options).sorted(), [], "options missing from watchkeeper(8)")
        XCTAssertEqual(page.options.subtracting(cli.options).sorted(), [], "options in watchkeeper(8) that the binary does not have")
    }

    /// A command's positional arguments appear on its `.TP` line under COMMANDS, as
    /// `\fBcheck\-config\fR [\fIpath\fR]`. ArgumentParser's own `help` command is not ours to name.
    func testDaemonManPage_namesEveryPositionalArgumentOnItsCommandsLine() throws {
        let page = try Self.text("man/watchkeeper.8").split(separator: "\n").map(String.init)
        let output = try run(DaemonProcess.binaryPath, ["--experimental-dump-help"])
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any])
        var checked = 0
        for command in (json["command"] as? [String: Any])?["subcommands"] as? [[String: Any]] ?? [] {
            guard let name = command["commandName"] as? String, name != "help" else { continue }
            let roffName = "\\fB" + name.replacingOccurrences(of: "-", with: "\\-") + "\\fR"
            let tagLines = page.filter { $0.hasPrefix(roffName) }
            for argument in command["arguments"] as? [[String: Any]] ?? [] where argument["kind"] as? String == "positional" {
                let value = try XCTUnwrap(argument["valueName"] as? String)
                // roff spells a hyphen in a name \- (a plain - may be set as a typographic one).
                let roffValue = value.replacingOccurrences(of: "-", with: "\\-")
                XCTAssertTrue(tagLines.contains { $0.contains("\\fI\(roffValue)\\fR") },
                              "watchkeeper(8) does not name \(name)'s argument \(value) on its line: \(tagLines)")
                checked += 1
            }
        }
        XCTAssertGreaterThan(checked, 0, "the binary reported no positional argument: the check checked nothing")
    }

    /// Subcommand names and option spellings (`--config`, `-h`) from ArgumentParser's JSON.
    private func commandLineFromBinary() throws -> (commands: Set<String>, options: Set<String>) {
        let output = try run(DaemonProcess.binaryPath, ["--experimental-dump-help"])
        XCTAssertEqual(output.status, 0, output.stderr)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any])
        var commands: Set<String> = []
        var options: Set<String> = []
        func visit(_ command: [String: Any], isRoot: Bool) {
            if !isRoot, let name = command["commandName"] as? String { commands.insert(name) }
            // Hidden arguments (help's own `-help`) are not part of the interface to document.
            for argument in command["arguments"] as? [[String: Any]] ?? [] where argument["shouldDisplay"] as? Bool != false {
                for name in argument["names"] as? [[String: Any]] ?? [] {
                    guard let kind = name["kind"] as? String, let text = name["name"] as? String else { continue }
                    options.insert(kind == "long" ? "--" + text : "-" + text)
                }
            }
            for sub in command["subcommands"] as? [[String: Any]] ?? [] { visit(sub, isRoot: false) }
        }
        visit(try XCTUnwrap(json["command"] as? [String: Any]), isRoot: true)
        return (commands, options)
    }

    // MARK: version

    /// A page that names another version than the binary it came with misleads: both
    /// headers carry the version `watchkeeper --version` reports.
    func testManPages_nameTheVersionOfTheBinary() throws {
        for page in ["man/watchkeeper.8", "man/watchkeeper.toml.5"] {
            let header = try Self.text(page).split(separator: "\n").first { $0.hasPrefix(".TH ") }
            XCTAssertTrue(header?.contains("\"watchkeeper \(WatchkeeperVersion.current)\"") ?? false,
                          "\(page): \(header ?? "no .TH line") does not name watchkeeper \(WatchkeeperVersion.current)")
        }
    }

    // MARK: rendering

    func testManPages_renderWithoutWarnings() throws {
        guard let groff = ["/usr/bin/groff", "/bin/groff"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            XCTFail("groff is not installed: `make deps` installs groff-base")
            return
        }
        for page in ["man/watchkeeper.8", "man/watchkeeper.toml.5"] {
            let path = Self.root.appendingPathComponent(page).path
            let output = try run(groff, ["-man", "-ww", "-z", path])
            XCTAssertEqual(output.status, 0, "\(page): \(output.stderr)")
            XCTAssertEqual(output.stdout + output.stderr, "", "\(page) renders with warnings")
        }
    }

    private func run(_ program: String, _ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        // Read before waiting: a full pipe would otherwise block the child forever.
        let out = stdout.fileHandleForReading.readDataToEndOfFile()
        let err = stderr.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }
}

/// Reads the structure ManPageTests relies on out of roff and Markdown source.
enum ManPageStructure {
    /// Keys by table, from `.SS` sections of `.SH SETTINGS`.
    static func settings(inManPage source: String) -> [String: Set<String>] {
        var tables: [String: Set<String>] = [:]
        var inSettings = false
        var table: String?
        var tagFollows = false
        for line in source.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix(".SH") {
                inSettings = macroArgument(line) == "SETTINGS"
                table = nil
            } else if inSettings, line.hasPrefix(".SS") {
                let name = tableName(String(macroArgument(line).split(separator: " ").first ?? ""))
                table = name
                tables[name, default: []] = tables[name] ?? []
            } else if line == ".TP" {
                tagFollows = true
                continue
            } else if tagFollows, let table {
                tables[table, default: []].formUnion(leadingBoldWords(line))
            }
            tagFollows = false
        }
        return tables
    }

    /// Keys by table, from the rows of `##` sections whose heading starts with a code span.
    static func settings(inMarkdown source: String) -> [String: Set<String>] {
        var tables: [String: Set<String>] = [:]
        var table: String?
        for line in source.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("## ") {
                let heading = line.dropFirst(3)
                if heading.hasPrefix("`"), let name = heading.dropFirst().split(separator: "`").first {
                    table = tableName(String(name))
                    tables[table!, default: []] = tables[table!] ?? []
                } else {
                    table = nil
                }
            } else if let table, line.hasPrefix("|") {
                let cells = line.split(separator: "|", omittingEmptySubsequences: false)
                guard cells.count > 2 else { continue }
                let names = cells[1].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                let keys = names.compactMap { name -> String? in
                    guard name.count > 2, name.hasPrefix("`"), name.hasSuffix("`") else { return nil }
                    return String(name.dropFirst().dropLast())
                }
                if !keys.isEmpty && keys.count == names.count { tables[table]?.formUnion(keys) }
            }
        }
        return tables
    }

    /// Commands (`.TP` tags under `.SH COMMANDS`) and options (`\fB\-\-x\fR` in any `.TP` tag).
    static func commandLine(inManPage source: String) -> (commands: Set<String>, options: Set<String>) {
        var commands: Set<String> = []
        var options: Set<String> = []
        var section = ""
        var tagFollows = false
        for line in source.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix(".SH") {
                section = macroArgument(line)
            } else if line == ".TP" {
                tagFollows = true
                continue
            } else if tagFollows {
                let words = allBoldWords(line)
                if section == "COMMANDS", let first = leadingBoldWords(line).first { commands.insert(first) }
                options.formUnion(words.filter { $0.hasPrefix("-") })
            }
            tagFollows = false
        }
        return (commands, options)
    }

    /// `[[task]]` → `task`.
    private static func tableName(_ text: String) -> String {
        text.trimmingCharacters(in: CharacterSet(charactersIn: "[]:`\""))
    }

    private static func macroArgument(_ line: String) -> String {
        line.split(separator: " ", maxSplits: 1).dropFirst().first.map {
            $0.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
        } ?? ""
    }

    /// `\fBa\fR, \fBb\fR (string)` → [a, b]: the bold words the line starts with.
    static func leadingBoldWords(_ line: String) -> [String] {
        var words: [String] = []
        var rest = Substring(line)
        while rest.hasPrefix("\\fB"), let end = rest.range(of: "\\fR") {
            words.append(unescape(rest[rest.index(rest.startIndex, offsetBy: 3)..<end.lowerBound]))
            rest = rest[end.upperBound...]
            guard rest.hasPrefix(", ") else { break }
            rest = rest.dropFirst(2)
        }
        return words
    }

    private static func allBoldWords(_ line: String) -> [String] {
        var words: [String] = []
        var rest = Substring(line)
        while let start = rest.range(of: "\\fB"), let end = rest[start.upperBound...].range(of: "\\fR") {
            words.append(unescape(rest[start.upperBound..<end.lowerBound]))
            rest = rest[end.upperBound...]
        }
        return words
    }

    /// roff's `\-` is a minus sign in the source and a hyphen in an option.
    private static func unescape(_ text: Substring) -> String {
        text.replacingOccurrences(of: "\\-", with: "-").replacingOccurrences(of: "\\&", with: "")
    }
}
