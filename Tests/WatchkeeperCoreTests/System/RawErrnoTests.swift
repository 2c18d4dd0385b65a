import Foundation
import XCTest

/// errno is read in one place: Sources/WatchkeeperCore/System/ (valueOrErrno and its
/// siblings). Everywhere else a syscall goes through that layer and gets a typed `Errno`,
/// with EINTR retried on purpose. A raw read elsewhere is how the old bugs came back: errno
/// read after another call (a close, a log line) had changed it, an EINTR loop forgotten,
/// a failure dropped because the caller could not see it.
///
/// The check is textual and rough on purpose: comments and string literals are blanked,
/// then every bare `errno` is reported, unless it follows a `.` (a property or key path:
/// `failure.errno`, `\.errno`) or a `:` follows it (a label or a declaration:
/// `SystemCallError(call:errno:)`, `let errno: Errno`).
final class RawErrnoTests: XCTestCase {
    func testNoRawErrnoReadOutsideSystem() throws {
        let sources = Self.repositoryRoot.appendingPathComponent("Sources/WatchkeeperCore")
        let system = sources.appendingPathComponent("System").path + "/"
        let files = try Self.swiftFiles(under: sources).filter { !$0.path.hasPrefix(system) }
        XCTAssertGreaterThan(files.count, 50, "the sources were not found under \(sources.path)")

        let reads = try Self.lines(of: files, where: Self.readsErrno).map { "\($0.file):\($0.line): \($0.text)" }
        XCTAssertTrue(reads.isEmpty, """
            errno read outside Sources/WatchkeeperCore/System/: wrap the call in valueOrErrno, \
            nothingOrErrno, systemCall or pointerOrErrno (or add a helper to System/):
            \(reads.joined(separator: "\n"))
            """)
    }

    func testTheCheckSeesRawReadsAndNothingElse() {
        XCTAssertTrue(Self.readsErrno("if count < 0 && errno == EINTR { continue }"))
        XCTAssertTrue(Self.readsErrno("let number = errno"))
        XCTAssertTrue(Self.readsErrno("errno = 0"))
        XCTAssertTrue(Self.readsErrno("throw failure(errno)"))
        XCTAssertFalse(Self.readsErrno("readFileBytes(path).mapError(\\.errno)"))
        XCTAssertFalse(Self.readsErrno("failure.errno == .fileExists"))
        XCTAssertFalse(Self.readsErrno("SystemCallError(call: \"open\", errno: error)"))
        XCTAssertFalse(Self.readsErrno("    let errno: Errno"))
        XCTAssertFalse(Self.readsErrno("let errnoName = 1"))

        let blanked = Self.blankingCommentsAndStrings("""
            a // errno in a comment
            /* errno in a /* nested */ block
            comment */ b
            let s = "errno in a string \\(errno) \\" still"
            let t = \"\"\"
                errno in a multi-line string
                \"\"\"
            c
            """)
        XCTAssertFalse(blanked.contains("errno"), blanked)
        XCTAssertEqual(blanked.split(separator: "\n", omittingEmptySubsequences: false).count, 8, "line numbers are kept")
        XCTAssertTrue(blanked.contains("a") && blanked.contains("b") && blanked.contains("c"))
    }

    // MARK: The rough Swift lexer

    /// The lines of `files` whose code (comments and strings blanked) `matches`: each with its
    /// file relative to the repository, its number and its original text.
    static func lines(of files: [URL], where matches: (String) -> Bool) throws -> [(file: String, line: Int, text: String)] {
        var found: [(file: String, line: Int, text: String)] = []
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            let code = blankingCommentsAndStrings(text).split(separator: "\n", omittingEmptySubsequences: false)
            let original = text.split(separator: "\n", omittingEmptySubsequences: false)
            let relative = String(file.path.dropFirst(repositoryRoot.path.count + 1))
            for (index, line) in code.enumerated() where matches(String(line)) {
                found.append((relative, index + 1, original[index].trimmingCharacters(in: .whitespaces)))
            }
        }
        return found
    }

    /// The repository root, from this file's path: Tests/WatchkeeperCoreTests/System/.
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func swiftFiles(under directory: URL) throws -> [URL] {
        guard let walker = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil) else { return [] }
        return walker.compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" }.sorted { $0.path < $1.path }
    }

    /// A bare `errno`: not part of a longer name, not after `.`, not before `:`.
    static func readsErrno(_ line: String) -> Bool {
        line.range(of: #"(?<![.\w$])errno(?![\w])(?!\s*:)"#, options: .regularExpression) != nil
    }

    /// `text` with `//` and `/* */` comments and string literals (with their
    /// interpolations) replaced by spaces; newlines stay, so line numbers do too. Rough:
    /// raw strings are treated as ordinary ones, which is enough for these sources.
    static func blankingCommentsAndStrings(_ text: String) -> String {
        let characters = Array(text)
        var output = ""
        output.reserveCapacity(characters.count)
        var index = 0
        func at(_ offset: Int) -> Character? {
            index + offset < characters.count ? characters[index + offset] : nil
        }
        func blank(_ character: Character) {
            output.append(character == "\n" ? "\n" : " ")
        }
        while index < characters.count {
            let character = characters[index]
            if character == "/" && at(1) == "/" {
                while index < characters.count && characters[index] != "\n" { blank(characters[index]); index += 1 }
            } else if character == "/" && at(1) == "*" {
                var depth = 0
                repeat {
                    if characters[index] == "/" && at(1) == "*" {
                        depth += 1; blank("/"); blank("*"); index += 2
                    } else if characters[index] == "*" && at(1) == "/" {
                        depth -= 1; blank("*"); blank("/"); index += 2
                    } else {
                        blank(characters[index]); index += 1
                    }
                } while depth > 0 && index < characters.count
            } else if character == "\"" {
                let multiLine = at(1) == "\"" && at(2) == "\""
                let quotes = multiLine ? 3 : 1
                for _ in 0..<quotes { blank("\""); index += 1 }
                // To the closing quote(s), skipping escapes; an interpolation's parentheses
                // are counted so that a string inside it does not end this one.
                var parentheses = 0
                while index < characters.count {
                    let next = characters[index]
                    if next == "\\" {
                        blank(next); index += 1
                        if index < characters.count {
                            if characters[index] == "(" { parentheses += 1 }
                            blank(characters[index]); index += 1
                        }
                        continue
                    }
                    if parentheses > 0 {
                        if next == "(" { parentheses += 1 }
                        if next == ")" { parentheses -= 1 }
                    } else if next == "\"" && (!multiLine || (at(1) == "\"" && at(2) == "\"")) {
                        for _ in 0..<quotes { blank("\""); index += 1 }
                        break
                    } else if next == "\n" && !multiLine {
                        break
                    }
                    blank(next); index += 1
                }
            } else {
                output.append(character)
                index += 1
            }
        }
        return output
    }
}
