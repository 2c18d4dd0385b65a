import Foundation
import XCTest
import WatchkeeperTestSupport

/// The completion scripts `make install` generates from the binary: bash's is run for
/// real (its completion function called as bash-completion would), zsh's and fish's are
/// parsed by their shells.
final class CompletionTests: XCTestCase {
    private func run(_ executable: String, _ arguments: [String], in directory: String? = nil) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    private func script(_ shell: String) throws -> String {
        let directory = try makeScratchDirectory()
        let path = directory + "/watchkeeper.\(shell)"
        let generated = try run(DaemonProcess.binaryPath, ["--generate-completion-script", shell])
        XCTAssertEqual(generated.status, 0, generated.output)
        try generated.output.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// What bash offers after `line` (the cursor at its end), one word per line.
    private func bashCompletions(_ script: String, _ line: String, in directory: String) throws -> [String] {
        let harness = """
            shopt -s extglob
            # Custom completions (task names) call the binary by name, as installed.
            export PATH="$3:$PATH"
            source "$1"
            COMP_LINE="$2"; COMP_POINT=${#COMP_LINE}
            read -ra COMP_WORDS <<< "$2"
            [[ "$2" == *" " ]] && COMP_WORDS+=("")
            COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
            COMPREPLY=()
            _watchkeeper watchkeeper "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            printf '%s\\n' "${COMPREPLY[@]}"
            """
        let binaryDirectory = URL(fileURLWithPath: DaemonProcess.binaryPath).deletingLastPathComponent().path
        let result = try run("/bin/bash", ["-c", harness, "bash", script, line, binaryDirectory], in: directory)
        XCTAssertEqual(result.status, 0, result.output)
        return result.output.split(separator: "\n").map(String.init)
    }

    func testBash_completesSubcommandsOptionsLogLevelsAndConfigFiles() throws {
        let script = try script("bash")
        let directory = try makeScratchDirectory()
        try FileManager.default.createDirectory(atPath: directory + "/conf", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: directory + "/conf/site.toml", contents: Data())
        FileManager.default.createFile(atPath: directory + "/conf/notes.txt", contents: Data())

        XCTAssertEqual(Set(try bashCompletions(script, "watchkeeper ", in: directory)).intersection(["run", "check-config"]), ["run", "check-config"])
        XCTAssertEqual(try bashCompletions(script, "watchkeeper ch", in: directory), ["check-config"])
        XCTAssertEqual(Set(try bashCompletions(script, "watchkeeper run --", in: directory)).isSuperset(of: ["--config", "--log-level"]), true)
        XCTAssertEqual(try bashCompletions(script, "watchkeeper run --log-level ", in: directory),
                       ["trace", "debug", "info", "notice", "warning", "error", "critical"])
        XCTAssertEqual(try bashCompletions(script, "watchkeeper check-config conf/", in: directory), ["conf/site.toml"], "only .toml files")
        XCTAssertEqual(try bashCompletions(script, "watchkeeper run --config conf/", in: directory), ["conf/site.toml"])
    }

    /// Names come from the running daemon over its control socket; with no daemon there is
    /// nothing to offer, quickly.
    func testBash_completesTaskAndWatchNamesFromTheRunningDaemon() throws {
        let script = try script("bash")
        let sandbox = try DaemonSandbox()
        try FileManager.default.createDirectory(atPath: sandbox.root + "/in", withIntermediateDirectories: true)
        try sandbox.writeConfig("""
            [daemon]
            [[task]]
            name = "backup-db"
            manual = true
            command = ["/bin/true"]
            [[task]]
            name = "backup-www"
            manual = true
            command = ["/bin/true"]
            [[watch]]
            name = "inbox"
            path = "\(sandbox.root)/in"
            command = ["/bin/true"]
            """)
        let socket = sandbox.runtimeDirectory + "/control.sock"
        XCTAssertEqual(try bashCompletions(script, "watchkeeper trigger --socket \(socket) back", in: sandbox.root), [], "no daemon yet")
        let notify = try NotifySocket()
        let daemon = try sandbox.startReady(notifySocket: notify)
        defer { daemon.stop(within: 10) }
        XCTAssertEqual(Set(try bashCompletions(script, "watchkeeper trigger --socket \(socket) back", in: sandbox.root)), ["backup-db", "backup-www"])
        XCTAssertEqual(Set(try bashCompletions(script, "watchkeeper history --socket \(socket) ", in: sandbox.root)), ["backup-db", "backup-www", "inbox"])
    }

    func testZshAndFishScripts_parse() throws {
        for (shell, arguments) in [("/usr/bin/zsh", ["-n"]), ("/usr/bin/fish", ["--no-execute"])] {
            guard FileManager.default.isExecutableFile(atPath: shell) else {
                XCTFail("\(shell) is missing: make deps installs it")
                continue
            }
            let name = URL(fileURLWithPath: shell).lastPathComponent
            let result = try run(shell, arguments + [try script(name)])
            XCTAssertEqual(result.status, 0, "\(name): \(result.output)")
            XCTAssertEqual(result.output, "", name)
        }
    }
}
