/// UTF-8 read byte by byte, for names and output that need not be valid UTF-8: a glob
/// matches a file name's characters, and a log line escapes the bytes that are not one.
enum UTF8Sequence {
    /// The character starting at `index`: a well-formed UTF-8 sequence (RFC 3629: no
    /// overlongs, surrogates or values past U+10FFFF) with its scalar value, or else the
    /// single byte there with no scalar.
    static func decode<Bytes: RandomAccessCollection<UInt8>>(_ bytes: Bytes, at index: Int, end: Int) -> (scalar: UInt32?, length: Int)
    where Bytes.Index == Int {
        let lead = bytes[index]
        if lead < 0x80 { return (UInt32(lead), 1) }
        let length: Int
        var secondLow: UInt8 = 0x80
        var secondHigh: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; secondLow = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; secondHigh = 0x9F
        case 0xF0: length = 4; secondLow = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; secondHigh = 0x8F
        default: return (nil, 1)
        }
        guard end - index >= length else { return (nil, 1) }
        var value = UInt32(lead) & (0x7F >> length)
        for offset in 1..<length {
            let byte = bytes[index + offset]
            let low = offset == 1 ? secondLow : 0x80
            let high = offset == 1 ? secondHigh : 0xBF
            guard byte >= low, byte <= high else { return (nil, 1) }
            value = value << 6 | UInt32(byte & 0x3F)
        }
        return (value, length)
    }
}
