import Foundation
import XCTest

/// docs/architecture.md is the map a newcomer reads first; these checks keep it true as the
/// code moves: every folder of the core has its row in the layout table and every row names
/// a folder that exists; every file it names exists; every type a row lists is declared
/// somewhere in Sources, and every `+Duty` it lists is a file of that folder. The check is
/// textual and rough, like RawErrnoTests: it reads the Markdown, not the Swift grammar.
final class ArchitectureDocumentTests: XCTestCase {
    static let root = RawErrnoTests.repositoryRoot
    static let core = root.appendingPathComponent("Sources/WatchkeeperCore")

    private func document() throws -> String {
        try String(contentsOf: Self.root.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
    }

    /// `| \`Folder/\` | text |` rows of the layout table, as (folder, text).
    private func layoutRows() throws -> [(folder: String, text: String)] {
        try document().split(separator: "\n").compactMap { line in
            guard let match = line.firstMatch(of: /^\| `([A-Za-z]+)\/` \| (.*) \|$/) else { return nil }
            return (String(match.1), String(match.2))
        }
    }

    func testEveryFolderOfTheCore_hasItsRow_andEveryRowItsFolder() throws {
        let folders = try FileManager.default.contentsOfDirectory(atPath: Self.core.path).filter {
            var directory: ObjCBool = false
            return FileManager.default.fileExists(atPath: Self.core.appendingPathComponent($0).path, isDirectory: &directory) && directory.boolValue
        }
        let rows = try layoutRows().map(\.folder)
        XCTAssertGreaterThan(rows.count, 10, "the layout table was not found")
        XCTAssertEqual(Set(folders).subtracting(rows).sorted(), [], "folders of Sources/WatchkeeperCore without a row in the layout table")
        XCTAssertEqual(Set(rows).subtracting(folders).sorted(), [], "rows of the layout table without a folder")
    }

    func testEveryFileTheDocumentNames_exists() throws {
        let text = try document()
        var missing: [String] = []
        for match in text.matches(of: /(?:^|[^\w\/.-])((?:[A-Za-z0-9_.-]+\/)*[A-Za-z0-9_+.-]+\.(?:swift|c|h|py|sh|md|toml|conf|service))(?![\w\/])/.anchorsMatchLineEndings()) {
            let name = String(match.1)
            if name.hasPrefix("http") || name.hasPrefix(".") { continue }
            if !Self.exists(name) { missing.append(name) }
        }
        XCTAssertEqual(missing, [], "files docs/architecture.md names that are not in the repository")
    }

    func testEveryTypeARowLists_isDeclared_andEveryDutyIsAFileOfItsFolder() throws {
        let declared = try Self.declaredNames()
        var problems: [String] = []
        for (folder, text) in try layoutRows() {
            var listed: [String] = []
            for match in text.matches(of: /`([A-Z][A-Za-z0-9]+)\+[A-Z][A-Za-z0-9]+`|`\+?([A-Z][A-Za-z0-9]+)`|\+ ?`\+?([A-Z][A-Za-z0-9]+)`/) {
                let whole = String(match.0)
                if let owner = match.1 {
                    // `Type+Duty`: that file, in this folder.
                    let file = Self.core.appendingPathComponent("\(folder)/\(whole.dropFirst().dropLast()).swift").path
                    if !FileManager.default.fileExists(atPath: file) { problems.append("\(folder): \(whole) is not a file of the folder") }
                    listed.append(String(owner))
                    continue
                }
                let name = String(match.2 ?? match.3 ?? "")
                let isDuty = whole.hasPrefix("`+") || whole.hasPrefix("+`+") || whole.hasPrefix("+ `+")
                if isDuty {
                    // A duty belongs to one of the types listed before it in the row.
                    let owner = listed.reversed().first {
                        FileManager.default.fileExists(atPath: Self.core.appendingPathComponent("\(folder)/\($0)+\(name).swift").path)
                    }
                    if owner == nil { problems.append("\(folder): +\(name) is a file of none of the types listed before it") }
                } else {
                    if !declared.contains(name) { problems.append("\(folder): `\(name)` is declared nowhere in Sources or Tests") }
                    listed.append(name)
                }
            }
        }
        XCTAssertEqual(problems, [], "the layout table lists what the code does not have")
    }

    /// The size rule as the document states it ("No Swift file is over about 500 lines,
    /// except the three parsers (`A`, `B`, `C`)"), checked on every Swift file of Sources:
    /// the number and the exceptions are read from the document, so changing the rule means
    /// changing the text a newcomer reads.
    func testNoSourceFileOverTheSizeRule() throws {
        let text = try document().replacingOccurrences(of: "\n", with: " ")
        guard let rule = text.firstMatch(of: /No Swift file is over (?:about )?(\d+) lines, except the \w+ parsers \(([^)]*)\)/),
              let limit = Int(rule.1) else {
            return XCTFail("docs/architecture.md states no size rule (\"No Swift file is over N lines, except the ... parsers (...)\")")
        }
        let exceptions = Set(rule.2.matches(of: /`([A-Za-z0-9+]+)`/).map { String($0.1) + ".swift" })
        XCTAssertFalse(exceptions.isEmpty, "the size rule names no exceptions")
        var over: [String] = []
        let sources = Self.root.appendingPathComponent("Sources")
        guard let walker = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil) else {
            return XCTFail("unable to list \(sources.path)")
        }
        for case let url as URL in walker where url.pathExtension == "swift" && !exceptions.contains(url.lastPathComponent) {
            let lines = try String(contentsOf: url, encoding: .utf8).reduce(into: 0) { count, character in
                if character == "\n" { count += 1 }
            }
            if lines > limit { over.append("\(url.path.dropFirst(Self.root.path.count + 1)) (\(lines) lines)") }
        }
        XCTAssertEqual(over.sorted(), [], "Swift files in Sources over the \(limit) lines docs/architecture.md allows")
        for name in exceptions {
            let found = FileManager.default.enumerator(atPath: sources.path)?.contains { ($0 as? String)?.hasSuffix("/" + name) ?? false } ?? false
            XCTAssertTrue(found, "the size rule excepts \(name), which is no file of Sources")
        }
    }

    /// A path as the document writes it: from the repository root, from the core, or a
    /// file name alone, which must exist somewhere under Sources, Tests or docs.
    private static func exists(_ name: String) -> Bool {
        let bases = [root, core, root.appendingPathComponent("docs"), root.appendingPathComponent("Sources")]
        if bases.contains(where: { FileManager.default.fileExists(atPath: $0.appendingPathComponent(name).path) }) { return true }
        guard !name.contains("/") else { return false }
        return ["Sources", "Tests", "docs", "systemd", "etc", "Tests/reliability"].contains { top in
            guard let walker = FileManager.default.enumerator(atPath: root.appendingPathComponent(top).path) else { return false }
            return walker.contains { ($0 as? String).map { $0 == name || $0.hasSuffix("/" + name) } ?? false }
        }
    }

    /// Every type, protocol and file base name of Sources and Tests (all targets).
    private static func declaredNames() throws -> Set<String> {
        var names: Set<String> = []
        for top in ["Sources", "Tests"] {
            guard let walker = FileManager.default.enumerator(at: root.appendingPathComponent(top), includingPropertiesForKeys: nil) else { continue }
            for case let url as URL in walker where ["swift", "c", "h"].contains(url.pathExtension) {
                names.insert(url.deletingPathExtension().lastPathComponent)
                let text = try String(contentsOf: url, encoding: .utf8)
                for match in text.matches(of: /(?:class|struct|enum|protocol|actor|typealias|extension)\s+(?:[A-Z]\w*\.)?([A-Z]\w*)/) {
                    names.insert(String(match.1))
                }
            }
        }
        return names
    }
}
