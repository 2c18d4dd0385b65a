import Foundation
import WatchkeeperCore
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Who may use the control socket, checked with real users (nobody, daemon) through
/// setpriv, and how `status` looks in a real terminal (tmux).
final class ControlAccessTests: ControlTestCase {
    static let nobody = (uid: UInt32(65_534), gid: UInt32(65_534))
    /// Debian's `daemon` user (uid 1), not in nogroup.
    static let daemonUser = (uid: UInt32(1), gid: UInt32(1))

    override func setUpWithError() throws {
        guard getuid() == 0 else { throw XCTSkip("running clients as other users needs root") }
    }

    func testNobody_isRefusedByTheFileMode_andToldWhichGroupToJoin() throws {
        try startDaemon(ControlSocketTests.oneTask, daemonSettings: "control_group = \"nogroup\"")
        let binary = try binaryForOtherUsers()
        chmod(sandbox.runtimeDirectory, 0o755)
        // 0660 root:nogroup lets nogroup in; the daemon user is not in it.
        let refused = try cli(["status"], asUser: Self.daemonUser, binary: binary)
        XCTAssertEqual(refused.status, 77, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("permission denied on the control socket"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("join group nogroup"), refused.stderr)
    }

    func testAMemberOfControlGroup_isAllowed() throws {
        try startDaemon(ControlSocketTests.oneTask, daemonSettings: "control_group = \"nogroup\"")
        let binary = try binaryForOtherUsers()
        chmod(sandbox.runtimeDirectory, 0o755)
        let allowed = try cli(["tasks"], asUser: Self.nobody, binary: binary)
        XCTAssertEqual(allowed.status, 0, allowed.stderr)
        XCTAssertTrue(allowed.stdout.contains("quick"), allowed.stdout)
    }

    /// `[daemon] read_group`: its members read (the CLI and a raw Varlink client, both run as
    /// nobody, a member of nogroup), and the socket refuses them every method that acts;
    /// a user in neither group is still turned away at the door.
    func testAMemberOfReadGroup_readsButTheSocketRefusesWhatActs_andAStrangerIsStillRefused() throws {
        try startDaemon(ControlSocketTests.oneTask, daemonSettings: "read_group = \"nogroup\"")
        let binary = try binaryForOtherUsers()
        chmod(sandbox.runtimeDirectory, 0o755)
        var info = stat()
        XCTAssertEqual(stat(socketPath, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o666, "one file group cannot admit two groups: SO_PEERCRED decides")

        let tasks = try cli(["tasks"], asUser: Self.nobody, binary: binary)
        XCTAssertEqual(tasks.status, 0, tasks.stderr)
        XCTAssertTrue(tasks.stdout.contains("quick"), tasks.stdout)
        for arguments in [["trigger", "quick"], ["reload"], ["dump"], ["cancel", "0123456789abcdef"]] {
            let refused = try cli(arguments, asUser: Self.nobody, binary: binary)
            XCTAssertEqual(refused.status, 77, "\(arguments): \(refused.stdout) \(refused.stderr)")
            XCTAssertTrue(refused.stderr.contains("may only read (read_group)"), refused.stderr)
        }
        XCTAssertEqual(try statusJSON()["jobs"].flatMap { ($0 as? [String: Any])?["started_since_start"] as? Int }, 0, "nothing ran")

        // The socket itself, without the CLI: Status says the caller's level, Trigger is refused by name.
        let replies = try rawCalls(asUser: Self.nobody, [#"{"method":"io.watchkeeper.Control.Status"}"#,
                                                         #"{"method":"io.watchkeeper.Control.Trigger","parameters":{"task":"quick"}}"#])
        XCTAssertEqual(replies.count, 2, "\(replies)")
        let access = (replies.first?["parameters"] as? [String: Any])?["access"] as? [String: Any]
        XCTAssertEqual(access?["level"] as? String, "read", "\(replies)")
        XCTAssertEqual(access?["read_group"] as? String, "nogroup")
        XCTAssertEqual(replies.last?["error"] as? String, "io.watchkeeper.Control.PermissionDenied", "\(replies)")
        XCTAssertEqual((replies.last?["parameters"] as? [String: Any])?["method"] as? String, "Trigger")
        let rootAccess = try rawCalls(asUser: nil, [#"{"method":"io.watchkeeper.Control.Status"}"#]).first
        XCTAssertEqual(((rootAccess?["parameters"] as? [String: Any])?["access"] as? [String: Any])?["level"] as? String, "control")

        let stranger = try cli(["status"], asUser: Self.daemonUser, binary: binary)
        XCTAssertEqual(stranger.status, 77, stranger.stdout + stranger.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "members of group nogroup only to read", timeout: 10), daemon.stderr)
    }

    /// Varlink calls on one connection through Debian's python3, as `user` (setpriv), each
    /// reply as parsed JSON.
    private func rawCalls(asUser user: (uid: UInt32, gid: UInt32)?, _ calls: [String]) throws -> [[String: Any]] {
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
            buffer = b""
            for call in sys.argv[2:]:
                s.sendall(call.encode() + b"\\0")
                while b"\\0" not in buffer:
                    chunk = s.recv(65536)
                    if not chunk: sys.exit(0)
                    buffer += chunk
                reply, _, buffer = buffer.partition(b"\\0")
                print(reply.decode())
            """
        let process = Process()
        var argv = ["/usr/bin/python3", "-c", script, socketPath] + calls
        if let user { argv = ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--clear-groups"] + argv }
        process.executableURL = URL(fileURLWithPath: user == nil ? "/usr/bin/python3" : "/usr/bin/setpriv")
        process.arguments = user == nil ? Array(argv.dropFirst()) : argv
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    func testPeerCredentials_refuseAStrangerEvenThroughAWorldWritableSocket_andTheJournalSaysWho() throws {
        try startDaemon(ControlSocketTests.oneTask)
        let binary = try binaryForOtherUsers()
        chmod(sandbox.runtimeDirectory, 0o755)
        // An administrator's mistake: the file mode no longer keeps anyone out.
        chmod(socketPath, 0o666)
        let refused = try cli(["status"], asUser: Self.nobody, binary: binary)
        XCTAssertEqual(refused.status, 77, refused.stdout + refused.stderr)
        XCTAssertTrue(refused.stderr.contains("permission denied"), refused.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "refused a control connection from uid 65534 (nobody)", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("only root"), daemon.stderr)
        // A second refusal within the minute is counted, not logged again.
        _ = try cli(["status"], asUser: Self.nobody, binary: binary)
        let dump = try statusJSON()["control"] as? [String: Any]
        XCTAssertEqual(dump?["refused"] as? Int, 2)
        // Counted once the daemon has stopped: a second line could still be on its way to stderr.
        daemon.stop(within: 15)
        XCTAssertEqual(daemon.stderr.components(separatedBy: "refused a control connection").count - 1, 1)
    }

    func testUnknownControlGroup_isAConfigurationErrorWithItsPosition() throws {
        let sandbox = try DaemonSandbox()
        try sandbox.writeConfig("[daemon]\ncontrol_group = \"no-such-group-here\"\n")
        let check = try sandbox.start(notifySocket: nil, arguments: ["check-config", sandbox.configPath])
        XCTAssertEqual(check.waitForExit(timeout: 10), 78)
        XCTAssertTrue(check.stderr.contains("\(sandbox.configPath):2:17: daemon.control_group = \"no-such-group-here\": no such group"), check.stderr)
    }

    func testStatus_inARealTerminal_drawsColouredBars() throws {
        guard access("/usr/bin/tmux", X_OK) == 0 else {
            XCTFail("tmux is not installed: `make deps` installs it")
            return
        }
        try startDaemon(ControlCommandTests.tasks)
        XCTAssertEqual(try cli(["trigger", "slow"]).status, 0)
        XCTAssertTrue(waitFor(10) { (try? self.cli(["status"]).stdout.contains("copying part 3")) ?? false })
        let session = "wk-\(getpid())-\(Int.random(in: 0 ..< 1_000_000))"
        let command = "\(DaemonProcess.binaryPath) status --socket \(socketPath); sleep 30"
        XCTAssertEqual(try tmux(["new-session", "-d", "-s", session, "-x", "160", "-y", "50",
                                 "env", "LANG=C.UTF-8", "TERM=xterm-256color", "/bin/sh", "-c", command]).status, 0)
        defer { _ = try? tmux(["kill-session", "-t", session]) }
        var screen = ""
        XCTAssertTrue(waitFor(10) {
            screen = (try? self.tmux(["capture-pane", "-e", "-p", "-t", session]).output) ?? ""
            return screen.contains("budget")
        }, screen)
        XCTAssertTrue(screen.contains("\u{1B}["), "colour on a terminal:\n\(screen)")
        XCTAssertTrue(screen.contains("█"), screen)
        XCTAssertTrue(screen.contains("copying part 3"), screen)
        // NO_COLOR turns the colour off even on a terminal.
        let plain = "\(session)-plain"
        XCTAssertEqual(try tmux(["new-session", "-d", "-s", plain, "-x", "160", "-y", "50",
                                 "env", "LANG=C.UTF-8", "TERM=xterm-256color", "NO_COLOR=1", "/bin/sh", "-c", command]).status, 0)
        defer { _ = try? tmux(["kill-session", "-t", plain]) }
        var plainScreen = ""
        XCTAssertTrue(waitFor(10) {
            plainScreen = (try? self.tmux(["capture-pane", "-e", "-p", "-t", plain]).output) ?? ""
            return plainScreen.contains("budget")
        }, plainScreen)
        XCTAssertFalse(plainScreen.contains("\u{1B}[3"), "no colour with NO_COLOR:\n\(plainScreen)")
    }

    /// tmux through posix_spawn and waitpid, its output in a file: `new-session` starts a
    /// server that inherits every fd of the client, and Foundation's Process waits for a pipe
    /// of its own to close, which the server would hold for its whole life.
    private func tmux(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let outputPath = sandbox.root + "/tmux-\(UInt32.random(in: 0 ... .max)).out"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // A private server socket, so the test neither sees nor disturbs anyone's sessions.
        let argv = (["/usr/bin/tmux", "-L", "watchkeeper-tests-\(getpid())", "-f", "/dev/null"] + arguments).map { strdup($0) } + [nil]
        let environment: [String] = ["PATH=/usr/bin:/bin", "TERM=xterm-256color"]
        let envp = environment.map { strdup($0) } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/usr/bin/tmux", &actions, nil, argv, envp)
        guard spawned == 0 else {
            throw NSError(domain: "posix_spawn", code: Int(errno))
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let code = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return (code, (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "")
    }
}
