/// The state dump's data model: one tree that renders both as the versioned JSON
/// (state.json and the journal field) and as the human-readable MESSAGE, so the
/// two can never disagree. Objects keep their key order.
///
/// Text from outside the daemon (file names, job output, configuration values) is
/// escaped in the text rendering (`LineEscaping`): a name with a newline must not forge a
/// line of the dump. The JSON keeps every value exactly.
public indirect enum DumpValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    /// Bytes that need not be UTF-8, such as a path as the kernel gave it; a `String`
    /// would turn each invalid byte into U+FFFD and lose the name. In JSON: a string when
    /// the bytes are valid UTF-8, otherwise an array of the byte values (0-255), the
    /// convention of `journalctl -o json` for binary fields, so a reader gets the exact
    /// bytes back either way. In text: printable UTF-8 as it is, the rest as `\xNN`.
    case bytes([UInt8])
    case array([DumpValue])
    case object([DumpField])

    public subscript(key: String) -> DumpValue? {
        guard case .object(let fields) = self else { return nil }
        return fields.first { $0.key == key }?.value
    }
}

public struct DumpField: Sendable, Equatable {
    public let key: String
    public let value: DumpValue

    public init(_ key: String, _ value: DumpValue) {
        self.key = key
        self.value = value
    }
}

extension DumpValue {
    public var json: String {
        var output = ""
        writeJSON(into: &output)
        return output
    }

    private func writeJSON(into output: inout String) {
        switch self {
        case .null: output += "null"
        case .bool(let value): output += value ? "true" : "false"
        case .int(let value): output += String(value)
        case .double(let value): output += value.isFinite ? String(value) : "null"
        case .string(let value): DumpValue.writeJSONString(value, into: &output)
        case .bytes(let value):
            if let text = String(validating: value, as: UTF8.self) {
                DumpValue.writeJSONString(text, into: &output)
            } else {
                output += "[" + value.map { String($0) }.joined(separator: ",") + "]"
            }
        case .array(let values):
            output += "["
            for (index, value) in values.enumerated() {
                if index > 0 { output += "," }
                value.writeJSON(into: &output)
            }
            output += "]"
        case .object(let fields):
            output += "{"
            for (index, field) in fields.enumerated() {
                if index > 0 { output += "," }
                DumpValue.writeJSONString(field.key, into: &output)
                output += ":"
                field.value.writeJSON(into: &output)
            }
            output += "}"
        }
    }

    /// RFC 8259's escapes, plus `\uNNNN` for what `LineEscaping` shows that way (C1 controls,
    /// U+2028/U+2029, the invisible and bidirectional format characters): the same text to
    /// any JSON reader, but `watchkeeper status --json` on a terminal cannot show a file
    /// name reordered by a U+202E in it.
    static func writeJSONString(_ text: String, into output: inout String) {
        output += "\""
        // Most names and values need no escape: appended whole, not scalar by scalar (a
        // Status reply of 200 tasks has thousands of them). Non-ASCII text takes the loop.
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C }) {
            output += text
            output += "\""
            return
        }
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F || LineEscaping.needsUnicodeEscape(scalar.value):
                let hex = String(scalar.value, radix: 16)
                output += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }

    /// Indented `key: value` lines: what `journalctl -o cat` shows an operator.
    public func text(indent: Int = 0) -> String {
        var lines: [String] = []
        appendText(to: &lines, indent: indent)
        return lines.joined(separator: "\n")
    }

    private var isScalar: Bool {
        switch self {
        case .array, .object: return false
        default: return true
        }
    }

    var scalarText: String {
        switch self {
        case .null: return "-"
        case .bool(let value): return value ? "yes" : "no"
        case .int(let value): return String(value)
        case .double(let value): return roundedString(value, digits: 3)
        case .string(let value): return value.isEmpty ? "\"\"" : LineEscaping.escaped(value)
        case .bytes(let value): return value.isEmpty ? "\"\"" : LineEscaping.escaped(value)
        case .array(let values): return values.map(\.scalarText).joined(separator: ", ")
        case .object: return "{…}"
        }
    }

    private func appendText(to lines: inout [String], indent: Int) {
        let pad = String(repeating: " ", count: indent)
        switch self {
        case .object(let fields):
            for field in fields {
                // Keys can be names from the configuration, so they are escaped like values.
                let key = LineEscaping.escaped(field.key)
                switch field.value {
                case .array(let values) where values.allSatisfy(\.isScalar):
                    lines.append("\(pad)\(key): \(values.isEmpty ? "none" : field.value.scalarText)")
                case .array(let values):
                    lines.append("\(pad)\(key):")
                    for value in values {
                        value.appendListItem(to: &lines, indent: indent + 2)
                    }
                case .object(let nested) where nested.isEmpty:
                    lines.append("\(pad)\(key): none")
                case .object:
                    lines.append("\(pad)\(key):")
                    field.value.appendText(to: &lines, indent: indent + 2)
                default:
                    lines.append("\(pad)\(key): \(field.value.scalarText)")
                }
            }
        case .array(let values):
            for value in values { value.appendListItem(to: &lines, indent: indent) }
        default:
            lines.append(pad + scalarText)
        }
    }

    /// An object in a list reads as one line when it is flat: "- kind: signal, target: SIGHUP, …".
    private func appendListItem(to lines: inout [String], indent: Int) {
        let pad = String(repeating: " ", count: indent)
        guard case .object(let fields) = self else {
            lines.append("\(pad)- \(scalarText)")
            return
        }
        if fields.allSatisfy({ $0.value.isScalar }) {
            lines.append("\(pad)- " + fields.map { "\(LineEscaping.escaped($0.key)): \($0.value.scalarText)" }.joined(separator: ", "))
        } else {
            var nested: [String] = []
            appendText(to: &nested, indent: indent + 2)
            if let first = nested.first {
                nested[0] = pad + "- " + first.dropFirst(indent + 2)
            }
            lines += nested
        }
    }
}
