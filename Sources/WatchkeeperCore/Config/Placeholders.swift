/// `{name}` placeholders inside single argv elements. A value is substituted as
/// bytes into the one element that names it: never split into several arguments,
/// never interpreted by a shell, so a file called `-rf *` or `$(reboot)` arrives
/// as exactly those bytes. `{{` and `}}` stand for literal braces.
public enum Placeholders {
    public enum Piece: Equatable, Sendable {
        case literal([UInt8])
        case placeholder(String)
    }

    public struct Problem: Error, Equatable, Sendable {
        public let message: String
    }

    public static func parse(_ template: String) -> Result<[Piece], Problem> {
        var pieces: [Piece] = []
        var literal: [UInt8] = []
        let bytes = Array(template.utf8)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "{") {
                if index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "{") {
                    literal.append(byte)
                    index += 2
                    continue
                }
                guard let close = bytes[(index + 1)...].firstIndex(of: UInt8(ascii: "}")) else {
                    return .failure(Problem(message: "unclosed \"{\" in \"\(template)\" (write \"{{\" for a literal brace)"))
                }
                let name = String(decoding: bytes[(index + 1)..<close], as: UTF8.self)
                guard !name.isEmpty, name.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || $0 == "_") }) else {
                    return .failure(Problem(message: "invalid placeholder \"{\(name)}\" in \"\(template)\" (write \"{{\" for a literal brace)"))
                }
                if !literal.isEmpty {
                    pieces.append(.literal(literal))
                    literal = []
                }
                pieces.append(.placeholder(name))
                index = close + 1
            } else if byte == UInt8(ascii: "}") {
                guard index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "}") else {
                    return .failure(Problem(message: "unmatched \"}\" in \"\(template)\" (write \"}}\" for a literal brace)"))
                }
                literal.append(byte)
                index += 2
            } else {
                literal.append(byte)
                index += 1
            }
        }
        if !literal.isEmpty { pieces.append(.literal(literal)) }
        return .success(pieces)
    }

    /// The first placeholder not in `known`, as a message naming the known ones.
    public static func check(_ template: String, known: [String]) -> Problem? {
        switch parse(template) {
        case .failure(let problem):
            return problem
        case .success(let pieces):
            for case .placeholder(let name) in pieces where !known.contains(name) {
                return Problem(message: "unknown placeholder \"{\(name)}\" in \"\(template)\" (known: \(known.map { "{\($0)}" }.joined(separator: ", ")))")
            }
            return nil
        }
    }

    /// Substitutes into an already validated template.
    public static func expand(_ template: String, values: [String: [UInt8]]) -> [UInt8] {
        guard case .success(let pieces) = parse(template) else { return Array(template.utf8) }
        var result: [UInt8] = []
        for piece in pieces {
            switch piece {
            case .literal(let bytes): result += bytes
            case .placeholder(let name): result += values[name] ?? []
            }
        }
        return result
    }
}
