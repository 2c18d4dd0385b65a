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

/// All the problems of one file, in source order.
public struct ConfigErrors: Error, Sendable, CustomStringConvertible {
    public let diagnostics: [ConfigDiagnostic]

    public init(_ diagnostics: [ConfigDiagnostic]) {
        self.diagnostics = diagnostics.sorted {
            ($0.position?.line ?? 0, $0.position?.column ?? 0) < ($1.position?.line ?? 0, $1.position?.column ?? 0)
        }
    }

    public var description: String { diagnostics.map(\.description).joined(separator: "\n") }

    /// One line for STATUS= and the dump: the first problem and how many follow.
    public var summary: String {
        guard let first = diagnostics.first else { return "no errors" }
        let more = diagnostics.count > 1 ? " (and \(diagnostics.count - 1) more)" : ""
        return first.description + more
    }
}
