import Foundation
import XCTest
import FleetCheck
import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Several watchkeeper daemons as several hosts of one fleet: each its own sandbox (state,
/// runtime directory, configuration) and `[cluster] name`, all on one etcd cluster and one
/// prefix. Their jobs write to `shared`, one line each at start and end (appends under
/// PIPE_BUF are atomic): "<instant> <host> <run id> start|end <seconds since the epoch>".
final class FleetHosts {
    final class Host {
        let name: String
        let sandbox: DaemonSandbox
        let notify: NotifySocket
        var daemon: DaemonProcess?
        var launcher: [String] = []

        init(name: String) throws {
            self.name = name
            sandbox = try DaemonSandbox()
            notify = try NotifySocket()
        }

        var socket: String { sandbox.runtimeDirectory + "/control.sock" }
    }

    struct Run: Equatable {
        let instant: String
        let host: String
        let runID: String
        let start: Double
        var end: Double?
    }

    let shared: String
    let prefix: String
    private(set) var hosts: [Host] = []

    /// `tasks`: the [[task]] tables, with @SHARED@ for the shared directory and @HOST@ for the
    /// host's name; `cluster`: extra [cluster] keys.
    /// `memberName`: the `[cluster] name` of every host, when a test gives them one name
    /// (jobs still tell the hosts apart by `@HOST@`).
    /// `daemon`: extra `[daemon]` keys (max_jobs).
    init(count: Int, endpoints: [String], shared: String, tasks: String, cluster: String = "lease_ttl = \"4s\"",
         prefix: String? = nil, firstIndex: Int = 0, memberName: String? = nil, daemon: String = "") throws {
        self.shared = shared
        self.prefix = prefix ?? "/wk-test/\(UInt32.random(in: 0 ... .max))"
        for index in firstIndex..<(firstIndex + count) {
            let host = try Host(name: "host\(index)")
            try host.sandbox.writeConfig("""
                [daemon]
                log_level = "debug"
                shutdown_grace = "5s"
                dump_component_timeout = "1s"
                \(daemon)

                [cluster]
                etcd = [\(endpoints.map { "\"\($0)\"" }.joined(separator: ", "))]
                name = "\(memberName ?? host.name)"
                prefix = "\(self.prefix)"
                \(cluster)

                \(tasks.replacingOccurrences(of: "@SHARED@", with: shared).replacingOccurrences(of: "@HOST@", with: host.name))
                """)
            hosts.append(host)
        }
    }

    deinit {
        for host in hosts { host.daemon?.stop(within: 20) }
    }

    func startAll(file: StaticString = #filePath, line: UInt = #line) throws {
        for host in hosts { try start(host, file: file, line: line) }
    }

    func start(_ host: Host, file: StaticString = #filePath, line: UInt = #line) throws {
        let daemon = try host.sandbox.start(notifySocket: host.notify, launcher: host.launcher)
        host.daemon = daemon
        guard host.notify.waitFor("READY", "1", timeout: 10) != nil else {
            XCTFail("\(host.name): no READY=1 within 10 s; stderr:\n\(daemon.stderr)", file: file, line: line)
            throw XCTSkip("daemon did not become ready")
        }
    }

    /// A job line that records the run: `<instant> <host> <run id> start <epoch seconds>`.
    static func record(_ what: String) -> String {
        #"echo "$WATCHKEEPER_SCHEDULED_AT @HOST@ $WATCHKEEPER_RUN_ID \#(what) $(date +%s.%N)" >> @SHARED@/runs"#
    }

    /// Every run the jobs recorded, by run ID, start and end joined.
    func runs() -> [Run] {
        let text = (try? String(contentsOfFile: shared + "/runs", encoding: .utf8)) ?? ""
        var byID: [String: Run] = [:]
        var order: [String] = []
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ").map(String.init)
            guard parts.count == 5, let time = Double(parts[4]) else { continue }
            if parts[3] == "start" {
                byID[parts[2]] = Run(instant: parts[0], host: parts[1], runID: parts[2], start: time)
                order.append(parts[2])
            } else {
                byID[parts[2]]?.end = time
            }
        }
        return order.compactMap { byID[$0] }
    }

    /// The host as if it lost power: the daemon and every job it started, SIGKILLed (the
    /// jobs record their pid in @SHARED@/pids/<host>.<pid>).
    func powerOff(_ host: Host) {
        guard let daemon = host.daemon else { return }
        daemon.send(SIGKILL)
        _ = daemon.waitForExit(timeout: 10)
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: shared + "/pids")) ?? []
        for entry in pids where entry.hasPrefix(host.name + ".") {
            if let pid = pid_t(entry.dropFirst(host.name.count + 1)) { kill(-pid, SIGKILL); kill(pid, SIGKILL) }
        }
        host.daemon = nil
    }

    /// `watchkeeper ARGS --socket <host's>`, its stdout (JSON with --json).
    func control(_ host: Host, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: DaemonProcess.binaryPath)
        process.arguments = arguments + ["--socket", host.socket]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    /// The host's history of `task` from its state database: (run id, outcome, host).
    func history(_ host: Host, task: String) throws -> [(runID: String, outcome: String, host: String?)] {
        let text = try control(host, ["history", task, "-n", "1000", "--json"])
        guard let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
              let runs = object["runs"] as? [[String: Any]] else { throw XCTSkip("no history from \(host.name): \(text)") }
        return runs.map { (($0["run_id"] as? String) ?? "", ($0["outcome"] as? String) ?? "", $0["host"] as? String) }
    }

    /// A shared inbox's job that writes its start and end to @SHARED@/history as the JSON
    /// lines `FleetHistoryChecker` reads (item `file:<name>#1`): it sleeps `seconds`, then moves
    /// its file to @SHARED@/done/ (a failed move, a file already gone, ends it not ok); told
    /// to stop (the fence's SIGTERM), it writes its end at once.
    static func inboxJob(seconds: String) -> String {
        #"""
        mkdir -p @SHARED@/pids @SHARED@/done; touch @SHARED@/pids/@HOST@.$$
        log() { printf '{"type":"%s","item":"file:%s#1","host":"@HOST@","run":"%s","t":%s%s}\n' "$1" "$WATCHKEEPER_NAME" "$WATCHKEEPER_RUN_ID" "$(date +%s.%N)" "$2" >> @SHARED@/history; }
        log start ""
        trap 'log end ",\"ok\":false"; exit 1' TERM
        sleep \#(seconds) & wait $!
        if mv -- "$WATCHKEEPER_PATH" @SHARED@/done/ 2>/dev/null; then log end ",\"ok\":true"; else log end ",\"ok\":false"; exit 1; fi
        """#
    }

    /// What the jobs wrote to @SHARED@/history, in time order, with `faults` and an `expect`
    /// for each of `expected`: the checker's input.
    func historyEvents(faults: [FleetFault] = [], expected: [String] = []) throws -> [FleetHistoryEvent] {
        let text = (try? String(contentsOfFile: shared + "/history", encoding: .utf8)) ?? ""
        var events: [FleetHistoryEvent] = expected.map { .expect(item: $0) }
        for (index, line) in text.split(separator: "\n").enumerated() {
            if let event = try FleetHistoryEvent.parse(line: String(line), lineNumber: index + 1) { events.append(event) }
        }
        events += faults.map { .fault($0) }
        return events.enumerated().sorted { (FleetHistoryEvent.sortKey($0.element), $0.offset) < (FleetHistoryEvent.sortKey($1.element), $1.offset) }.map(\.element)
    }

    /// A fleet task named `tick` running `command(sleep:)`.
    /// Every host's log lines that name the fire due at `instant` (seconds since the epoch):
    /// what a failed assertion about that fire prints.
    func said(about instant: Double) -> [String: [String]] {
        let seconds = Int64(instant.rounded())
        let iso = WallTime(secondsSinceEpoch: seconds, nanoseconds: 0).iso8601
        let stamp = String(iso.prefix(19))
        return Dictionary(uniqueKeysWithValues: hosts.map { host in
            (host.name, (host.daemon?.stderr ?? "").split(separator: "\n").filter { $0.contains(stamp) }.map(String.init))
        })
    }

    static func tickTask(every: String, sleep: String = "0.2", extra: String = "") -> String {
        """
        [[task]]
        name = "tick"
        every = "\(every)"
        fleet = "one"
        shell = true
        command = '\(command(sleep: sleep))'
        \(extra)
        """
    }

    /// The task's command: record the start, the job's pid, sleep, record the end.
    static func command(sleep: String) -> String {
        "mkdir -p @SHARED@/pids; touch @SHARED@/pids/@HOST@.$$; " + record("start") + "; sleep \(sleep); " + record("end")
    }
}
