/// Text a user controls (file names, job output, error strings with paths) on its way to
/// a one-line-per-entry log: control bytes and invalid UTF-8 become visible escapes, so a
/// name with a newline cannot forge a second line. The journal's own fields keep the bytes.
public enum LogText {
    public static func escaped(_ bytes: some Collection<UInt8>) -> String {
        let bytes = Array(bytes)
        var output = ""
        var index = 0
        while index < bytes.count {
            let width = sequenceWidth(bytes, at: index)
            if width == 0 {
                output += "\\x" + hex(bytes[index])
                index += 1
                continue
            }
            for scalar in String(decoding: bytes[index..<(index + width)], as: UTF8.self).unicodeScalars { append(scalar, to: &output) }
            index += width
        }
        return output
    }

    /// The length of the well-formed UTF-8 sequence at `index`, or 0 (overlong forms,
    /// surrogates and values past U+10FFFF are not well-formed).
    private static func sequenceWidth(_ bytes: [UInt8], at index: Int) -> Int {
        let lead = bytes[index]
        let width: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xbf
        switch lead {
        case 0x00...0x7f: return 1
        case 0xc2...0xdf: width = 2
        case 0xe0: width = 3; low = 0xa0
        case 0xe1...0xec, 0xee...0xef: width = 3
        case 0xed: width = 3; high = 0x9f
        case 0xf0: width = 4; low = 0x90
        case 0xf1...0xf3: width = 4
        case 0xf4: width = 4; high = 0x8f
        default: return 0
        }
        guard index + width <= bytes.count else { return 0 }
        for offset in 1..<width {
            let byte = bytes[index + offset]
            let range: ClosedRange<UInt8> = offset == 1 ? low...high : 0x80...0xbf
            guard range.contains(byte) else { return 0 }
        }
        return width
    }

    public static func escaped(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7f }) else { return text }
        var output = ""
        for scalar in text.unicodeScalars { append(scalar, to: &output) }
        return output
    }

    private static func append(_ scalar: Unicode.Scalar, to output: inout String) {
        switch scalar.value {
        case 0x0a: output += "\\n"
        case 0x0d: output += "\\r"
        case 0x09: output += "\\t"
        case 0..<0x20, 0x7f: output += "\\x" + hex(UInt8(scalar.value))
        default: output.unicodeScalars.append(scalar)
        }
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0xf)]])
    }
}

extension DumpValue {
    /// Bytes a user controls (paths), in their escaped text form.
    static func bytes(_ value: [UInt8]) -> DumpValue { .string(LogText.escaped(value)) }
}
