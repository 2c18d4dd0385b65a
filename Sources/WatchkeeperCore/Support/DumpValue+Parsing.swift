/// JSON text back into the dump's tree: what the control socket reads from its clients
/// and what the CLI reads from the daemon.
///
/// Hand-written rather than FoundationEssentials' JSONDecoder: it reads a control call 4 to
/// 5 times faster, into the tree the daemon answers from, and refuses a hostile nesting 19
/// times sooner (docs/measurements/control.md, measured again once FoundationEssentials came
/// into the binary through a dependency). Strict RFC 8259: one value, no trailing commas
/// or comments, nesting capped so a hostile client cannot make the parser recurse without
/// bound.
extension DumpValue {
    public struct ParseError: Error, Equatable, CustomStringConvertible {
        public let offset: Int
        public let reason: String

        public var description: String { "invalid JSON at byte \(offset): \(reason)" }
    }

    /// Integers that fit Int64 become `.int`, other numbers `.double`; strings are
    /// `.string` (invalid UTF-8 is refused, as RFC 8259 requires).
    public static func parse(json bytes: some Collection<UInt8>, maxDepth: Int = 64) throws(ParseError) -> DumpValue {
        var parser = JSONParser(bytes: Array(bytes), maxDepth: maxDepth)
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == parser.bytes.count else { throw parser.fail("unexpected data after the value") }
        return value
    }

    public static func parse(json text: String, maxDepth: Int = 64) throws(ParseError) -> DumpValue {
        try parse(json: Array(text.utf8), maxDepth: maxDepth)
    }

    /// Accessors for readers of parsed messages.
    public var stringValue: String? {
        switch self {
        case .string(let value): return value
        case .bytes(let value): return String(validating: value, as: UTF8.self)
        default: return nil
        }
    }

    public var intValue: Int64? {
        switch self {
        case .int(let value): return value
        case .double(let value) where value == value.rounded() && abs(value) < 9e18: return Int64(value)
        default: return nil
        }
    }

    public var doubleValue: Double? {
        switch self {
        case .int(let value): return Double(value)
        case .double(let value): return value
        default: return nil
        }
    }

    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    public var arrayValue: [DumpValue]? {
        if case .array(let values) = self { return values }
        return nil
    }

    public var fields: [DumpField]? {
        if case .object(let fields) = self { return fields }
        return nil
    }
}

private struct JSONParser {
    let bytes: [UInt8]
    let maxDepth: Int
    var index = 0

    init(bytes: [UInt8], maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    func fail(_ reason: String) -> DumpValue.ParseError {
        DumpValue.ParseError(offset: index, reason: reason)
    }

    mutating func skipWhitespace() {
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
    }

    mutating func value(depth: Int) throws(DumpValue.ParseError) -> DumpValue {
        guard depth < maxDepth else { throw fail("nested deeper than \(maxDepth) levels") }
        skipWhitespace()
        guard index < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object(depth: depth)
        case UInt8(ascii: "["): return try array(depth: depth)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0") ... UInt8(ascii: "9"): return try number()
        default: throw fail("unexpected character")
        }
    }

    private mutating func literal(_ word: StaticString) throws(DumpValue.ParseError) {
        let expected = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
        guard bytes.count - index >= expected.count, bytes[index ..< index + expected.count].elementsEqual(expected) else {
            throw fail("unexpected character")
        }
        index += expected.count
    }

    private mutating func object(depth: Int) throws(DumpValue.ParseError) -> DumpValue {
        index += 1
        var fields: [DumpField] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(fields)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
            let key = try string()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            index += 1
            fields.append(DumpField(key, try value(depth: depth + 1)))
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(fields) }
            throw fail("expected ',' or '}'")
        }
    }

    private mutating func array(depth: Int) throws(DumpValue.ParseError) -> DumpValue {
        index += 1
        var values: [DumpValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(values)
        }
        while true {
            values.append(try value(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(values) }
            throw fail("expected ',' or ']'")
        }
    }

    /// Runs between escapes are copied as bytes and validated as UTF-8 once, at the end:
    /// appending them scalar by scalar made a 60 KB string cost 820 µs, 16 times what
    /// JSONDecoder takes (`watchkeeper-bench json`).
    private mutating func string() throws(DumpValue.ParseError) -> String {
        index += 1
        let start = index
        // Empty until the first escape: a string without one is validated in place.
        var decoded: [UInt8] = []
        var runStart = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text: String?
                if !decoded.isEmpty {
                    decoded.append(contentsOf: bytes[runStart ..< index])
                    text = String(validating: decoded, as: UTF8.self)
                } else {
                    text = String(validating: bytes[start ..< index], as: UTF8.self)
                }
                guard let text else { throw fail("invalid UTF-8 in a string") }
                index += 1
                return text
            }
            if byte < 0x20 { throw fail("control character in a string") }
            if byte != UInt8(ascii: "\\") {
                index += 1
                continue
            }
            if decoded.isEmpty { decoded.reserveCapacity(index - start + 16) }
            decoded.append(contentsOf: bytes[runStart ..< index])
            index += 1
            guard index < bytes.count else { break }
            let escape = bytes[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""): decoded.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): decoded.append(UInt8(ascii: "\\"))
            case UInt8(ascii: "/"): decoded.append(UInt8(ascii: "/"))
            case UInt8(ascii: "b"): decoded.append(0x08)
            case UInt8(ascii: "f"): decoded.append(0x0C)
            case UInt8(ascii: "n"): decoded.append(0x0A)
            case UInt8(ascii: "r"): decoded.append(0x0D)
            case UInt8(ascii: "t"): decoded.append(0x09)
            case UInt8(ascii: "u"): decoded.append(contentsOf: String(try unicodeEscape()).utf8)
            default: throw fail("unknown escape")
            }
            runStart = index
        }
        throw fail("unterminated string")
    }

    /// `\uXXXX`, with UTF-16 surrogate pairs joined; a lone surrogate is refused.
    private mutating func unicodeEscape() throws(DumpValue.ParseError) -> Unicode.Scalar {
        let first = try hex4()
        var value = UInt32(first)
        if (0xD800 ... 0xDBFF).contains(first) {
            guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                throw fail("lone UTF-16 surrogate")
            }
            index += 2
            let second = try hex4()
            guard (0xDC00 ... 0xDFFF).contains(second) else { throw fail("lone UTF-16 surrogate") }
            value = 0x10000 + ((UInt32(first) - 0xD800) << 10) + (UInt32(second) - 0xDC00)
        }
        guard let scalar = Unicode.Scalar(value) else { throw fail("lone UTF-16 surrogate") }
        return scalar
    }

    private mutating func hex4() throws(DumpValue.ParseError) -> UInt16 {
        guard bytes.count - index >= 4 else { throw fail("short \\u escape") }
        var value: UInt16 = 0
        for _ in 0 ..< 4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0") ... UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a") ... UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A") ... UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw fail("bad hex digit in a \\u escape")
            }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }

    private mutating func number() throws(DumpValue.ParseError) -> DumpValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw fail("expected a digit") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail("expected a digit after '.'") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail("expected a digit in the exponent") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: bytes[start ..< index], as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        // Double("1e400") is infinity, which JSON cannot carry back (it is written as null).
        guard let value = Double(text), value.isFinite else { throw DumpValue.ParseError(offset: start, reason: "number out of range") }
        return .double(value)
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
