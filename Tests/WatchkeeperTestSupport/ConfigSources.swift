#if canImport(XCTest)
import WatchkeeperCore
import XCTest

// A configuration given as text and parsed as `ConfigLoader.load` would parse the file,
// under one path that only the diagnostics show.

/// The path every configuration source in the tests is parsed as.
public let configPath = "/etc/watchkeeper/watchkeeper.toml"

/// The configuration `source` gives; nil, and a failure naming every diagnostic, if it is refused.
public func parsedConfiguration(
    _ source: String, environment: [String: String] = [:], file: StaticString = #filePath, line: UInt = #line
) -> Configuration? {
    switch ConfigLoader.parse(source: source, path: configPath, environment: environment) {
    case .success(let configuration):
        return configuration
    case .failure(let errors):
        XCTFail("expected the file to load, got:\n\(errors.description)", file: file, line: line)
        return nil
    }
}

/// Every diagnostic for `source`; none, and a failure, if it loads.
public func configErrors(
    _ source: String, environment: [String: String] = [:], file: StaticString = #filePath, line: UInt = #line
) -> [ConfigDiagnostic] {
    switch ConfigLoader.parse(source: source, path: configPath, environment: environment) {
    case .success:
        XCTFail("expected the file to be refused", file: file, line: line)
        return []
    case .failure(let errors):
        return errors.diagnostics
    }
}

/// Exactly one diagnostic, for `configPath` at `line:column`, with exactly this message.
public func assertSingleDiagnostic(
    _ diagnostics: [ConfigDiagnostic], at position: (Int, Int), _ message: String,
    file: StaticString = #filePath, line: UInt = #line
) {
    XCTAssertEqual(diagnostics.count, 1, "diagnostics:\n\(ConfigErrors(diagnostics))", file: file, line: line)
    guard let only = diagnostics.first else { return }
    XCTAssertEqual(only.file, configPath, file: file, line: line)
    XCTAssertEqual(only.position, SourcePosition(line: position.0, column: position.1), "position", file: file, line: line)
    XCTAssertEqual(only.message, message, file: file, line: line)
}

/// `source` is refused with exactly one diagnostic, at `line:column`, with exactly this message.
public func assertSingleConfigError(
    _ source: String, at position: (Int, Int), _ message: String, environment: [String: String] = [:],
    file: StaticString = #filePath, line: UInt = #line
) {
    assertSingleDiagnostic(configErrors(source, environment: environment, file: file, line: line), at: position, message,
                           file: file, line: line)
}
#endif
