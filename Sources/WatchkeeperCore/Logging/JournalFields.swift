import Logging

/// How a log event becomes a journal entry. Kept free of I/O so the mapping can
/// be tested on its own.
public enum JournalFields {
    /// Metadata keys that carry a journal field of their own rather than a
    /// WATCHKEEPER_-prefixed one.
    public static let messageIDKey = "message_id"

    public static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: return 7
        case .info: return 6
        case .notice: return 5
        case .warning: return 4
        case .error: return 3
        case .critical: return 2
        }
    }

    /// journald accepts field names of [A-Z0-9_], not starting with '_' (trusted
    /// fields) or a digit, at most 64 characters. Every metadata key gets our
    /// prefix, which both satisfies the first-character rule and keeps our fields
    /// from shadowing systemd's (`PRIORITY`, `MESSAGE`, ...).
    public static func fieldName(forMetadataKey key: String) -> String {
        // Every byte of the name is ASCII, so it is built as bytes: a String per letter
        // (`uppercased`) cost each run's journal record nine allocations per field.
        var name = Array(prefix)
        var lastWasUnderscore = true
        for scalar in key.unicodeScalars {
            let mapped: UInt8
            switch scalar {
            case "a"..."z": mapped = UInt8(scalar.value) - 32
            case "A"..."Z", "0"..."9": mapped = UInt8(scalar.value)
            default: mapped = underscore
            }
            if mapped == underscore && lastWasUnderscore { continue }
            name.append(mapped)
            lastWasUnderscore = mapped == underscore
        }
        if name.count > 64 { name.removeLast(name.count - 64) }
        while name.last == underscore && name.count > prefix.count { name.removeLast() }
        if name.count == prefix.count { name += Array("FIELD".utf8) }
        return String(decoding: name, as: UTF8.self)
    }

    private static let prefix = Array("WATCHKEEPER_".utf8)
    private static let underscore = UInt8(ascii: "_")

    /// Nested metadata flattens into one field per leaf: ["job": ["pid": 3]] → WATCHKEEPER_JOB_PID=3.
    public static func flatten(_ metadata: Logger.Metadata, prefix: String = "") -> [(key: String, value: String)] {
        var result: [(key: String, value: String)] = []
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            let fullKey = prefix.isEmpty ? key : "\(prefix)_\(key)"
            switch value {
            case .string(let text): result.append((fullKey, text))
            case .stringConvertible(let convertible): result.append((fullKey, convertible.description))
            case .array(let values): result.append((fullKey, values.map(\.description).joined(separator: ",")))
            case .dictionary(let nested): result += flatten(nested, prefix: fullKey)
            }
        }
        return result
    }

    /// The complete list of `FIELD=value` pairs for one event, in sending order.
    public static func fields(
        level: Logger.Level,
        message: String,
        metadata: Logger.Metadata,
        label: String,
        file: String,
        function: String,
        line: UInt
    ) -> [(name: String, value: String)] {
        var fields: [(name: String, value: String)] = [
            ("MESSAGE", message),
            ("PRIORITY", String(priority(level))),
            ("SYSLOG_IDENTIFIER", "watchkeeper"),
            ("CODE_FILE", file),
            ("CODE_LINE", String(line)),
            ("CODE_FUNC", function),
            ("WATCHKEEPER_LOGGER", label),
        ]
        for (key, value) in flatten(metadata) {
            if key == messageIDKey {
                fields.append(("MESSAGE_ID", value))
            } else {
                fields.append((fieldName(forMetadataKey: key), value))
            }
        }
        return fields
    }
}
