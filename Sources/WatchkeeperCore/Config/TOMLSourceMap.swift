// Over 500 lines on purpose: a parser and its grammar read best in one file, top to bottom
// (the size rule in docs/architecture.md exempts parsers).
// Source positions for TOML keys and values.
//
// TOMLKit (toml++) reports line:column only for syntax errors; the values it
// hands back carry no source position. The config validator reports semantic
// errors as `PATH:LINE:COLUMN: message`, so this file re-scans the (already
// successfully parsed) source text and records where every key path is written.
//
// The scanner is a small single pass over Unicode scalars. It does not validate
// TOML; it only needs to stay in step with the structure. Whenever it meets
// something it does not understand it stops, keeping what it recorded so far,
// so lookups past that point return nil rather than a wrong position.

/// 1-based line and column; columns count Unicode scalars, as editors show them.
///
/// A tab counts as one column. A leading byte order mark is not counted.
public struct SourcePosition: Equatable, Hashable, Sendable, CustomStringConvertible {
    public var line: Int
    public var column: Int

    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }

    /// `LINE:COLUMN`, e.g. `12:5`.
    public var description: String { "\(line):\(column)" }
}

/// One step of a path into a TOML document.
public enum TOMLPathComponent: Hashable, Sendable {
    /// A key of a table (decoded: `"a\tb"` is the key `a<TAB>b`, `'x.y'` is `x.y`).
    case key(String)
    /// The 0-based element of an array of tables (`[[task]]`) or of an array value.
    case index(Int)
}

/// Where keys and values of a TOML document are written.
///
/// Build it from the same text TOMLKit parsed; lookups are dictionary reads.
///
/// Conventions:
/// - Key position of a key/value pair: the first character of the key that ends
///   the path (for `a.b = 1`, path `[a, b]` is the `b`, path `[a]` is the `a`;
///   for a quoted key, its opening quote).
/// - Table from a header `[a.b]`: the `b` (path `[a, b]`) and the `a` (path `[a]`,
///   unless `[a]` has its own header, which then wins). Tables only created
///   implicitly (by a longer header or a dotted key) take the first key that
///   creates them.
/// - Array of tables: `[task, index(i)]` is the last key of the `i`-th
///   `[[task]]` header (the `t`, not the `[[`); `[task]` itself is the first one.
///   `[[task.step]]` belongs to the latest `[[task]]`: `[task, index(i), step, index(j)]`.
/// - Elements of an array value: `[list, index(i)]` has key position and value
///   position both at the element's first character.
/// - Value position: the first character of the value (`"`, `'`, `[`, `{`,
///   digit, sign, `t`/`f`...). Tables defined by headers, or implicitly, have none.
public struct TOMLSourceMap: Sendable {
    struct Entry: Sendable, Equatable {
        var key: SourcePosition
        var value: SourcePosition?
        /// Created only as a side effect of a longer key (`[a.b]` creates `a`);
        /// an explicit definition found later replaces it.
        var isImplicit: Bool
    }

    let entries: [[TOMLPathComponent]: Entry]
    /// False if the scanner stopped early on text it did not understand.
    let scannedCompletely: Bool

    public init(source: String) {
        var scanner = TOMLPositionScanner(source: source)
        scannedCompletely = scanner.scanDocument()
        entries = scanner.entries
    }

    /// Where the key that ends this path is written (see the type's conventions);
    /// nil if the path is not in the document or could not be located.
    public func keyPosition(_ path: [TOMLPathComponent]) -> SourcePosition? {
        entries[path]?.key
    }

    /// Where the value at this path starts; nil for tables that are not inline
    /// tables, for unknown paths, and when the position could not be located.
    public func valuePosition(_ path: [TOMLPathComponent]) -> SourcePosition? {
        entries[path]?.value
    }
}

// MARK: - Scanner

private struct ScanError: Error {}

private struct TOMLPositionScanner {
    private let scalars: [Unicode.Scalar]
    private var index = 0
    private var line = 1
    private var column = 1

    private(set) var entries: [[TOMLPathComponent]: TOMLSourceMap.Entry] = [:]
    /// Number of `[[...]]` headers seen so far for each array-of-tables path
    /// (the path is fully resolved, i.e. includes the indices of enclosing arrays).
    private var arrayTableCounts: [[TOMLPathComponent]: Int] = [:]
    /// The table that the most recent header opened; key/value pairs go there.
    private var currentTable: [TOMLPathComponent] = []

    init(source: String) {
        var scalars = Array(source.unicodeScalars)
        // A byte order mark is invisible in editors: it does not count as a column.
        if scalars.first == "\u{FEFF}" { scalars.removeFirst() }
        self.scalars = scalars
    }

    // MARK: Cursor

    private var position: SourcePosition { SourcePosition(line: line, column: column) }

    private func peek(_ offset: Int = 0) -> Unicode.Scalar? {
        let i = index + offset
        return i < scalars.count ? scalars[i] : nil
    }

    private mutating func advance() {
        guard index < scalars.count else { return }
        // Only LF starts a new line; in CRLF the CR is the last column of its
        // line, which never holds anything we record.
        if scalars[index] == "\n" {
            line += 1
            column = 1
        } else {
            column += 1
        }
        index += 1
    }

    private mutating func expect(_ scalar: Unicode.Scalar) throws {
        guard peek() == scalar else { throw ScanError() }
        advance()
    }

    private func startsTripleQuote(_ quote: Unicode.Scalar) -> Bool {
        peek() == quote && peek(1) == quote && peek(2) == quote
    }

    // MARK: Trivia

    private static func isNewline(_ c: Unicode.Scalar) -> Bool { c == "\n" || c == "\r" }

    /// Spaces and tabs only (TOML's "whitespace").
    private mutating func skipWhitespace() {
        while let c = peek(), c == " " || c == "\t" { advance() }
    }

    /// From `#` up to (not including) the end of the line.
    private mutating func skipComment() {
        while let c = peek(), !Self.isNewline(c) { advance() }
    }

    /// Whitespace, newlines and comments: the filler between top-level
    /// expressions and between array elements.
    private mutating func skipWhitespaceCommentsAndNewlines() {
        while let c = peek() {
            if c == " " || c == "\t" || Self.isNewline(c) {
                advance()
            } else if c == "#" {
                skipComment()
            } else {
                break
            }
        }
    }

    /// After a header or a key/value pair only whitespace and a comment may
    /// follow on the same line.
    private mutating func expectEndOfLine() throws {
        skipWhitespace()
        if peek() == "#" { skipComment() }
        if let c = peek(), !Self.isNewline(c) { throw ScanError() }
    }

    // MARK: Recording

    private mutating func record(
        _ path: [TOMLPathComponent], key: SourcePosition, value: SourcePosition?, implicit: Bool
    ) {
        if let existing = entries[path], !(existing.isImplicit && !implicit) { return }
        entries[path] = TOMLSourceMap.Entry(key: key, value: value, isImplicit: implicit)
    }

    // MARK: Document

    /// Returns true if the whole text was understood.
    mutating func scanDocument() -> Bool {
        do {
            while true {
                skipWhitespaceCommentsAndNewlines()
                guard let c = peek() else { return true }
                if c == "[" {
                    try scanTableHeader()
                } else {
                    try scanKeyValue(in: currentTable)
                }
                try expectEndOfLine()
            }
        } catch {
            return false
        }
    }

    /// `[a.b.c]` or `[[a.b.c]]`.
    private mutating func scanTableHeader() throws {
        try expect("[")
        // `[[` must be written without space between the brackets; `[ [` would
        // not be a valid header at all.
        let isArrayOfTables = peek() == "["
        if isArrayOfTables { advance() }
        skipWhitespace()
        let keys = try scanDottedKey()
        skipWhitespace()
        try expect("]")
        if isArrayOfTables { try expect("]") }

        var path: [TOMLPathComponent] = []
        for (offset, key) in keys.enumerated() {
            path.append(.key(key.name))
            if offset < keys.count - 1 {
                // A prefix of the header: created implicitly if new. If it names
                // an array of tables, the header extends that array's latest
                // element (`[[task.step]]` after the second `[[task]]` is
                // task[1].step).
                record(path, key: key.position, value: nil, implicit: true)
                if let count = arrayTableCounts[path] { path.append(.index(count - 1)) }
            } else if isArrayOfTables {
                // The array itself keeps its first header; each header adds an element.
                record(path, key: key.position, value: nil, implicit: false)
                let count = arrayTableCounts[path, default: 0]
                arrayTableCounts[path] = count + 1
                path.append(.index(count))
                record(path, key: key.position, value: nil, implicit: false)
            } else {
                record(path, key: key.position, value: nil, implicit: false)
            }
        }
        currentTable = path
    }

    /// `a.b = value`, relative to `table` (the current table, or an inline table).
    private mutating func scanKeyValue(in table: [TOMLPathComponent]) throws {
        let keys = try scanDottedKey()
        skipWhitespace()
        try expect("=")
        skipWhitespace()

        var path = table
        for (offset, key) in keys.enumerated() {
            path.append(.key(key.name))
            if offset < keys.count - 1 {
                // `a.b = 1` makes `a` a table without writing it anywhere else.
                record(path, key: key.position, value: nil, implicit: true)
            } else {
                record(path, key: key.position, value: position, implicit: false)
            }
        }
        try scanValue(at: path)
    }

    // MARK: Keys

    /// One or more simple keys joined by dots; whitespace around the dots is allowed.
    private mutating func scanDottedKey() throws -> [(name: String, position: SourcePosition)] {
        var keys = [try scanSimpleKey()]
        while true {
            skipWhitespace()
            guard peek() == "." else { return keys }
            advance()
            skipWhitespace()
            keys.append(try scanSimpleKey())
        }
    }

    /// A bare key, a "basic" quoted key (escapes decoded) or a 'literal' one.
    /// Dots inside quotes are part of the key.
    private mutating func scanSimpleKey() throws -> (name: String, position: SourcePosition) {
        let start = position
        guard let c = peek() else { throw ScanError() }
        switch c {
        case "\"":
            // Keys cannot be multi-line strings.
            if startsTripleQuote("\"") { throw ScanError() }
            return (try scanBasicString(), start)
        case "'":
            if startsTripleQuote("'") { throw ScanError() }
            return (try scanLiteralString(), start)
        default:
            var name = ""
            while let c = peek(), Self.isBareKeyScalar(c) {
                name.unicodeScalars.append(c)
                advance()
            }
            if name.isEmpty { throw ScanError() }
            return (name, start)
        }
    }

    /// TOML 1.0 allows `A-Za-z0-9_-`; non-ASCII letters are accepted too
    /// (TOML 1.1 / toml++'s unreleased features), which costs nothing here.
    private static func isBareKeyScalar(_ c: Unicode.Scalar) -> Bool {
        switch c {
        case "A"..."Z", "a"..."z", "0"..."9", "_", "-": return true
        default: return c.value > 0x7F && !c.properties.isWhitespace && c != "\u{FEFF}"
        }
    }

    // MARK: Values

    private mutating func scanValue(at path: [TOMLPathComponent]) throws {
        guard let c = peek() else { throw ScanError() }
        switch c {
        case "\"":
            if startsTripleQuote("\"") {
                try skipMultilineString(quote: "\"", hasEscapes: true)
            } else {
                _ = try scanBasicString()
            }
        case "'":
            if startsTripleQuote("'") {
                try skipMultilineString(quote: "'", hasEscapes: false)
            } else {
                _ = try scanLiteralString()
            }
        case "[":
            try scanArray(at: path)
        case "{":
            try scanInlineTable(at: path)
        default:
            try skipScalarValue()
        }
    }

    /// `[v, v, ...]`: may span lines, hold comments, end with a comma.
    private mutating func scanArray(at path: [TOMLPathComponent]) throws {
        try expect("[")
        var count = 0
        while true {
            skipWhitespaceCommentsAndNewlines()
            if peek() == "]" {
                advance()
                return
            }
            let elementPath = path + [.index(count)]
            record(elementPath, key: position, value: position, implicit: false)
            try scanValue(at: elementPath)
            count += 1
            skipWhitespaceCommentsAndNewlines()
            switch peek() {
            case ",": advance()
            case "]": advance(); return
            default: throw ScanError()
            }
        }
    }

    /// `{ k = v, a.b = v }`. TOML 1.0 keeps these on one line without a trailing
    /// comma; newlines, comments and a trailing comma (TOML 1.1) are tolerated.
    private mutating func scanInlineTable(at path: [TOMLPathComponent]) throws {
        try expect("{")
        while true {
            skipWhitespaceCommentsAndNewlines()
            if peek() == "}" {
                advance()
                return
            }
            try scanKeyValue(in: path)
            skipWhitespaceCommentsAndNewlines()
            switch peek() {
            case ",": advance()
            case "}": advance(); return
            default: throw ScanError()
            }
        }
    }

    /// Numbers, booleans, dates and times: runs up to the next delimiter.
    /// A date-time may contain a space (`1979-05-27 07:32:00`), so spaces do not
    /// end it; trailing spaces are harmless since only the start is recorded.
    private mutating func skipScalarValue() throws {
        var length = 0
        while let c = peek() {
            switch c {
            case ",", "]", "}", "#", "\n", "\r":
                if length == 0 { throw ScanError() }
                return
            case "A"..."Z", "a"..."z", "0"..."9", "+", "-", ".", "_", ":", " ", "\t":
                advance()
                length += 1
            default:
                // Not part of any TOML scalar: we are out of step with the text.
                throw ScanError()
            }
        }
        if length == 0 { throw ScanError() }
    }

    // MARK: Strings

    /// `"..."` on one line; returns the content with escapes decoded.
    private mutating func scanBasicString() throws -> String { try scanString(quote: "\"", escapes: true) }

    /// `'...'` on one line; no escapes, the content is taken as written.
    private mutating func scanLiteralString() throws -> String { try scanString(quote: "'", escapes: false) }

    private mutating func scanString(quote: Unicode.Scalar, escapes: Bool) throws -> String {
        try expect(quote)
        var result = ""
        while let c = peek() {
            switch c {
            case quote:
                advance()
                return result
            case "\\" where escapes:
                advance()
                result.unicodeScalars.append(try scanEscape())
            case "\n", "\r":
                throw ScanError()
            default:
                result.unicodeScalars.append(c)
                advance()
            }
        }
        throw ScanError()
    }

    /// The character after a backslash in a basic string (the cursor is past
    /// the backslash).
    private mutating func scanEscape() throws -> Unicode.Scalar {
        guard let e = peek() else { throw ScanError() }
        advance()
        switch e {
        case "b": return "\u{08}"
        case "t": return "\t"
        case "n": return "\n"
        case "f": return "\u{0C}"
        case "r": return "\r"
        case "e": return "\u{1B}"  // TOML 1.1
        case "\"": return "\""
        case "\\": return "\\"
        case "x": return try scanHexScalar(digits: 2)  // TOML 1.1
        case "u": return try scanHexScalar(digits: 4)
        case "U": return try scanHexScalar(digits: 8)
        default: throw ScanError()
        }
    }

    private mutating func scanHexScalar(digits: Int) throws -> Unicode.Scalar {
        var value: UInt32 = 0
        for _ in 0..<digits {
            guard let c = peek(), let digit = Self.hexValue(c) else { throw ScanError() }
            value = value << 4 | digit
            advance()
        }
        guard let scalar = Unicode.Scalar(value) else { throw ScanError() }
        return scalar
    }

    private static func hexValue(_ c: Unicode.Scalar) -> UInt32? {
        switch c {
        case "0"..."9": return c.value - 0x30
        case "a"..."f": return c.value - 0x61 + 10
        case "A"..."F": return c.value - 0x41 + 10
        default: return nil
        }
    }

    /// `"""..."""` or `'''...'''`. The content may hold newlines, `=`, `[`, `#`
    /// and runs of one or two quotes. A run of three or more quotes closes the
    /// string; up to two extra quotes before the closing three belong to the
    /// content (`"""a""""" ` is `a""`), so the whole run (at most five) is
    /// consumed. In basic strings a backslash escapes the next character, which
    /// also covers `\"` and the line-ending backslash.
    private mutating func skipMultilineString(quote: Unicode.Scalar, hasEscapes: Bool) throws {
        for _ in 0..<3 { try expect(quote) }
        while let c = peek() {
            if hasEscapes && c == "\\" {
                advance()
                advance()
            } else if c == quote {
                var run = 0
                while peek() == quote {
                    advance()
                    run += 1
                    if run == 5 { break }
                }
                if run >= 3 { return }
            } else {
                advance()
            }
        }
        throw ScanError()
    }
}
