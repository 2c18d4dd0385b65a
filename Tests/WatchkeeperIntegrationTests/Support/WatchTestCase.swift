import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// What every watch test needs: a sandbox with an `in` directory, the daemon started on a
/// configuration of rules, and ways to write files and read what jobs recorded.
class WatchTestCase: XCTestCase {
    var sandbox: DaemonSandbox!
    var daemon: DaemonProcess!
    private var dumpsAsked = 0
    /// The method every rule of this test that names none runs with: nil for the rules' own
    /// (inotify), set by `under` for the method matrix (WatchMethodMatrix.swift), or for a
    /// whole run by WATCHKEEPER_TEST_WATCH_METHOD.
    private(set) var methodUnderTest = DaemonSandbox.watchMethodUnderTest
    /// A fanotify test's own tmpfs, the sandbox's parent: a mark hears its whole file system.
    private var methodTmpfs: ScratchTmpfs?

    /// Runs `body`, a test of this class, with every rule on `method` ("fanotify", "poll").
    func under(_ method: String, _ body: () throws -> Void) throws {
        methodUnderTest = method
        try body()
    }

    /// A sandbox for this test's method: under fanotify on a tmpfs mounted for the test
    /// (unless WATCHKEEPER_TEST_SANDBOX_PARENT names one), so that no other writes on the
    /// machine reach its mark; root only, skipped otherwise.
    func makeSandbox() throws -> DaemonSandbox {
        guard methodUnderTest == "fanotify", ProcessInfo.processInfo.environment["WATCHKEEPER_TEST_SANDBOX_PARENT"] == nil else {
            return try DaemonSandbox()
        }
        if methodTmpfs == nil {
            var template = Array("/tmp/wk-fanotify-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw XCTSkip("unable to make a mount point under /tmp") }
            let mountPoint = String(cString: made)
            do { methodTmpfs = try ScratchTmpfs(at: mountPoint) } catch { rmdir(mountPoint); throw error }
        }
        return try DaemonSandbox(parent: methodTmpfs?.path)
    }

    /// `prepare` runs before the daemon starts, with the sandbox's root (files and trees
    /// that must be there at start-up, for catch-up); `launcher` as DaemonSandbox.start's.
    func start(_ rules: String, daemonExtra: String = "", logLevel: String = "debug", environment: [String: String] = [:],
               launcher: [String] = [], prepare: (String) throws -> Void = { _ in }) throws {
        sandbox = try makeSandbox()
        sandbox.watchMethod = methodUnderTest
        dumpsAsked = 0
        try FileManager.default.createDirectory(atPath: sandbox.root + "/in", withIntermediateDirectories: true)
        try prepare(sandbox.root)
        let notify = try NotifySocket()
        try sandbox.writeConfig("""
            [daemon]
            log_level = "\(logLevel)"
            shutdown_grace = "5s"
            \(daemonExtra)

            \(rules.replacingOccurrences(of: "@DIR@", with: sandbox.root))
            """)
        daemon = try sandbox.startReady(notifySocket: notify, extra: environment, launcher: launcher)
        if methodUnderTest == "fanotify" {
            // A run that quietly fell back to inotify would prove nothing about fanotify. The
            // fallback is said before READY=1: looked for once the ready line is out.
            XCTAssertTrue(daemon.waitForReadyLine(), daemon.stderr)
            XCTAssertFalse(daemon.stderr.contains("unable to use fanotify"), daemon.stderr)
        }
    }

    /// Starts the daemon again on the same sandbox (after a stop or a kill); the last life's
    /// state dump goes, so `dumpedRule` reads this life's.
    func startAgain() throws {
        try? FileManager.default.removeItem(atPath: sandbox.statePath)
        dumpsAsked = 0
        daemon = try sandbox.startReady(notifySocket: try NotifySocket())
    }

    /// Whether the rule's tree is watched in full: with inotify, `directories` watches; with
    /// fanotify, its one mark, which covers every directory from the start.
    func watchesTree(_ rule: [String: Any]?, directories: Int) -> Bool {
        switch methodUnderTest {
        case "fanotify": return rule?["fanotify_marks"] as? Int == 1
        case "poll": return rule?["tree_method"] as? String == "poll" && (rule?["polled_trees"] as? [Any])?.count == 1
        default: return rule?["inotify_watches"] as? Int == directories
        }
    }

    /// Skips a test about what only events give (a deletion, a settle window shorter than a
    /// poll, a root's rename seen at once) when the watch tests run with `method = "poll"`.
    func skipIfPolling(_ why: String) throws {
        if methodUnderTest == "poll" {
            throw XCTSkip("about events (\(why)); the watch tests run with method = \"poll\"")
        }
    }

    /// Skips a test that is about inotify itself when the watch tests run with another
    /// method (WATCHKEEPER_TEST_WATCH_METHOD).
    func skipUnlessInotify(_ why: String) throws {
        if let method = methodUnderTest, method != "inotify", method != "auto" {
            throw XCTSkip("about inotify (\(why)); the watch tests run with method = \"\(method)\"")
        }
    }

    override func tearDown() {
        if let daemon, daemon.isRunning {
            daemon.stop(within: 20)
        }
        daemon = nil
        sandbox = nil
        if let methodTmpfs {
            methodTmpfs.unmount()
            rmdir(methodTmpfs.path)
        }
        methodTmpfs = nil
    }

    /// A text file's lines; none while it does not exist yet (tests poll for it).
    func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    func records(_ path: String) -> [[UInt8]] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        return Array(data).split(separator: 0, omittingEmptySubsequences: true).map(Array.init)
    }

    /// The first rule of a fresh SIGUSR1 dump; nil if none came within 5 s. Each call asks
    /// for a new dump (tests using it do not count dumps themselves).
    func dumpedRule() -> [String: Any]? {
        dumpsAsked += 1
        daemon.send(SIGUSR1)
        guard let state = sandbox.waitForState(sequence: dumpsAsked, timeout: 5) else { return nil }
        return ((state["watches"] as? [String: Any])?["rules"] as? [[String: Any]])?.first
    }

    /// Live processes whose command line contains `text` (a sandbox path in a job's
    /// command): the jobs a killed daemon left running. A zombie's command line is empty.
    func processes(mentioning text: String) -> [pid_t] {
        let needle = Array(text.utf8)
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.compactMap { pid_t($0) } ?? []
        return pids.filter { pid in
            guard let line = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
            let bytes = Array(line)
            return bytes.count >= needle.count && (0...(bytes.count - needle.count)).contains { bytes[$0..<$0 + needle.count].elementsEqual(needle) }
        }
    }

    /// A job that appends its {path} argument and NUL to @DIR@/handled, byte for byte.
    static let recorder = #"command = ["/usr/bin/python3", "-c", "import sys,os; f=os.open(sys.argv[1], os.O_WRONLY|os.O_APPEND|os.O_CREAT); os.write(f, os.fsencode(sys.argv[2]) + b'\\0')", "@DIR@/handled", "{path}"]"#

    /// open, write, close: what most programs do (FileManager writes through a temporary file).
    func write(_ relative: String, _ text: String = "data") {
        create(sandbox.root + "/in/" + relative, text)
    }

    /// The same at an absolute path.
    func create(_ path: String, _ text: String = "data") {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return XCTFail("unable to create \(path): \(String(cString: strerror(errno)))") }
        _ = Array(text.utf8).withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
}
