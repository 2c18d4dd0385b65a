/// One problem found in a configuration file, printed the way compilers print
/// theirs so editors and CI can jump to it: `PATH:LINE:COLUMN: message`.
public struct ConfigDiagnostic: Error, Equatable, Sendable, CustomStringConvertible {
    public let file: String
    public let position: SourcePosition?
    public let message: String

    /// Messages quote what the file says (keys, values, the parser's view of the text),
    /// and a key such as `"a\nb"` holds a newline: printed raw it began a second line, one
    /// that could pass for another diagnostic, and an ESC could drive the terminal. Controls
    /// are escaped here, once, for every place a diagnostic goes (check-config, the log,
    /// STATUS=, the dump, the control socket).
    public init(file: String, position: SourcePosition?, message: String) {
        self.file = file
        self.position = position
        self.message = LineEscaping.controlsEscaped(message)
    }

    public var description: String {
        let file = LineEscaping.controlsEscaped(file)
        guard let position else { return "\(file): \(message)" }
        return "\(file):\(position.line):\(position.column): \(message)"
    }
}

/// The problems of one file, in source order: the first `kept` of them, and how many there
/// were. A file with 99,000 unknown keys is refused with 20 lines and "and 98,980 more", not
/// a 23 MB log line and reply kept until the next good reload.
public struct ConfigErrors: Error, Sendable, CustomStringConvertible {
    public static let kept = 20

    public let diagnostics: [ConfigDiagnostic]
    /// Every problem found, `diagnostics` and those left out.
    public let total: Int

    /// `limit`: how many to keep; the preflight's list is bounded already (20 and a last
    /// one saying where it stopped) and keeps all.
    public init(_ diagnostics: [ConfigDiagnostic], total: Int? = nil, limit: Int = Self.kept) {
        let sorted = diagnostics.sorted {
            ($0.position?.line ?? 0, $0.position?.column ?? 0) < ($1.position?.line ?? 0, $1.position?.column ?? 0)
        }
        self.diagnostics = Array(sorted.prefix(limit))
        self.total = max(total ?? diagnostics.count, self.diagnostics.count)
    }

    /// Problems found beyond those kept.
    public var omitted: Int { total - diagnostics.count }

    /// What the log, the reply and the dump list: the kept problems and, if any were left
    /// out, a last line saying how many.
    public var lines: [String] {
        diagnostics.map(\.description) + (omitted > 0 ? ["... and \(omitted) more error(s), not listed"] : [])
    }

    public var description: String { lines.joined(separator: "\n") }

    /// One line for STATUS= and the dump: the first problem and how many follow.
    public var summary: String {
        guard let first = diagnostics.first else { return "no errors" }
        let more = total > 1 ? " (and \(total - 1) more)" : ""
        return first.description + more
    }
}
