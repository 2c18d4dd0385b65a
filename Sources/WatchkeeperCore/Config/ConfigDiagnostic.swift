/// One problem found in a configuration file, printed the way compilers print
/// theirs so editors and CI can jump to it: `PATH:LINE:COLUMN: message`.
public struct ConfigDiagnostic: Error, Equatable, Sendable, CustomStringConvertible {
    public let file: String
    public let position: SourcePosition?
    public let message: String

    public init(file: String, position: SourcePosition?, message: String) {
        self.file = file
        self.position = position
        self.message = message
    }

    public var description: String {
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
