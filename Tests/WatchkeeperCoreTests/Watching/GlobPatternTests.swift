import XCTest

@testable import WatchkeeperCore

/// Pins the glob syntax of `[[watch]]` include and exclude lists: what each pattern matches
/// and does not, its error messages and columns, how include and exclude combine, which
/// directories recursive watching may skip, and that no pattern backtracks exponentially.
final class GlobPatternTests: XCTestCase {
    private func pattern(_ text: String, line: UInt) -> GlobPattern? {
        do {
            return try GlobPattern(text)
        } catch {
            XCTFail("\"\(text)\" was refused: \(error.message) (column \(error.column))", line: line)
            return nil
        }
    }

    private func patterns(_ texts: [String], line: UInt = #line) -> [GlobPattern] {
        texts.compactMap { pattern($0, line: line) }
    }

    /// Each case lists paths the pattern must match and paths it must not.
    private typealias MatchCase = (pattern: String, matching: [String], notMatching: [String], line: UInt)

    private func check(_ cases: [MatchCase]) {
        for testCase in cases {
            guard let glob = pattern(testCase.pattern, line: testCase.line) else { continue }
            for path in testCase.matching {
                XCTAssertTrue(glob.matches(path), "\"\(testCase.pattern)\" should match \"\(path)\"", line: testCase.line)
            }
            for path in testCase.notMatching {
                XCTAssertFalse(glob.matches(path), "\"\(testCase.pattern)\" should not match \"\(path)\"", line: testCase.line)
            }
        }
    }

    // MARK: - Wildcards within a component

    func testLiteral_matchesOnlyTheSamePath() {
        check([
            ("data.csv", ["data.csv"], ["data.cs", "data.csvx", "xdata.csv", "Data.csv", "dir/data.csv", ""], #line),
            ("incoming/data.csv", ["incoming/data.csv"], ["incoming", "data.csv", "incoming/data.csv/x"], #line),
            ("café/é.txt", ["café/é.txt"], ["cafe/e.txt"], #line),
        ])
    }

    func testStar_matchesAnyRunWithinOneComponent_includingNone() {
        check([
            ("*", ["a", "abc", ".hidden", "a.b.c"], ["a/b", ""], #line),
            ("*.csv", ["a.csv", ".csv", "x.y.csv"], ["a.csv.tmp", "a.CSV", "a.tsv", "dir/a.csv"], #line),
            ("report-*.csv", ["report-.csv", "report-2024-01.csv"], ["report.csv", "report-1.json"], #line),
            ("a*b*c", ["abc", "aXbYc", "abbbc", "acbc"], ["ab", "acb", "aXbYcZ"], #line),
            ("incoming/*.json", ["incoming/a.json", "incoming/.json"], ["incoming/x/a.json", "a.json", "incoming/a.json5"], #line),
            ("*/*.csv", ["x/a.csv"], ["a.csv", "x/y/a.csv"], #line),
            // A run of stars is one star.
            ("a***b", ["ab", "aXYb"], ["a/b"], #line),
        ])
    }

    func testQuestionMark_matchesExactlyOneCharacter_neverSlash() {
        check([
            ("?", ["a", ".", "é", "€", "😀"], ["", "ab", "/"], #line),
            ("file?.txt", ["file1.txt", "fileé.txt"], ["file.txt", "file12.txt"], #line),
            ("a?b", ["aXb"], ["a/b", "ab"], #line),
            ("??", ["ab", "éé", "éa"], ["a", "abc"], #line),
            // "*" gives up whole characters too, never the tail bytes of one to what follows.
            ("*??", ["ab", "a€", "xyz"], ["€", "😀", "é"], #line),
            ("*[!c][!c]c", ["abc", "a€c", "€€c"], ["€c", "😀c", "éc"], #line),
        ])
    }

    func testCharacterClass_matchesOneCharacterInOrOutOfTheSet() {
        check([
            ("[abc]", ["a", "b", "c"], ["d", "ab", "", "A"], #line),
            ("[a-z]", ["a", "m", "z"], ["A", "0", "-"], #line),
            ("[a-cx-z0-9]", ["b", "y", "5"], ["d", "w"], #line),
            ("[!a-z]", ["A", "0", ".", "é"], ["a", "q", "z"], #line),
            ("[^a-z]", ["A", "0"], ["a", "z"], #line),
            ("log[0-9].txt", ["log1.txt"], ["log.txt", "log10.txt", "loga.txt"], #line),
            ("a[!x]b", ["aYb"], ["axb", "a/b", "ab"], #line),
            // Members and ranges are characters, not bytes.
            ("[é]", ["é"], ["e", "Ã"], #line),
            ("[α-ω]", ["α", "λ", "ω"], ["a", "Ω"], #line),
            ("[!é]", ["e", "Ã"], ["é"], #line),
        ])
    }

    func testCharacterClass_edgeCases_closingBracketAndDashAreMembersWhereTheyCannotBeSyntax() {
        check([
            // A "]" first is a member, not the end of an empty class.
            ("[]]", ["]"], ["[", "[]"], #line),
            ("[]a]", ["]", "a"], ["b"], #line),
            ("[!]]", ["a", "["], ["]"], #line),
            ("[^]]", ["a"], ["]"], #line),
            // A "-" first or last is a member.
            ("[a-]", ["a", "-"], ["b", "]"], #line),
            ("[-a]", ["a", "-"], ["b"], #line),
            ("[!a-]", ["b"], ["a", "-"], #line),
            // Escapes work inside a class.
            ("[\\]x]", ["]", "x"], ["\\"], #line),
            ("[\\-a]", ["-", "a"], ["\\"], #line),
            ("[\\!a]", ["!", "a"], ["b"], #line),
            ("[*?]", ["*", "?"], ["a"], #line),
            // "[" inside a class is an ordinary member when it does not start "[:name:]".
            ("[[]", ["["], ["]"], #line),
            ("[[:]", ["[", ":"], ["a"], #line),
        ])
    }

    func testEscape_matchesTheNextCharacterLiterally() {
        check([
            ("\\*", ["*"], ["a", "**"], #line),
            ("a\\*b", ["a*b"], ["ab", "aXb"], #line),
            ("\\?", ["?"], ["a"], #line),
            ("\\[abc]", ["[abc]"], ["a"], #line),
            ("a\\\\b", ["a\\b"], ["ab", "a\\\\b"], #line),
            ("\\a", ["a"], ["\\a"], #line),
            // Escaped stars make a literal component, not a globstar.
            ("\\*\\*/x", ["**/x"], ["x", "a/x"], #line),
        ])
    }

    // MARK: - Globstar

    func testGlobstar_asAWholeComponent_matchesZeroOrMoreComponents() {
        check([
            ("**/*.csv", ["a.csv", "x/a.csv", "x/y/a.csv", ".git/a.csv"], ["a.tsv", "x/a.csv/y", "x/a.tsv"], #line),
            ("a/**/b", ["a/b", "a/x/b", "a/x/y/b", "a/b/b"], ["a", "b", "a/b/c", "x/a/b", "ab"], #line),
            ("**/b", ["b", "a/b", "a/b/b"], ["a", "b/a", "ab"], #line),
            ("**/**/b", ["b", "a/b", "a/c/b"], ["a"], #line),
            ("a/**/**/b", ["a/b", "a/x/b", "a/x/y/b"], ["a"], #line),
            ("**/.git/**", [".git/config", "x/.git/HEAD", "x/.git/refs/heads/main"], [".git", "x/.git", "x/git/HEAD"], #line),
        ])
    }

    func testTrailingGlobstar_matchesEverythingUnderButNotTheDirectoryItself() {
        check([
            ("a/**", ["a/x", "a/x/y", "a/.hidden", "a/x/y/z.csv"], ["a", "b/x", "ab/x", "x/a/y"], #line),
            ("**", ["a", "a/b", ".x/y/z"], [""], #line),
            ("a/*/**", ["a/x/y", "a/x/y/z"], ["a", "a/x"], #line),
        ])
    }

    func testGlobstarInsideAComponent_behavesLikeStar() {
        check([
            ("a**b", ["ab", "aXb", "aXYb"], ["a/b", "aX/Yb"], #line),
            ("**.csv", ["a.csv", ".csv"], ["x/a.csv"], #line),
            ("x/a**", ["x/a", "x/abc"], ["x/a/b"], #line),
            ("***/x", ["a/x"], ["x", "a/b/x"], #line),
        ])
    }

    // MARK: - Whole-path matching and dot files

    func testDotFiles_areNotSpecial_starAndGlobstarMatchThem() {
        check([
            ("*", [".hidden", ".", ".."], [], #line),
            ("*.csv", [".secret.csv"], [], #line),
            ("**/*.swp", [".a.swp", ".git/x.swp", "a/.b/.c.swp"], [], #line),
            // Excluding dot files is explicit.
            (".*", [".hidden", ".git", ".#lock"], ["hidden", "a/.hidden", ".git/config"], #line),
            ("**/.*", [".hidden", "a/.hidden", "a/b/.c"], ["a/b", "a.b/c"], #line),
        ])
    }

    func testPatternWithoutSlash_matchesTopLevelOnly_notTheBaseNameAtAnyDepth() {
        check([
            ("*.csv", ["a.csv"], ["x/a.csv", "x/y/a.csv"], #line),
            ("a.csv", ["a.csv"], ["x/a.csv"], #line),
            ("**/a.csv", ["a.csv", "x/a.csv", "x/y/a.csv"], [], #line),
        ])
    }

    // MARK: - Bytes that are not UTF-8

    func testInvalidUTF8Bytes_matchStarQuestionMarkAndNegatedClassesOnly() throws {
        let cases: [(pattern: String, path: [UInt8], matches: Bool, line: UInt)] = [
            ("*", [0xFF], true, #line),
            ("*.csv", [0xFF, 0xFE] + Array(".csv".utf8), true, #line),
            ("**/*.csv", Array("d".utf8) + [0xC3] + Array("/x.csv".utf8), true, #line),
            ("?", [0xFF], true, #line),
            ("?.csv", [0xFF] + Array(".csv".utf8), true, #line),
            // Each invalid byte is one character.
            ("?", [0xFF, 0xFE], false, #line),
            ("??", [0xFF, 0xFE], true, #line),
            // A truncated sequence is one character per byte.
            ("??", [0xC3, 0x41], true, #line),
            ("?", [0xC3, 0x41], false, #line),
            // An overlong encoding of "/" and an encoded surrogate are not well-formed, so
            // are bytes, not characters.
            ("??", [0xC0, 0xAF], true, #line),
            ("???", [0xED, 0xA0, 0x80], true, #line),
            ("[!a]", [0xFF], true, #line),
            ("[a-z]", [0xFF], false, #line),
            ("a*", Array("a".utf8) + [0xFF, 0x80], true, #line),
            ("a", [0xFF], false, #line),
            // Well-formed sequences are one character.
            ("?", [0xF0, 0x9F, 0x98, 0x80], true, #line),
            ("??", [0xF0, 0x9F, 0x98, 0x80], false, #line),
        ]
        for testCase in cases {
            let glob = try GlobPattern(testCase.pattern)
            XCTAssertEqual(glob.matches(testCase.path), testCase.matches, "\"\(testCase.pattern)\" against \(testCase.path)", line: testCase.line)
        }
    }

    // MARK: - Errors

    func testInvalidPatterns_areRefusedWithAReasonAndTheColumn() {
        let cases: [(pattern: String, message: String, column: Int, line: UInt)] = [
            ("", #"empty pattern; expected a glob such as "**/*.csv""#, 1, #line),
            ("/incoming/*.csv", #"pattern starts with "/"; patterns are relative to the watched directory, so write "incoming/*.csv", not "/incoming/*.csv""#, 1, #line),
            ("/", #"pattern starts with "/"; patterns are relative to the watched directory, so write "incoming/*.csv", not "/incoming/*.csv""#, 1, #line),
            ("data/[abc", #"unclosed "["; a class such as "[a-z]" ends with "]", and "\[" matches a literal "[""#, 6, #line),
            ("[]", #"unclosed "["; a class such as "[a-z]" ends with "]", and "\[" matches a literal "[""#, 1, #line),
            ("x[!]", #"unclosed "["; a class such as "[a-z]" ends with "]", and "\[" matches a literal "[""#, 2, #line),
            ("[a\\", #"unclosed "["; a class such as "[a-z]" ends with "]", and "\[" matches a literal "[""#, 1, #line),
            ("a//b", #"empty path component ("//"); components are separated by a single "/""#, 3, #line),
            ("a/b//", #"empty path component ("//"); components are separated by a single "/""#, 5, #line),
            ("incoming/", #"pattern ends with "/"; patterns match files, so to match what is in a directory write "dir/**""#, 9, #line),
            ("a\\", #"pattern ends with a "\" that escapes nothing; write "\\" for a literal backslash"#, 2, #line),
            ("é\\", #"pattern ends with a "\" that escapes nothing; write "\\" for a literal backslash"#, 2, #line),
            ("a\\/b", #"a "/" separates path components and cannot be escaped; no file name contains one"#, 2, #line),
            ("a[x/y]", #"a "/" cannot appear in a class; a class matches one character within a path component"#, 4, #line),
            ("[z-a]", #"reversed range "z-a" in class; write the lower character first, as in "a-z""#, 2, #line),
            ("[[:alpha:]]", #"character class names such as "[:alpha:]" are not supported; list the characters or ranges instead, as in "[a-zA-Z]""#, 2, #line),
            ("./a", #"path component "." never matches; patterns match paths inside the watched directory, written without "." or "..""#, 1, #line),
            ("a/../b", #"path component ".." never matches; patterns match paths inside the watched directory, written without "." or "..""#, 3, #line),
        ]
        for testCase in cases {
            do {
                let glob = try GlobPattern(testCase.pattern)
                XCTFail("\"\(testCase.pattern)\" was accepted as \(glob)", line: testCase.line)
            } catch {
                XCTAssertEqual(error.message, testCase.message, "\"\(testCase.pattern)\"", line: testCase.line)
                XCTAssertEqual(error.column, testCase.column, "\"\(testCase.pattern)\"", line: testCase.line)
                XCTAssertEqual(error.description, testCase.message, line: testCase.line)
            }
        }
    }

    func testDescription_isThePatternAsWritten_andEqualityFollowsIt() throws {
        XCTAssertEqual(try GlobPattern("**/*.csv").description, "**/*.csv")
        XCTAssertEqual(try GlobPattern("a\\*[!x-z]").description, "a\\*[!x-z]")
        XCTAssertEqual(try GlobPattern("**/*.csv"), try GlobPattern("**/*.csv"))
        XCTAssertNotEqual(try GlobPattern("**/*.csv"), try GlobPattern("**/*.tsv"))
    }

    // MARK: - Cost

    /// Backtracking that retries every split of `a*a*...` and of `**` would take time
    /// exponential in the number of wildcards; the bound here is the product of the
    /// sizes, which the matcher promises.
    func testPathologicalPatterns_costAtMostTheProductOfPathAndPatternSizes() throws {
        let component = String(repeating: "a", count: 30)
        let deepPath = Array(repeating: component, count: 40).joined(separator: "/")
        let cases: [(pattern: String, path: String, matches: Bool, line: UInt)] = [
            ("**/a*a*a*a*a*a*a*b", deepPath, false, #line),
            ("**/a*a*a*a*a*a*a*a", deepPath, true, #line),
            ("**/**/**/**/**/**/**/**/b", deepPath, false, #line),
            ("**/a*/**/a*/**/a*/**/a*/**/b", deepPath, false, #line),
            ("*a*a*a*a*a*a*a*a*a*a*b", String(repeating: "a", count: 200), false, #line),
        ]
        for testCase in cases {
            let glob = try GlobPattern(testCase.pattern)
            let path = Array(testCase.path.utf8)
            var steps = 0
            XCTAssertEqual(glob.matches(path, steps: &steps), testCase.matches, line: testCase.line)
            let pathComponents = PathComponents.ranges(of: path)
            let longestComponent = pathComponents.map(\.count).max() ?? 0
            let bound = pathComponents.count * glob.segments.count * (longestComponent + 1) * (testCase.pattern.utf8.count + 1)
            // The work, not the time: a time limit fails under a sanitizer or a loaded CI.
            XCTAssertLessThanOrEqual(steps, bound, "\"\(testCase.pattern)\"", line: testCase.line)
        }
    }

    // MARK: - PathFilter

    private let editorAndHiddenExcludes = [".*", "**/.*", "**/*.tmp", "**/*~", "**/.#*", "**/*.swp"]

    func testFilter_exampleExcludeList_dropsHiddenTemporaryAndEditorFiles() {
        let filter = PathFilter(
            include: patterns(["**/*.csv", "incoming/*.json"]),
            exclude: patterns(editorAndHiddenExcludes)
        )
        let cases: [(path: String, selected: Bool, line: UInt)] = [
            ("data.csv", true, #line),
            ("2024/01/data.csv", true, #line),
            ("incoming/order.json", true, #line),
            ("incoming/sub/order.json", false, #line),
            ("order.json", false, #line),
            ("notes.txt", false, #line),
            (".foo", false, #line),
            (".foo.csv", false, #line),
            ("dir/.foo.swp", false, #line),
            ("dir/.data.csv", false, #line),
            ("a~", false, #line),
            ("data.csv~", false, #line),
            (".#lock", false, #line),
            ("dir/.#data.csv", false, #line),
            ("x.tmp", false, #line),
            ("x/y/data.csv.tmp", false, #line),
            ("data.csv.swp", false, #line),
            // Excluding a directory excludes everything in it.
            (".git/objects/data.csv", false, #line),
            ("a/.cache/data.csv", false, #line),
            ("", false, #line),
        ]
        for testCase in cases {
            XCTAssertEqual(filter.selects(testCase.path), testCase.selected, "\"\(testCase.path)\"", line: testCase.line)
        }
    }

    func testFilter_emptyIncludeList_selectsEverythingNotExcluded() {
        let everything = PathFilter(include: [], exclude: [])
        XCTAssertTrue(everything.selects("a"))
        XCTAssertTrue(everything.selects("x/y/.z"))
        XCTAssertTrue(everything.selects([0xFF, 0x2F, 0xFE]))
        XCTAssertFalse(everything.selects(""), "the root is not a file")

        let noTemporaries = PathFilter(include: [], exclude: patterns(["**/*.tmp", "build"]))
        XCTAssertTrue(noTemporaries.selects("a.csv"))
        XCTAssertTrue(noTemporaries.selects("x/build"))
        XCTAssertFalse(noTemporaries.selects("x/a.tmp"))
        XCTAssertFalse(noTemporaries.selects("build"))
        XCTAssertFalse(noTemporaries.selects("build/out.csv"))
    }

    func testFilter_pathMustMatchAnInclude_andAnExcludeWins() {
        let filter = PathFilter(include: patterns(["**/*.csv", "reports/**"]), exclude: patterns(["reports/drafts/**", "**/skip-*"]))
        let cases: [(path: String, selected: Bool, line: UInt)] = [
            ("a.csv", true, #line),
            ("reports/q1.pdf", true, #line),
            ("reports/2024/q1.pdf", true, #line),
            ("reports/drafts/q2.pdf", false, #line),
            ("reports/drafts/q2.csv", false, #line),
            ("skip-a.csv", false, #line),
            ("x/skip-a.csv", false, #line),
            ("a.pdf", false, #line),
            // An include matches the whole path; it does not select what is under a match.
            ("a.csv/inner.pdf", false, #line),
        ]
        for testCase in cases {
            XCTAssertEqual(filter.selects(testCase.path), testCase.selected, "\"\(testCase.path)\"", line: testCase.line)
        }
    }

    func testMayContainSelected_prunesExcludedDirectories_butNeverForMissingAnInclude() {
        let filter = PathFilter(include: patterns(["**/*.csv"]), exclude: patterns(editorAndHiddenExcludes + ["build/**", "**/node_modules"]))
        let cases: [(directory: String, mayContain: Bool, line: UInt)] = [
            ("", true, #line),
            (".git", false, #line),
            (".git/objects", false, #line),
            ("sub/.cache", false, #line),
            ("sub/.cache/x", false, #line),
            ("docs", true, #line),
            ("docs/images", true, #line),
            ("sub", true, #line),
            // "build/**" matches everything under build, though not build itself.
            ("build", false, #line),
            ("build/x", false, #line),
            ("rebuild", true, #line),
            ("a/node_modules", false, #line),
            ("node_modules", false, #line),
            ("node_modules_not", true, #line),
        ]
        for testCase in cases {
            XCTAssertEqual(filter.mayContainSelected(directory: testCase.directory), testCase.mayContain, "\"\(testCase.directory)\"", line: testCase.line)
        }
    }

    func testMayContainSelected_pruningAgreesWithSelects() {
        // Whatever is pruned must hold nothing selects would pick.
        let filter = PathFilter(include: [], exclude: patterns(["**/x/**", "*/y/*/**", "z/*", "w/**/**"]))
        let cases: [(directory: String, mayContain: Bool, line: UInt)] = [
            ("x", false, #line),
            ("a/b/x", false, #line),
            ("a", true, #line),
            // "*/y/*/**" needs two components under a/y, so a/y may still hold a file.
            ("a/y", true, #line),
            ("a/y/b", false, #line),
            // "z/*" excludes each child of z, and with it everything under the children.
            ("z", false, #line),
            ("z/dir", false, #line),
            ("w", false, #line),
        ]
        for testCase in cases {
            XCTAssertEqual(filter.mayContainSelected(directory: testCase.directory), testCase.mayContain, "\"\(testCase.directory)\"", line: testCase.line)
        }
        XCTAssertTrue(filter.selects("a/y/file"))
        XCTAssertFalse(filter.selects("a/y/b/file"))
        XCTAssertFalse(filter.selects("z/file"))
        XCTAssertFalse(filter.selects("z/dir/file"))
    }

    func testMayContainSelected_excludingEveryTopLevelName_prunesTheRoot() {
        XCTAssertFalse(PathFilter(include: [], exclude: patterns(["**"])).mayContainSelected(directory: ""))
        XCTAssertFalse(PathFilter(include: [], exclude: patterns(["**/*"])).mayContainSelected(directory: ""))
        // "*" excludes every top-level name, so everything under them too.
        XCTAssertFalse(PathFilter(include: [], exclude: patterns(["*"])).mayContainSelected(directory: ""))
        // "*/**" leaves top-level files.
        XCTAssertTrue(PathFilter(include: [], exclude: patterns(["*/**"])).mayContainSelected(directory: ""))
        XCTAssertTrue(PathFilter(include: [], exclude: patterns(["*/*"])).mayContainSelected(directory: ""))
    }
}
