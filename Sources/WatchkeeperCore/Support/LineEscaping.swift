/// Text from outside the daemon (file names, a job's output, configuration values) shown
/// where one line must stay one line: the stderr log and the text state dump. A newline
/// in a file name would otherwise start a second, forged log line, and an ESC sequence
/// could rewrite what a terminal shows. The journal needs none of this: its fields are
/// length-delimited and keep the exact bytes.
///
/// The escapes are C's: `\n`, `\r`, `\t`, `\\`, `\xNN` for any other control byte
/// (0x00-0x1F, 0x7F) and for each byte that is not valid UTF-8, and `\uNNNN` (lower-case
/// hex) for the scalars that `needsUnicodeEscape` lists: the Unicode controls
/// U+0080-U+009F, the line and paragraph separators U+2028 and U+2029, which some
/// terminals and viewers also treat as line breaks, and the invisible and bidirectional
/// format characters (U+061C, U+200B-U+200F, U+202A-U+202E, U+2060-U+2064,
/// U+2066-U+2069, U+FEFF), with which a name could hide part of itself or show its
/// characters in another order (`report\u{202E}txt.exe` reads as `reportexe.txt`).
/// Everything else, non-ASCII text included, is kept as it is. A backslash is doubled so
/// that a reader can always tell an escape from a name that contains one literally.
public enum LineEscaping {
    /// The escaped form of `bytes`: one line, valid UTF-8.
    public static func escaped(_ bytes: some Collection<UInt8>) -> String {
        escape(bytes, keepingNewlines: false, escapingBackslashes: true)
    }

    public static func escaped(_ text: String) -> String {
        escaped(text.utf8)
    }

    /// A key or a value of the ` (key=value, ...)` suffix of a stderr log line: as
    /// `escaped(_:)`, and in double quotes, with `"` written as `\"`, unless it is non-empty
    /// and made only of letters, digits and `._/:@+-`. A file name such as
    /// `a, outcome=ok, path=/x` then stays one value: a reader splits the pairs at `, `
    /// outside quotes, and inside them a backslash always starts an escape (`\"`, `\\`,
    /// `\n`, `\xNN`, `\uNNNN`).
    public static func field(_ bytes: some Collection<UInt8>) -> String {
        if !bytes.isEmpty && bytes.allSatisfy(isBareFieldByte) {
            return String(decoding: bytes, as: UTF8.self)
        }
        let text = escaped(bytes)
        var quoted: [UInt8] = [UInt8(ascii: "\"")]
        quoted.reserveCapacity(text.utf8.count + 2)
        for byte in text.utf8 {
            if byte == UInt8(ascii: "\"") { quoted.append(UInt8(ascii: "\\")) }
            quoted.append(byte)
        }
        quoted.append(UInt8(ascii: "\""))
        return String(decoding: quoted, as: UTF8.self)
    }

    public static func field(_ text: String) -> String {
        field(text.utf8)
    }

    /// Names, run IDs, numbers, times and most paths: nothing a reader could take for a
    /// separator, a quote or an escape.
    private static func isBareFieldByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "/"), UInt8(ascii: ":"), UInt8(ascii: "@"), UInt8(ascii: "+"),
             UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    /// One line, with backslashes kept as they are: for messages that quote what a file
    /// says, such as a configuration diagnostic, whose own text may hold backslashes
    /// (`unknown escape sequence '\q'`) that doubling would make harder to read.
    public static func controlsEscaped(_ text: String) -> String {
        escape(text.utf8, keepingNewlines: false, escapingBackslashes: false)
    }

    /// Text that is already formatted for reading, and may span lines on purpose (the
    /// text state dump), or that carries a job's output: newlines stay, every other
    /// control character is escaped. Backslashes stay as they are, since such text may
    /// already hold escapes made by `escaped(_:)`.
    static func controlsEscaped(inFormatted text: String) -> String {
        escape(text.utf8, keepingNewlines: true, escapingBackslashes: false)
    }

    private static func escape(_ bytes: some Collection<UInt8>, keepingNewlines: Bool, escapingBackslashes: Bool) -> String {
        let backslash = UInt8(ascii: "\\")
        // Most log text is plain: printable ASCII (no backslash) passes unchanged.
        if bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && ($0 != backslash || !escapingBackslashes) }) {
            return String(decoding: bytes, as: UTF8.self)
        }
        var output: [UInt8] = []
        Array(bytes).withUnsafeBufferPointer { input in
            append(input, to: &output, keepingNewlines: keepingNewlines, escapingBackslashes: escapingBackslashes)
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// A job's output line as stderr shows it, appended to `output`: controls escaped,
    /// backslashes kept (as `controlsEscaped(inFormatted:)`), without making a String.
    static func appendControlsEscaped(_ line: UnsafeBufferPointer<UInt8>, to output: inout [UInt8]) {
        append(line, to: &output, keepingNewlines: false, escapingBackslashes: false)
    }

    /// Runs of bytes that need no escape are copied whole: output lines are mostly plain.
    private static func append(_ input: UnsafeBufferPointer<UInt8>, to output: inout [UInt8], keepingNewlines: Bool, escapingBackslashes: Bool) {
        let backslash = UInt8(ascii: "\\")
        output.reserveCapacity(output.count + input.count + 16)
        var index = 0
        while index < input.count {
            var plainEnd = index
            while plainEnd < input.count {
                let byte = input[plainEnd]
                if byte < 0x20 || byte >= 0x7F || (byte == backslash && escapingBackslashes) { break }
                plainEnd += 1
            }
            if plainEnd > index {
                output.append(contentsOf: UnsafeBufferPointer(rebasing: input[index..<plainEnd]))
                index = plainEnd
                continue
            }
            let byte = input[index]
            if byte < 0x80 {
                switch byte {
                case UInt8(ascii: "\n") where keepingNewlines: output.append(byte)
                case UInt8(ascii: "\n"): output += Array("\\n".utf8)
                case UInt8(ascii: "\r"): output += Array("\\r".utf8)
                case UInt8(ascii: "\t"): output += Array("\\t".utf8)
                case backslash where escapingBackslashes: output += [backslash, backslash]
                default: appendByteEscape(byte, to: &output)
                }
                index += 1
                continue
            }
            // A malformed sequence is escaped byte by byte.
            let (decoded, length) = UTF8Sequence.decode(input, at: index, end: input.count)
            guard let scalar = decoded else {
                appendByteEscape(byte, to: &output)
                index += 1
                continue
            }
            if needsUnicodeEscape(scalar) {
                let hex = String(scalar, radix: 16)
                output += Array(("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).utf8)
            } else {
                output.append(contentsOf: UnsafeBufferPointer(rebasing: input[index..<index + length]))
            }
            index += length
        }
    }

    /// Scalars above ASCII that are shown as `\uNNNN`: C1 controls, line breaks, and the
    /// characters that are invisible or change the direction of the text around them. All
    /// are in the Basic Multilingual Plane, so four hex digits always suffice.
    static func needsUnicodeEscape(_ scalar: UInt32) -> Bool {
        switch scalar {
        case 0x80...0x9F,  // C1 controls (U+0085 NEXT LINE, U+009B the 8-bit CSI)
             0x061C,  // ARABIC LETTER MARK
             0x200B...0x200F,  // zero width space, non-joiner, joiner; LEFT-TO-RIGHT and RIGHT-TO-LEFT MARK
             0x2028...0x202E,  // line and paragraph separators; bidirectional embeddings and overrides
             0x2060...0x2064,  // word joiner and the invisible operators
             0x2066...0x2069,  // bidirectional isolates
             0xFEFF:  // zero width no-break space (byte order mark)
            return true
        default:
            return false
        }
    }

    private static func appendByteEscape(_ byte: UInt8, to output: inout [UInt8]) {
        let digits = Array("0123456789abcdef".utf8)
        output += [UInt8(ascii: "\\"), UInt8(ascii: "x"), digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]]
    }
}
