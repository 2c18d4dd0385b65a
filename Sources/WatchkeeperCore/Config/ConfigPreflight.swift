// Checks on the raw bytes of a configuration file, made before TOMLKit sees them.
//
// toml++ (inside TOMLKit) stops at a NUL byte as if the file ended there, so the rest of
// the file was silently ignored; it turns invalid UTF-8 into U+FFFD, which then reached
// jobs' argv; and its time and memory grow with the square of a dotted key's depth and
// of a key's length (a 20 KB file of `[a.a.a...]` took 12 s and 1.2 GiB, a 1 MB key
// 31 s; TOMLSourceMap's paths grow the same way). A watchkeeper configuration is UTF-8
// text with short keys at most three levels deep, so what is refused here never costs a
// valid file, and what reaches TOMLKit is bounded.
//
// The encoding is checked here, the structure in ConfigStructureScanner.swift.

enum ConfigPreflight {
    /// Bytes of one key as written (between the quotes for a quoted key).
    static let maxKeyBytes = 256
    /// Keys from the top of the document: `[a.b]` then `c.d = 1` is 4; each array or
    /// inline table a value opens adds one. watchkeeper's own go 3 deep
    /// (`[[task]]`, `retry = { attempts = 3 }`).
    static let maxDepth = 8
    /// Keys, table headers and array elements. TOMLKit and TOMLSourceMap spend a few
    /// hundred bytes on each (14 MB of small nested arrays took 3.2 GB), and a real
    /// configuration has a few thousand at most.
    static let maxValues = 100_000
    /// Problems listed before the check gives up: a binary file would otherwise give a
    /// line per byte.
    static let maxProblems = 20

    struct Problem: Equatable, Sendable {
        let position: SourcePosition
        let message: String
    }

    /// Every problem found (up to `maxProblems`, then one saying the check stopped);
    /// empty when the text may go to TOMLKit.
    static func check(_ bytes: [UInt8]) -> [Problem] {
        bytes.withUnsafeBufferPointer { buffer in
            var report = Report()
            checkEncoding(buffer, into: &report)
            if !report.isFull {
                var scanner = ConfigStructureScanner(bytes: buffer, report: report)
                scanner.scanDocument()
                report = scanner.report
            }
            return report.problems
        }
    }

    // MARK: - Encoding

    /// NUL bytes and invalid UTF-8 at their line and column (columns count Unicode
    /// scalars; an invalid sequence counts as one, as the U+FFFD an editor shows). A run of
    /// adjacent bad bytes is one mistake, one problem.
    static func checkEncoding(_ bytes: UnsafeBufferPointer<UInt8>, into report: inout Report) {
        var line = 1
        var column = 1
        var index = startAfterByteOrderMark(bytes)
        while index < bytes.count {
            let byte = bytes[index]
            if byte == 0 {
                guard report.add(SourcePosition(line: line, column: column), "NUL byte in the file: a configuration file is text, and TOML allows no NUL byte anywhere") else { return }
                while index < bytes.count && bytes[index] == 0 {
                    index += 1
                    column += 1
                }
                continue
            }
            if byte < 0x80 {
                if byte == UInt8(ascii: "\n") {
                    line += 1
                    column = 1
                } else {
                    column += 1
                }
                index += 1
                continue
            }
            var (length, valid) = utf8Sequence(bytes, at: index)
            if valid {
                column += 1
                index += length
                continue
            }
            let start = SourcePosition(line: line, column: column)
            var bad: [UInt8] = []
            while !valid {
                bad += bytes[index..<index + length]
                column += 1
                index += length
                guard index < bytes.count, bytes[index] >= 0x80 else { break }
                (length, valid) = utf8Sequence(bytes, at: index)
            }
            let shown = bad.prefix(8).map { "0x" + hex($0) }.joined(separator: " ") + (bad.count > 8 ? " ..." : "")
            let noun = bad.count == 1 ? "byte" : "bytes"
            guard report.add(start, "invalid UTF-8 \(noun) \(shown): a configuration file must be UTF-8 text") else { return }
        }
    }

    /// The length of the UTF-8 sequence at `index` and whether it is valid; an invalid one
    /// is its longest prefix that could still have become valid (Unicode's "maximal
    /// subpart"), at least one byte, so the bytes after it are checked on their own.
    static func utf8Sequence(_ bytes: UnsafeBufferPointer<UInt8>, at index: Int) -> (length: Int, valid: Bool) {
        let lead = bytes[index]
        let needed: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: needed = 1
        case 0xE0: needed = 2; low = 0xA0  // overlong
        case 0xED: needed = 2; high = 0x9F  // UTF-16 surrogates
        case 0xE1...0xEF: needed = 2
        case 0xF0: needed = 3; low = 0x90  // overlong
        case 0xF4: needed = 3; high = 0x8F  // above U+10FFFF
        case 0xF1...0xF3: needed = 3
        default: return (1, false)
        }
        for offset in 1...needed {
            guard index + offset < bytes.count, (low...high).contains(bytes[index + offset]) else { return (offset, false) }
            low = 0x80
            high = 0xBF
        }
        return (needed + 1, true)
    }

    /// Editors hide a byte order mark, and TOMLSourceMap does not count it as a column.
    static func startAfterByteOrderMark(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        bytes.count >= 3 && bytes[0] == 0xEF && bytes[1] == 0xBB && bytes[2] == 0xBF ? 3 : 0
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
    }

    // MARK: - Report

    struct Report {
        private(set) var problems: [Problem] = []
        private(set) var isFull = false

        /// False once `maxProblems` are listed: the caller stops, and the list ends with
        /// a line saying where the check stopped.
        mutating func add(_ position: SourcePosition, _ message: String) -> Bool {
            guard !isFull else { return false }
            guard problems.count < ConfigPreflight.maxProblems else {
                problems.append(Problem(position: position, message: "more than \(ConfigPreflight.maxProblems) problems like these; the check stopped here"))
                isFull = true
                return false
            }
            problems.append(Problem(position: position, message: message))
            return true
        }
    }
}
