// Over 500 lines on purpose: a parser and its grammar read best in one file, top to bottom
// (the size rule in docs/architecture.md exempts parsers).
// Globs for the `include` and `exclude` lists of `[[watch]]` rules, matched against the
// path of a file relative to the rule's root directory. Paths are bytes because Linux
// file names need not be UTF-8; fnmatch(3) is not enough because it has no `**`.

/// Why a glob pattern was refused, and where: `column` is 1-based and counts Unicode
/// scalars of the pattern, so the config loader can add it to the column of the string's
/// first character and point at the offending character.
public struct GlobError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    /// 1-based column in the pattern, counting Unicode scalars.
    public let column: Int

    public var description: String { message }
}

/// A glob matched against the whole path of a file relative to a watch rule's root
/// directory, such as `incoming/*.json` or `**/*.csv`. The path is a byte string split into
/// components at `/`; the pattern is text, encoded as UTF-8 for matching.
///
/// The syntax follows gitignore, rsync and bash's `globstar`, with two deliberate
/// differences noted below:
///
/// - `*` matches any run of characters within one component, including none. It never
///   crosses a `/`.
/// - `?` matches one character other than `/`. A character is a well-formed UTF-8 sequence
///   or, where the name is not valid UTF-8, a single byte: `?` matches `é` (two bytes) and
///   a lone 0xff alike.
/// - `[abc]`, `[a-z]` and `[!a-z]` or `[^a-z]` match one character in, or not in, the class.
///   A `]` straight after the `[` (or `[!`) is a member, and so is a `-` first or last:
///   `[]]`, `[!]]`, `[a-]`. `\` escapes inside a class too. A class never matches `/`, and a
///   `/` may not be written in one. Bytes that are not valid UTF-8 match only negated
///   classes. POSIX names such as `[:alpha:]` are not supported and are refused.
/// - `\x` matches `x` literally: `\*`, `\?`, `\[`, `\\`.
/// - `**` as a whole component matches zero or more components: `**/*.csv` matches `a.csv`,
///   `x/a.csv` and `x/y/a.csv`; `a/**/b` matches `a/b`, `a/x/b` and `a/x/y/b`. As the last
///   component it matches one or more, so `a/**` matches everything under `a` but not `a`
///   itself. `**` inside a component, as in `a**b`, is just `*`.
/// - Unlike in a shell, dot files are not special: `*` matches `.hidden` and `**` descends
///   into `.git`. Leave them out explicitly with `.*` (top level) and `**/.*` (any depth).
/// - Unlike in gitignore, a pattern without a `/` is not matched against the base name:
///   every pattern matches the whole relative path, so `*.csv` matches `a.csv` but not
///   `x/a.csv`. Write `**/*.csv` for any depth.
///
/// Matching walks the path's components once, keeping the set of pattern components that
/// can come next (at most one entry per pattern component); within a component it is the
/// two-pointer wildcard algorithm, which returns to the last `*` only. The cost is bounded
/// by path components × pattern components × component length × pattern length, so no
/// pattern backtracks exponentially.
public struct GlobPattern: Sendable, Equatable, CustomStringConvertible {
    /// The pattern as written.
    public let description: String
    let segments: [Segment]
    /// For each position `i` in `segments` (and one past the end): whether `segments[i...]`
    /// matches every single component. If the match can stand there after a directory,
    /// the pattern matches each of the directory's children, and so, as an exclude,
    /// leaves nothing under the directory.
    let matchesEveryChildFrom: [Bool]

    public init(_ pattern: String) throws(GlobError) {
        var parser = GlobParser(scalars: Array(pattern.unicodeScalars))
        let segments = try parser.parse()
        self.segments = segments
        description = pattern
        matchesEveryChildFrom = (0...segments.count).map { start in
            let rest = segments[start...]
            guard let last = rest.last, rest.allSatisfy({ $0 == .globstar || $0.matchesAnyComponent }) else {
                return false
            }
            // `*` and a final `**` each need a component of their own; other `**` need none.
            let required = rest.filter { $0 != .globstar }.count + (last == .globstar ? 1 : 0)
            return required == 1
        }
    }

    public func matches(_ relativePath: [UInt8]) -> Bool {
        var steps = 0
        return matches(relativePath, steps: &steps)
    }

    public func matches(_ relativePath: String) -> Bool {
        matches(Array(relativePath.utf8))
    }

    /// `matches(_:)`, adding the work done to `steps` (one per byte comparison or
    /// backtrack inside a component) so tests can bound it.
    func matches(_ path: [UInt8], steps: inout Int) -> Bool {
        var reached = start
        for component in PathComponents.ranges(of: path) {
            reached = advance(reached, over: path, component, steps: &steps)
            if !reached.contains(true) { return false }
        }
        return reached[segments.count]
    }

    /// Whether the path, or a directory above it, matches: the test for exclusion, since
    /// excluding a directory excludes everything in it.
    func matchesPathOrAncestor(_ path: [UInt8], _ components: [Range<Int>]) -> Bool {
        if case .matchedOnTheWay = walk(path, components) { return true }
        return false
    }

    /// Whether the directory, a directory above it, or every child of it matches, so that
    /// as an exclude the pattern leaves nothing under the directory to select.
    func matchesDirectoryOrAllUnder(_ path: [UInt8], _ components: [Range<Int>]) -> Bool {
        switch walk(path, components) {
        case .matchedOnTheWay: return true
        case .deadEnd: return false
        case .reached(let reached): return reached.indices.contains { reached[$0] && matchesEveryChildFrom[$0] }
        }
    }

    private enum Walk {
        /// The path up to some component (that directory, or the whole path) matches.
        case matchedOnTheWay
        /// No segment can match any more, whatever follows.
        case deadEnd
        /// Every component consumed; the segments still reachable.
        case reached([Bool])
    }

    private func walk(_ path: [UInt8], _ components: [Range<Int>]) -> Walk {
        var steps = 0
        var reached = start
        for component in components {
            reached = advance(reached, over: path, component, steps: &steps)
            if reached[segments.count] { return .matchedOnTheWay }
            if !reached.contains(true) { return .deadEnd }
        }
        return .reached(reached)
    }

    // MARK: - Matching across components

    /// The positions in `segments` the match can stand at before any component is read.
    /// Position `i` means `segments[..<i]` have matched; `segments.count` means all have.
    private var start: [Bool] {
        var reached = [Bool](repeating: false, count: segments.count + 1)
        reached[0] = true
        closeOverEmptyGlobstars(&reached)
        return reached
    }

    private func advance(
        _ reached: [Bool], over path: [UInt8], _ component: Range<Int>, steps: inout Int
    ) -> [Bool] {
        var next = [Bool](repeating: false, count: segments.count + 1)
        for position in segments.indices where reached[position] {
            switch segments[position] {
            case .globstar:
                next[position] = true
                // The final `**` has matched its one required component.
                if position == segments.count - 1 { next[segments.count] = true }
            case .component(let tokens):
                if ComponentMatcher.matches(tokens, path, component, steps: &steps) {
                    next[position + 1] = true
                }
            }
        }
        closeOverEmptyGlobstars(&next)
        return next
    }

    /// A `**` before the last component may match no components, so standing before it is
    /// also standing after it.
    private func closeOverEmptyGlobstars(_ reached: inout [Bool]) {
        for position in segments.indices.dropLast()
        where reached[position] && segments[position] == .globstar {
            reached[position + 1] = true
        }
    }
}

// MARK: - Representation

extension GlobPattern {
    enum Segment: Sendable, Equatable {
        /// `**` as a whole component.
        case globstar
        case component([GlobToken])

        var matchesAnyComponent: Bool { self == .component([.star]) }
    }
}

enum GlobToken: Sendable, Equatable {
    /// One byte of a literal character's UTF-8 encoding.
    case byte(UInt8)
    case anyCharacter
    /// Consecutive stars are stored as one.
    case star
    case characterClass(GlobCharacterClass)
}

struct GlobCharacterClass: Sendable, Equatable {
    let isNegated: Bool
    /// Unicode scalar values.
    let ranges: [ClosedRange<UInt32>]

    /// `scalar` is nil for a byte that is not part of well-formed UTF-8; only a negated
    /// class matches one.
    func matches(_ scalar: UInt32?) -> Bool {
        guard let scalar else { return isNegated }
        return ranges.contains { $0.contains(scalar) } != isNegated
    }
}

enum PathComponents {
    /// The byte ranges between `/`s. The empty path has no components.
    static func ranges(of path: [UInt8]) -> [Range<Int>] {
        guard !path.isEmpty else { return [] }
        var result: [Range<Int>] = []
        var start = 0
        for index in path.indices where path[index] == UInt8(ascii: "/") {
            result.append(start..<index)
            start = index + 1
        }
        result.append(start..<path.count)
        return result
    }
}

// MARK: - Matching within a component

enum ComponentMatcher {
    /// The two-pointer wildcard algorithm: on a mismatch, retry from the most recent `*`
    /// with it swallowing one more character. Returning to an earlier `*` is never needed,
    /// because the later one can absorb whatever the earlier one would have, which keeps
    /// the cost at O(component length × tokens).
    static func matches(
        _ tokens: [GlobToken], _ path: [UInt8], _ component: Range<Int>, steps: inout Int
    ) -> Bool {
        let end = component.upperBound
        var token = 0
        var index = component.lowerBound
        var lastStar: Int?
        var starResume = index
        while index < end {
            steps += 1
            if token < tokens.count {
                switch tokens[token] {
                case .star:
                    lastStar = token
                    starResume = index
                    token += 1
                    continue
                case .byte(let byte):
                    if path[index] == byte {
                        index += 1
                        token += 1
                        continue
                    }
                case .anyCharacter:
                    index += UTF8Sequence.decode(path, at: index, end: end).length
                    token += 1
                    continue
                case .characterClass(let characterClass):
                    let character = UTF8Sequence.decode(path, at: index, end: end)
                    if characterClass.matches(character.scalar) {
                        index += character.length
                        token += 1
                        continue
                    }
                }
            }
            guard let star = lastStar else { return false }
            starResume += UTF8Sequence.decode(path, at: starResume, end: end).length
            index = starResume
            token = star + 1
        }
        while token < tokens.count, tokens[token] == .star { token += 1 }
        return token == tokens.count
    }
}

// MARK: - Parsing

private struct GlobParser {
    let scalars: [Unicode.Scalar]
    var index = 0

    init(scalars: [Unicode.Scalar]) {
        self.scalars = scalars
    }

    mutating func parse() throws(GlobError) -> [GlobPattern.Segment] {
        guard !scalars.isEmpty else {
            throw GlobError(message: #"empty pattern; expected a glob such as "**/*.csv""#, column: 1)
        }
        guard scalars[0] != "/" else {
            throw GlobError(
                message: #"pattern starts with "/"; patterns are relative to the watched directory, so write "incoming/*.csv", not "/incoming/*.csv""#,
                column: 1
            )
        }
        var segments: [GlobPattern.Segment] = []
        var tokens: [GlobToken] = []
        var componentStart = 0
        while index < scalars.count {
            let scalar = scalars[index]
            switch scalar {
            case "/":
                segments.append(try segment(tokens, from: componentStart, to: index))
                tokens = []
                index += 1
                componentStart = index
            case "*":
                if tokens.last != .star { tokens.append(.star) }
                index += 1
            case "?":
                tokens.append(.anyCharacter)
                index += 1
            case "[":
                tokens.append(.characterClass(try characterClass()))
            case "\\":
                appendLiteral(try escapedScalar(), to: &tokens)
            default:
                appendLiteral(scalar, to: &tokens)
                index += 1
            }
        }
        if componentStart == scalars.count {
            throw GlobError(
                message: #"pattern ends with "/"; patterns match files, so to match what is in a directory write "dir/**""#,
                column: scalars.count
            )
        }
        segments.append(try segment(tokens, from: componentStart, to: scalars.count))
        return segments
    }

    private func segment(_ tokens: [GlobToken], from start: Int, to end: Int) throws(GlobError) -> GlobPattern.Segment {
        if start == end {
            throw GlobError(
                message: #"empty path component ("//"); components are separated by a single "/""#,
                column: end + 1
            )
        }
        if scalars[start..<end].elementsEqual(["*", "*"]) { return .globstar }
        let dot = GlobToken.byte(UInt8(ascii: "."))
        if tokens == [dot] || tokens == [dot, dot] {
            throw GlobError(
                message: #"path component "\#(tokens.count == 1 ? "." : "..")" never matches; patterns match paths inside the watched directory, written without "." or "..""#,
                column: start + 1
            )
        }
        return .component(tokens)
    }

    private func appendLiteral(_ scalar: Unicode.Scalar, to tokens: inout [GlobToken]) {
        UTF8.encode(scalar) { tokens.append(.byte($0)) }
    }

    /// Reads `\x` at `index` and returns `x`.
    private mutating func escapedScalar() throws(GlobError) -> Unicode.Scalar {
        let column = index + 1
        index += 1
        guard index < scalars.count else {
            throw GlobError(
                message: #"pattern ends with a "\" that escapes nothing; write "\\" for a literal backslash"#,
                column: column
            )
        }
        let scalar = scalars[index]
        guard scalar != "/" else {
            throw GlobError(
                message: #"a "/" separates path components and cannot be escaped; no file name contains one"#,
                column: column
            )
        }
        index += 1
        return scalar
    }

    /// Reads `[...]` starting at the `[` at `index`.
    private mutating func characterClass() throws(GlobError) -> GlobCharacterClass {
        let openColumn = index + 1
        let unclosed = GlobError(
            message: #"unclosed "["; a class such as "[a-z]" ends with "]", and "\[" matches a literal "[""#,
            column: openColumn
        )
        index += 1
        var isNegated = false
        if index < scalars.count, scalars[index] == "!" || scalars[index] == "^" {
            isNegated = true
            index += 1
        }
        var ranges: [ClosedRange<UInt32>] = []
        var isFirst = true
        while true {
            guard index < scalars.count else { throw unclosed }
            if scalars[index] == "]" && !isFirst {
                index += 1
                return GlobCharacterClass(isNegated: isNegated, ranges: ranges)
            }
            isFirst = false
            let lowColumn = index + 1
            let low = try classMember(unclosed: unclosed)
            // A "-" just before the closing "]" is a member, not a range.
            if index + 1 < scalars.count, scalars[index] == "-", scalars[index + 1] != "]" {
                index += 1
                let high = try classMember(unclosed: unclosed)
                guard low.value <= high.value else {
                    throw GlobError(
                        message: "reversed range \"\(low)-\(high)\" in class; write the lower character first, as in \"\(high)-\(low)\"",
                        column: lowColumn
                    )
                }
                ranges.append(low.value...high.value)
            } else {
                ranges.append(low.value...low.value)
            }
        }
    }

    /// One character of a class at `index`, unescaped.
    private mutating func classMember(unclosed: GlobError) throws(GlobError) -> Unicode.Scalar {
        let scalar = scalars[index]
        switch scalar {
        case "/":
            throw GlobError(
                message: #"a "/" cannot appear in a class; a class matches one character within a path component"#,
                column: index + 1
            )
        case "\\":
            guard index + 1 < scalars.count else { throw unclosed }
            return try escapedScalar()
        case "[" where index + 1 < scalars.count && scalars[index + 1] == ":":
            if let close = posixClassEnd(from: index + 2) {
                let name = String(String.UnicodeScalarView(scalars[index..<close]))
                throw GlobError(
                    message: "character class names such as \"\(name)\" are not supported; list the characters or ranges instead, as in \"[a-zA-Z]\"",
                    column: index + 1
                )
            }
            index += 1
            return scalar
        default:
            index += 1
            return scalar
        }
    }

    /// The index just past `:]` when `scalars[from...]` starts with letters then `:]`, as
    /// in `[:alpha:]`.
    private func posixClassEnd(from start: Int) -> Int? {
        var cursor = start
        while cursor < scalars.count, ("a"..."z").contains(scalars[cursor]) {
            cursor += 1
        }
        guard cursor > start, cursor + 1 < scalars.count, scalars[cursor] == ":", scalars[cursor + 1] == "]" else {
            return nil
        }
        return cursor + 2
    }
}
