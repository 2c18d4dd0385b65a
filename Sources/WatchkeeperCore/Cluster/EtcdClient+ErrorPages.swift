/// Answers that are not etcd's JSON, said in one short line (issue 35): a proxy or web
/// server at a wrong endpoint answers with a whole HTML page, which must not reach the
/// journal line and `status` newlines and all.
extension EtcdClient {
    /// What a server that is not etcd's gateway answered (a proxy's or web server's error
    /// page at a wrong endpoint), as the one short line the journal and `status` show: an
    /// HTML page's title (or its text without tags), white space made single spaces,
    /// escaped, at most 160 characters.
    static func summary(ofBody body: [UInt8], status: Int) -> String {
        var text = String(decoding: body.prefix(64 * 1024), as: UTF8.self)
        if text.contains("<") && text.contains(">") {
            // Tags are ASCII: lower-casing keeps the offsets of the characters around them.
            let lower = Array(text.lowercased().utf8), bytes = Array(text.utf8)
            let title = Array("<title>".utf8)
            if lower.count == bytes.count, let open = ByteSearch.firstOffset(of: title, in: lower),
               let close = ByteSearch.firstOffset(of: Array("</title>".utf8), in: lower, from: open + title.count) {
                text = String(decoding: bytes[open + title.count..<close], as: UTF8.self)
            } else {
                var inTag = false
                text = String(text.filter { character in
                    if character == "<" { inTag = true; return false }
                    if character == ">" { inTag = false; return false }
                    return !inTag
                })
            }
        }
        let line = oneLine(text)
        return line.isEmpty ? "HTTP \(status)" : "HTTP \(status): \(line)"
    }

    /// `text` on one line, escaped, at most 160 characters.
    static func oneLine(_ text: String) -> String {
        let single = text.split(whereSeparator: { $0.isWhitespace || $0.isNewline }).joined(separator: " ")
        let escaped = LineEscaping.escaped(single)
        return escaped.count > 160 ? String(escaped.prefix(159)) + "…" : escaped
    }
}
