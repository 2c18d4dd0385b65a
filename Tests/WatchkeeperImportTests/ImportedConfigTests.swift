import XCTest

@testable import WatchkeeperCore
@testable import WatchkeeperImport

final class ImportedConfigTests: XCTestCase {
    private func roundTrip(_ command: String, file: StaticString = #filePath, line: UInt = #line) throws {
        var config = ImportedConfig()
        var entry = ImportedEntry(kind: .task, name: config.uniqueName(from: "job", line: 1), source: ImportSource(file: "/x\n# forged", line: 1), original: command)
        entry["manual"] = .bool(true)
        entry["shell"] = .bool(true)
        entry["command"] = .string(command)
        entry["environment"] = .table([("A B", command), ("PLAIN", "v")])
        entry.notes = ["a note with\na newline and \u{1B}[31m an escape"]
        config.entries = [entry]
        config.sources = ["/path/with\nnewline"]
        let toml = config.toml()
        let configuration = try ConfigLoader.parse(source: toml, path: "/t.toml", environment: [:]).get()
        XCTAssertEqual(configuration.tasks.first?.job.command, .shell(command), toml, file: file, line: line)
        XCTAssertEqual(configuration.tasks.first?.job.environment["A B"], command, file: file, line: line)
        // Everything from the source that lands in a comment stays in it.
        for text in toml.split(separator: "\n") where !text.hasPrefix("#") {
            XCTAssertFalse(text.contains("forged") || text.contains("newline and"), "\(text) escaped its comment", file: file, line: line)
        }
    }

    func testToml_quotesBackslashesControlsAndUnicode_loadBackAsTheSameCommand() throws {
        try roundTrip(#"echo "it's" \"quoted\" C:\path\n"#)
        try roundTrip("printf '%s' 'line one\nline two\ttab\r\u{7F}\u{01}' | cat")
        try roundTrip("echo Grüße 日本 🙂 \u{2028}")
        try roundTrip("\\")
    }

    func testUniqueName_isValidAndUnique_whateverTheCommand() {
        var config = ImportedConfig()
        var names: Set<String> = []
        for word in ["/usr/bin/backup.sh", "--weird", "../..", "", "日本", String(repeating: "x", count: 200), "a b", "a b"] {
            let name = config.uniqueName(from: word, line: 12)
            XCTAssertTrue(isValidEntryName(name), name)
            XCTAssertTrue(names.insert(name).inserted, "\(name) twice")
        }
        XCTAssertEqual(config.uniqueName(from: "backup.sh", line: 3), "backup.sh-l3")
    }
}
