@testable import ArgumentParser
import ArgumentParserToolInfo
import Foundation
import WatchkeeperTestSupport
import XCTest

/// `watchkeeper --experimental-dump-help` is written by the vendored ArgumentParser's own JSON
/// writer, not Foundation's (Vendor/swift-argument-parser/PATCHES.md): for any tool
/// description it must write the JSON Foundation's encoder writes, which tools such as
/// ArgumentParser's generate-manual read back with Foundation's decoder.
final class HelpDumpTests: XCTestCase {
    /// Every kind of field the dump has: optionals set and unset, nested objects, arrays,
    /// dictionaries, enums with and without associated values, and text to escape.
    private static var tool: ToolInfoV0 {
        let config = ArgumentInfoV0(
            kind: .option, shouldDisplay: true, sectionTitle: nil, isOptional: true, isRepeating: false,
            parsingStrategy: .default, names: [.init(kind: .long, name: "config"), .init(kind: .short, name: "c")],
            preferredName: .init(kind: .long, name: "config"), valueName: "path", defaultValue: "/etc/w.toml",
            allValueStrings: nil, allValueDescriptions: nil, completionKind: .file(extensions: ["toml", ""]),
            abstract: "Configuration \"file\" (tab\there, back\\slash, bell \u{7}).", discussion: "Two\nlines; é ☃")
        let level = ArgumentInfoV0(
            kind: .option, shouldDisplay: false, sectionTitle: "Output", isOptional: false, isRepeating: true,
            parsingStrategy: .upToNextOption, names: [.init(kind: .longWithSingleDash, name: "level")],
            preferredName: nil, valueName: "level", defaultValue: nil, allValueStrings: ["info", "debug"],
            allValueDescriptions: ["info": "the usual", "debug": "more"], completionKind: .list(values: ["info", "debug"]),
            abstract: nil, discussion: nil)
        let paths = ArgumentInfoV0(
            kind: .positional, shouldDisplay: true, sectionTitle: nil, isOptional: true, isRepeating: true,
            parsingStrategy: .allRemainingInput, names: nil, preferredName: nil, valueName: "paths", defaultValue: nil,
            allValueStrings: [], allValueDescriptions: [:], completionKind: .directory, abstract: "", discussion: nil)
        let sub = CommandInfoV0(
            superCommands: ["watchkeeper"], shouldDisplay: true, commandName: "run", aliases: ["r"], abstract: "Run.",
            discussion: "", defaultSubcommand: nil, subcommands: [], arguments: [level, paths])
        return ToolInfoV0(command: CommandInfoV0(
            superCommands: [], shouldDisplay: true, commandName: "watchkeeper", aliases: nil, abstract: "Watch.",
            discussion: "Signals: USR1 <runtime_dir>/state.json", defaultSubcommand: "run", subcommands: [sub],
            arguments: [config]))
    }

    func testWriter_writesWhatFoundationsEncoderWrites() throws {
        let ours = try JSONWriter.prettyPrinted(Self.tool)
        let encoder = Foundation.JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let foundations = try encoder.encode(Self.tool)
        XCTAssertEqual(try JSONSerialization.jsonObject(with: Data(ours.utf8)) as? NSDictionary,
                       try JSONSerialization.jsonObject(with: foundations) as? NSDictionary, ours)
        XCTAssertEqual(try Foundation.JSONDecoder().decode(ToolInfoV0.self, from: Data(ours.utf8)), Self.tool)
        XCTAssertTrue(ours.hasPrefix("{\n  \"command\" : {\n    \"abstract\" : \"Watch.\",\n"),
                      "pretty-printed, two spaces, keys sorted: \(ours.prefix(60))")
    }

    func testWriter_refusesANumberJSONCannotHold() {
        XCTAssertThrowsError(try JSONWriter.prettyPrinted(["x": Double.nan]))
        XCTAssertEqual(try JSONWriter.prettyPrinted(["x": 1.5, "y": -2]), "{\n  \"x\" : 1.5,\n  \"y\" : -2.0\n}")
    }

    func testHelpDump_ofTheBinary_decodesAsItsToolInfo() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: DaemonProcess.binaryPath)
        process.arguments = ["--experimental-dump-help"]
        let stdout = Pipe()
        process.standardOutput = stdout
        try process.run()
        let dump = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
        let info = try Foundation.JSONDecoder().decode(ToolInfoV0.self, from: dump)
        XCTAssertEqual(info.command.commandName, "watchkeeper")
        XCTAssertGreaterThan(info.command.subcommands?.count ?? 0, 10, "the dump names every subcommand")
    }
}
