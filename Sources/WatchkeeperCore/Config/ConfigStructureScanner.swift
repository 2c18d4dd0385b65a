// The structure half of ConfigPreflight: key lengths and nesting depth.
//
// It knows just enough TOML to tell keys from values: strings of all four kinds,
// comments, arrays and inline tables. It reports no syntax errors, which TOMLKit words
// better; at the first text it cannot follow it stops, and since toml++ stops at that
// text too, nothing after it reaches TOMLKit unchecked.

/// Thrown to end the scan: at text the scanner cannot follow, or with the report full.
private struct StopScanning: Error {}

struct ConfigStructureScanner {
    let bytes: UnsafeBufferPointer<UInt8>
    var report: ConfigPreflight.Report
    private var index: Int
    private var line = 1
    private var column = 1
    /// Keys in the current table's header; its key/value pairs go deeper.
    private var tableDepth = 0
    /// The current header was refused for its depth: its pairs are not refused again.
    private var tableTooDeep = false
    private var values = 0

    init(bytes: UnsafeBufferPointer<UInt8>, report: ConfigPreflight.Report) {
        self.bytes = bytes
        self.report = report
        self.index = ConfigPreflight.startAfterByteOrderMark(bytes)
    }

    // MARK: Cursor

    private var position: SourcePosition { SourcePosition(line: line, column: column) }

    private func peek(_ offset: Int = 0) -> UInt8? {
        index + offset < bytes.count ? bytes[index + offset] : nil
    }

    private mutating func advance() {
        guard index < bytes.count else { return }
        let byte = bytes[index]
        if byte == UInt8(ascii: "\n") {
            line += 1
            column = 1
        } else if byte & 0xC0 != 0x80 {
            // Continuation bytes belong to the scalar their lead byte counted.
            column += 1
        }
        index += 1
    }

    private mutating func expect(_ character: Unicode.Scalar) throws(StopScanning) {
        guard peek() == UInt8(ascii: character) else { throw StopScanning() }
        advance()
    }

    private mutating func problem(at position: SourcePosition, _ message: String) throws(StopScanning) {
        guard report.add(position, message) else { throw StopScanning() }
    }

    /// One more key, header or array element; past the limit the scan ends.
    private mutating func countValue() throws(StopScanning) {
        values += 1
        guard values > ConfigPreflight.maxValues else { return }
        _ = report.add(position, "more than \(ConfigPreflight.maxValues) keys, table headers and array elements; a watchkeeper configuration needs far fewer")
        throw StopScanning()
    }

    // MARK: Trivia

    private static func isNewline(_ byte: UInt8) -> Bool { byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") }

    private mutating func skipBlanks() {
        while let byte = peek(), byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") { advance() }
    }

    private mutating func skipComment() {
        while let byte = peek(), !Self.isNewline(byte) { advance() }
    }

    /// Blanks, comments and, where `newlines` allows, line ends.
    private mutating func skipTrivia(newlines: Bool) {
        while let byte = peek() {
            if byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || (newlines && Self.isNewline(byte)) {
                advance()
            } else if byte == UInt8(ascii: "#") {
                skipComment()
            } else {
                return
            }
        }
    }

    // MARK: Document

    mutating func scanDocument() {
        do throws(StopScanning) {
            while true {
                skipTrivia(newlines: true)
                guard let byte = peek() else { return }
                if byte == UInt8(ascii: "[") {
                    try scanTableHeader()
                } else {
                    try scanKeyValue(base: tableDepth, reportDepth: !tableTooDeep)
                }
                // Only a comment may follow on the line; anything else is TOMLKit's to report.
                skipTrivia(newlines: false)
                if let byte = peek(), !Self.isNewline(byte) { return }
            }
        } catch {
            // Text the scanner cannot follow, or a full report: nothing more to check.
            return
        }
    }

    /// `[a.b]` or `[[a.b]]`.
    private mutating func scanTableHeader() throws(StopScanning) {
        try countValue()
        try expect("[")
        let isArrayOfTables = peek() == UInt8(ascii: "[")
        if isArrayOfTables { advance() }
        skipBlanks()
        let depth = try scanDottedKey(base: 0, reportDepth: true, what: "table header")
        skipBlanks()
        try expect("]")
        if isArrayOfTables { try expect("]") }
        tableDepth = depth
        tableTooDeep = depth > ConfigPreflight.maxDepth
    }

    /// `a.b = value` whose first key is at depth `base + 1`.
    private mutating func scanKeyValue(base: Int, reportDepth: Bool) throws(StopScanning) {
        try countValue()
        let count = try scanDottedKey(base: base, reportDepth: reportDepth, what: "key")
        skipBlanks()
        try expect("=")
        skipBlanks()
        try scanValue(depth: base + count, reportDepth: reportDepth && base + count <= ConfigPreflight.maxDepth)
    }

    /// Simple keys joined by dots; returns how many. Reports each key that is too long,
    /// and the first one that is too deep.
    private mutating func scanDottedKey(base: Int, reportDepth: Bool, what: String) throws(StopScanning) -> Int {
        var count = 0
        var depthReported = !reportDepth
        while true {
            let start = position
            let length = try scanSimpleKey()
            count += 1
            if length > ConfigPreflight.maxKeyBytes {
                try problem(at: start, "key is \(length) bytes long; a key may be at most \(ConfigPreflight.maxKeyBytes) bytes")
            }
            if !depthReported && base + count > ConfigPreflight.maxDepth {
                try problem(at: start, Self.tooDeep(what))
                depthReported = true
            }
            skipBlanks()
            guard peek() == UInt8(ascii: ".") else { return count }
            advance()
            skipBlanks()
        }
    }

    static func tooDeep(_ what: String) -> String {
        "\(what) nested more than \(ConfigPreflight.maxDepth) levels deep; watchkeeper's settings go at most 3 deep, as in task.retry.attempts"
    }

    /// A bare, "basic" or 'literal' key; returns its length in bytes as written.
    private mutating func scanSimpleKey() throws(StopScanning) -> Int {
        guard let byte = peek() else { throw StopScanning() }
        if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
            // Keys cannot be multi-line strings.
            if peek(1) == byte && peek(2) == byte { throw StopScanning() }
            return try skipSingleLineString()
        }
        var length = 0
        while let byte = peek(), Self.isBareKeyByte(byte) {
            advance()
            length += 1
        }
        if length == 0 { throw StopScanning() }
        return length
    }

    /// TOML's `A-Za-z0-9_-`, and any non-ASCII byte: toml++ may accept Unicode bare keys,
    /// and if it does not, it reports them.
    private static func isBareKeyByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
            return true
        default:
            return byte >= 0x80
        }
    }

    // MARK: Values

    /// What comes next inside a value.
    private enum Next {
        case value(depth: Int)
        /// After an opening bracket or a comma: an element, a key/value pair, or the close.
        case entry
        case afterValue
    }

    /// A value whose key is at `depth`. Arrays and inline tables nest on an explicit
    /// stack, never by recursion, so no file can exhaust the thread's stack; it holds at
    /// most `maxDepth` entries, since deeper containers are skipped over whole.
    private mutating func scanValue(depth: Int, reportDepth: Bool) throws(StopScanning) {
        // Each open container: its closing byte and the depth of what it holds.
        var open: [(closer: UInt8, depth: Int)] = []
        var reportDepth = reportDepth
        var next = Next.value(depth: depth)
        while true {
            switch next {
            case .value(let depth):
                guard let byte = peek() else { throw StopScanning() }
                if byte == UInt8(ascii: "[") || byte == UInt8(ascii: "{") {
                    if depth + 1 > ConfigPreflight.maxDepth {
                        if reportDepth {
                            try problem(at: position, Self.tooDeep("value"))
                            reportDepth = false
                        }
                        try skipContainer()
                        next = .afterValue
                    } else {
                        advance()
                        open.append((byte == UInt8(ascii: "[") ? UInt8(ascii: "]") : UInt8(ascii: "}"), depth + 1))
                        next = .entry
                    }
                } else if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                    try skipString()
                    next = .afterValue
                } else {
                    try skipScalar()
                    next = .afterValue
                }
            case .entry:
                guard let container = open.last else { throw StopScanning() }
                // Newlines and comments: allowed in arrays, tolerated in inline tables (TOML 1.1).
                skipTrivia(newlines: true)
                if peek() == container.closer {
                    advance()
                    open.removeLast()
                    next = .afterValue
                    continue
                }
                try countValue()
                if container.closer == UInt8(ascii: "]") {
                    next = .value(depth: container.depth)
                } else {
                    let base = container.depth - 1
                    let count = try scanDottedKey(base: base, reportDepth: reportDepth, what: "key")
                    if base + count > ConfigPreflight.maxDepth { reportDepth = false }
                    skipBlanks()
                    try expect("=")
                    skipBlanks()
                    next = .value(depth: base + count)
                }
            case .afterValue:
                guard let container = open.last else { return }
                skipTrivia(newlines: true)
                if peek() == container.closer {
                    advance()
                    open.removeLast()
                } else if peek() == UInt8(ascii: ",") {
                    advance()
                    next = .entry
                } else {
                    throw StopScanning()
                }
            }
        }
    }

    /// An array or inline table nested too deep, skipped to its closing bracket by
    /// counting brackets outside strings and comments.
    private mutating func skipContainer() throws(StopScanning) {
        var depth = 0
        while let byte = peek() {
            switch byte {
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                advance()
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                depth -= 1
                advance()
                if depth == 0 { return }
            case UInt8(ascii: "\""), UInt8(ascii: "'"):
                try skipString()
            case UInt8(ascii: "#"):
                skipComment()
            default:
                advance()
            }
        }
        throw StopScanning()
    }

    /// Numbers, booleans, dates and times, made of the characters these use (a date-time
    /// may hold a space); anything else is not a TOML value, and TOMLKit reports it.
    private mutating func skipScalar() throws(StopScanning) {
        var length = 0
        while let byte = peek() {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"),
                 UInt8(ascii: " "), UInt8(ascii: "\t"):
                advance()
                length += 1
            default:
                if length == 0 { throw StopScanning() }
                return
            }
        }
        if length == 0 { throw StopScanning() }
    }

    private mutating func skipString() throws(StopScanning) {
        guard let quote = peek() else { throw StopScanning() }
        if peek(1) == quote && peek(2) == quote {
            try skipMultilineString(quote: quote)
        } else {
            _ = try skipSingleLineString()
        }
    }

    /// `"..."` (backslash escapes) or `'...'`; returns the length of the content in bytes.
    private mutating func skipSingleLineString() throws(StopScanning) -> Int {
        guard let quote = peek() else { throw StopScanning() }
        advance()
        let start = index
        while let byte = peek() {
            if byte == quote {
                let length = index - start
                advance()
                return length
            } else if Self.isNewline(byte) {
                throw StopScanning()
            } else if byte == UInt8(ascii: "\\") && quote == UInt8(ascii: "\"") {
                try skipEscape(multiline: false)
            } else {
                advance()
            }
        }
        throw StopScanning()
    }

    /// A backslash and the character it escapes. TOMLKit hands strings over as C strings,
    /// so the value of `"a\u0000b"` silently became `"a"`: a NUL escape is refused here,
    /// where its position is still known. No string of a configuration needs one.
    private mutating func skipEscape(multiline: Bool) throws(StopScanning) {
        let start = position
        let written: String? = switch peek(1) {
        case UInt8(ascii: "u"): isZeros(from: index + 2, count: 4) ? "\\u0000" : nil
        case UInt8(ascii: "U"): isZeros(from: index + 2, count: 8) ? "\\U00000000" : nil
        case UInt8(ascii: "x"): isZeros(from: index + 2, count: 2) ? "\\x00" : nil  // TOML 1.1
        default: nil
        }
        if let written {
            try problem(at: start, "\(written) is a NUL byte, which would cut the string short: the system reads arguments, environment variables and paths only up to a NUL")
        }
        advance()
        // In a multi-line string a backslash may escape the line end itself; in a
        // single-line one that is an error, TOMLKit's to report.
        if let escaped = peek(), multiline || !Self.isNewline(escaped) { advance() }
    }

    private func isZeros(from start: Int, count: Int) -> Bool {
        start + count <= bytes.count && bytes[start..<start + count].allSatisfy { $0 == UInt8(ascii: "0") }
    }

    /// `"""..."""` or `'''...'''`. Up to two quotes just before the closing three belong
    /// to the content, so a run of up to five quotes ends the string.
    private mutating func skipMultilineString(quote: UInt8) throws(StopScanning) {
        for _ in 0..<3 { advance() }
        while let byte = peek() {
            if byte == UInt8(ascii: "\\") && quote == UInt8(ascii: "\"") {
                try skipEscape(multiline: true)
            } else if byte == quote {
                var run = 0
                while peek() == quote && run < 5 {
                    advance()
                    run += 1
                }
                if run >= 3 { return }
            } else {
                advance()
            }
        }
        throw StopScanning()
    }
}
