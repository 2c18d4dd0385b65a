import ArgumentParser
import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// Where the control commands find the daemon: `--socket`, else `<runtime_dir>/control.sock`
/// of the configuration `run` would use (`--config`, $WATCHKEEPER_CONFIG, the default).
struct ControlOptions: ParsableArguments {
    @Option(name: .long, help: "Control socket (default: <runtime_dir>/control.sock of the configuration).",
            completion: .file())
    var socket: String?

    @Option(name: .long, help: "Configuration file whose runtime_dir holds the socket (default: $WATCHKEEPER_CONFIG, else \(ConfigLoader.defaultPath)).",
            completion: .file(extensions: ["toml"]))
    var config: String?

    var socketPath: String {
        if let socket { return socket }
        return ControlClient.locateSocket(configPath: config, environment: ProcessEnvironment.current())
    }

    /// Connects, calls, and turns every failure into its message and exit code.
    func call(_ method: ControlInterface.Method, _ parameters: [DumpField] = [], timeout: Duration = .seconds(30)) throws -> DumpValue {
        try Self.call(method, parameters, socketPath: socketPath, timeout: timeout)
    }

    static func call(_ method: ControlInterface.Method, _ parameters: [DumpField], socketPath: String, timeout: Duration = .seconds(30)) throws -> DumpValue {
        // Not a daemon: Ctrl-C and a closed pipe end the command as usual.
        HandledSignals.unblockInCallingThread()
        do {
            let client = try ControlClient.connect(path: socketPath, timeout: timeout)
            return try ControlOptions.answer(client.call(VarlinkCall(method: method.qualified, parameters: parameters)))
        } catch let error as ControlClientError {
            StandardError.write("watchkeeper: \(error)\n")
            throw ExitCode(error.exitCode)
        }
    }

    static func answer(_ result: Result<DumpValue, VarlinkError>) throws -> DumpValue {
        switch result {
        case .success(let value):
            return value
        case .failure(let error):
            let explained = ControlOptions.explain(error)
            StandardError.write("watchkeeper: \(explained.message)\n")
            throw ExitCode(explained.code)
        }
    }

    /// The daemon's typed errors as sentences, with the exit code each ends with.
    static func explain(_ error: VarlinkError) -> (message: String, code: Int32) {
        func field(_ name: String) -> String { StatusViewText.of(error[name]) }
        switch error.name {
        case ControlInterface.ErrorName.noSuchTask.qualified:
            return ("no task named \(field("task")) (`watchkeeper tasks` lists them)", ExitCode.refused)
        case ControlInterface.ErrorName.noSuchName.qualified:
            return ("no task or watch named \(field("name")) (`watchkeeper tasks`, `watchkeeper watches`)", ExitCode.refused)
        case ControlInterface.ErrorName.noSuchRun.qualified:
            return ("no run \(field("run_id")) is waiting or running (it may have finished: `watchkeeper history TASK`)", ExitCode.refused)
        case ControlInterface.ErrorName.notStarted.qualified:
            return (field("reason"), ExitCode.refused)
        case ControlInterface.ErrorName.reloadFailed.qualified:
            let errors = (error["errors"]?.arrayValue ?? []).map { StatusViewText.of($0) }
            return (errors.joined(separator: "\n") + (errors.isEmpty ? "" : "\n")
                    + "watchkeeper: reload refused: configuration generation \(field("generation")) stays in force", ExitCode.configuration)
        case ControlInterface.ErrorName.notRunning.qualified:
            return ("the daemon is \(field("state")) and cannot do this now", ExitCode.alreadyRunning)
        case ControlInterface.ErrorName.unavailable.qualified:
            return ("the daemon could not answer: \(field("reason"))", ExitCode.alreadyRunning)
        default:
            return ("the daemon answered with an error: \(error)", ExitCode.protocolError)
        }
    }
}

/// Task and watch names for shell completion, from the running daemon: the words typed so
/// far may name the socket or the configuration. Silent and quick when there is no daemon
/// (the shell then completes nothing).
enum DaemonNames {
    static func complete(_ words: [String], tasks: Bool, watches: Bool, prefix: String) -> [String] {
        func value(after option: String) -> String? {
            guard let index = words.firstIndex(of: option), index + 1 < words.count else { return nil }
            return words[index + 1]
        }
        let environment = ProcessEnvironment.current()
        let path = value(after: "--socket") ?? ControlClient.locateSocket(configPath: value(after: "--config"), environment: environment)
        guard let client = try? ControlClient.connect(path: path, timeout: .seconds(1)) else { return [] }
        var names: [String] = []
        if tasks, case .success(let reply)? = try? client.call(VarlinkCall(method: ControlInterface.Method.tasks.qualified)) {
            names += (reply["tasks"]?["tasks"]?.arrayValue ?? []).compactMap { $0["name"]?.stringValue }
        }
        if watches, case .success(let reply)? = try? client.call(VarlinkCall(method: ControlInterface.Method.watches.qualified)) {
            names += (reply["watches"]?["rules"]?.arrayValue ?? []).compactMap { $0["name"]?.stringValue }
        }
        return names.filter { $0.hasPrefix(prefix) }
    }
}

/// Escaped one-line text of a reply's value, for messages.
enum StatusViewText {
    static func of(_ value: DumpValue?) -> String {
        guard let value else { return "-" }
        return value.stringValue.map { LineEscaping.escaped($0) } ?? value.json
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the daemon's state, running jobs with progress and budget, next runs and watches."
    )

    @OptionGroup var control: ControlOptions
    @Flag(name: .long, help: "Print the status as JSON (the Status reply of io.watchkeeper.Control).")
    var json = false
    @Flag(name: [.short, .long], help: "Redraw once a second until interrupted, like top.")
    var follow = false

    func run() throws {
        let isTerminal = isatty(STDOUT_FILENO) == 1
        let style = TerminalStyle.detect(isTerminal: isTerminal, environment: ProcessEnvironment.current(), width: terminalWidth())
        repeat {
            let status = try control.call(.status)["status"] ?? .null
            let text = json ? status.json + "\n" : StatusView.render(status, style: style)
            // On a terminal, each redraw replaces the last (home, clear); piped, snapshots follow each other.
            print(follow && isTerminal ? "\u{1B}[H\u{1B}[2J" + text : text, terminator: follow && !isTerminal ? "\n" : "")
            fflush(nil)  // all streams: `stdout` is a global Swift 6 will not touch
            if follow { sleep(1) }
        } while follow
    }

    private func terminalWidth() -> Int? {
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }
}

struct Trigger: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a task now, through its overlap policy and max_jobs (manual = true tasks run only this way)."
    )

    @OptionGroup var control: ControlOptions
    @Argument(help: "The task's name.", completion: .custom { words, _, prefix in DaemonNames.complete(words, tasks: true, watches: false, prefix: prefix) })
    var task: String
    @Flag(name: .long, help: "A fleet task: claim the run in etcd like a scheduled fire, so it runs on one host and every host records it.")
    var fleet = false

    func run() throws {
        let reply = try control.call(.trigger, [.init("task", .string(task))] + (fleet ? [.init("fleet", .bool(true))] : []))
        print("task \(LineEscaping.escaped(task)): run \(StatusViewText.of(reply["run_id"])) submitted (`watchkeeper status` follows it)")
    }
}

struct Cancel: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Cancel a waiting run, or expire a running one through its on_expire handler (reason \"cancelled\")."
    )

    @OptionGroup var control: ControlOptions
    @Argument(help: "The run ID, as `watchkeeper status` or the journal shows it.")
    var runID: String

    func run() throws {
        let reply = try control.call(.cancel, [.init("run_id", .string(runID))])
        if reply["was"]?.stringValue == "running" {
            print("run \(LineEscaping.escaped(runID)) is expiring: its on_expire handler runs, then its stop signal, then SIGKILL after kill_grace")
        } else {
            print("run \(LineEscaping.escaped(runID)) was waiting and is cancelled")
        }
    }
}

struct Reload: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Reload the configuration, like SIGHUP, and wait for the result (PATH:LINE:COLUMN errors if refused)."
    )

    @OptionGroup var control: ControlOptions

    func run() throws {
        let reply = try control.call(.reload, timeout: .seconds(120))
        print("reloaded: configuration generation \(StatusViewText.of(reply["generation"])) in force")
    }
}

struct Dump: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the state dump (what SIGUSR1 writes to the journal) on standard output."
    )

    @OptionGroup var control: ControlOptions
    @Flag(name: .long, help: "Print the dump as JSON (as in state.json).")
    var json = false

    func run() throws {
        let reply = try control.call(.dump)
        print(json ? (reply["dump"] ?? .null).json : (reply["text"]?.stringValue ?? ""))
    }
}

struct Metrics: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the Prometheus metrics, current, in the text format metrics_file has."
    )

    @OptionGroup var control: ControlOptions

    func run() throws {
        print(try control.call(.metrics)["text"]?.stringValue ?? "", terminator: "")
    }
}

struct Tasks: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the tasks: schedule, next run, overlap, budget, last run.")

    @OptionGroup var control: ControlOptions
    @Flag(name: .long, help: "Print JSON.")
    var json = false

    func run() throws {
        let tasks = try control.call(.tasks)["tasks"] ?? .null
        if json { print(tasks.json); return }
        let rows = (tasks["tasks"]?.arrayValue ?? []).map { task -> [String] in
            let last = task["last_runs"]?.arrayValue?.first
            return [StatusViewText.of(task["name"]), StatusViewText.of(task["schedule"]), StatusViewText.of(task["next_run"]),
                    StatusViewText.of(task["overlap"]), StatusViewText.of(task["budget"]), String(task["running"]?.arrayValue?.count ?? 0),
                    last.map { "\(StatusViewText.of($0["outcome"])) \(StatusViewText.of($0["started_at"]))" } ?? "-"]
        }
        TableView.render(header: ["TASK", "SCHEDULE", "NEXT RUN", "OVERLAP", "BUDGET", "RUNNING", "LAST RUN"], rows: rows).forEach { print($0) }
    }
}

struct Watches: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the watch rules: root, how the tree is watched (inotify watches or fanotify marks), events, jobs, problems.")

    @OptionGroup var control: ControlOptions
    @Flag(name: .long, help: "Print JSON.")
    var json = false

    func run() throws {
        let watches = try control.call(.watches)["watches"] ?? .null
        if json { print(watches.json); return }
        let rows = (watches["rules"]?.arrayValue ?? []).map { rule -> [String] in
            // A tree on fanotify has marks (one per file system), not a watch per directory.
            let watching = rule["fanotify_marks"].map { "\(StatusViewText.of($0)) mark(s)" } ?? StatusViewText.of(rule["inotify_watches"])
            // What `status` says of it too: a root missing, a share that stopped answering, ...
            let problems = StatusView.problems(of: rule)
            let problem = problems.isEmpty ? "-" : problems.joined(separator: ", ")
            return [StatusViewText.of(rule["name"]), StatusViewText.of(rule["root"]), StatusViewText.of(rule["tree_method"]), watching,
             StatusViewText.of(rule["events_seen"]), StatusViewText.of(rule["jobs_submitted"]), StatusViewText.of(rule["pending_settle"]),
             StatusViewText.of(rule["unwatched_total"]), problem]
        }
        TableView.render(header: ["WATCH", "ROOT", "METHOD", "WATCHES", "EVENTS", "JOBS", "SETTLING", "UNWATCHED", "PROBLEM"], rows: rows).forEach { print($0) }
    }
}

struct Fleet: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Recent fires of fleet tasks across every host of the [cluster], from etcd, newest first."
    )

    @OptionGroup var control: ControlOptions
    @Argument(help: "Only this task's fires.", completion: .custom { words, _, prefix in DaemonNames.complete(words, tasks: true, watches: false, prefix: prefix) })
    var task: String?
    @Option(name: .customShort("n"), help: "How many, newest first (1-10000).")
    var count: Int = 20
    @Flag(name: .long, help: "Print JSON.")
    var json = false

    func validate() throws {
        guard (1 ... 10_000).contains(count) else { throw ValidationError("-n must be between 1 and 10000") }
    }

    func run() throws {
        var parameters: [DumpField] = [.init("limit", .int(Int64(count)))]
        if let task { parameters.append(.init("task", .string(task))) }
        let reply = try control.call(.fleet, parameters)
        if json { print(reply.json); return }
        FleetView.render(reply).forEach { print($0) }
    }
}

struct History: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The last runs of a task, or the last files a watch rule handled, from the state database."
    )

    @OptionGroup var control: ControlOptions
    @Argument(help: "A task's or a watch rule's name.", completion: .custom { words, _, prefix in DaemonNames.complete(words, tasks: true, watches: true, prefix: prefix) })
    var name: String
    @Option(name: .customShort("n"), help: "How many, newest first (1-10000).")
    var count: Int = 10
    @Flag(name: .long, help: "Print JSON.")
    var json = false

    func validate() throws {
        guard (1 ... 10_000).contains(count) else { throw ValidationError("-n must be between 1 and 10000") }
    }

    func run() throws {
        let reply = try control.call(.history, [.init("name", .string(name)), .init("limit", .int(Int64(count)))])
        if json { print(reply.json); return }
        HistoryView.render(reply).forEach { print($0) }
    }
}

struct Next: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The next fires of tasks, from the running daemon or a configuration file, with zone, UTC offset and daylight-saving marks.",
        discussion: """
            Like `systemd-analyze calendar --iterations=N`: for each task its schedule and zone, then each \
            fire as local time (weekday, abbreviation, UTC offset) and in UTC. A fire marked "moved" stands in \
            for a wall time the clocks skipped when daylight saving began; "repeated" marks a wall time the \
            clocks showed twice when it ended, and says which occurrence fires. `every` runs on real time: \
            from the daemon, its fires follow the daemon's own anchor; from a file, they count from now. \
            --from starts the list at another instant (next year's clock change, say), as \
            systemd-analyze calendar --base-time does. \
            Without --config the daemon answers, at --socket or else the socket of $WATCHKEEPER_CONFIG's \
            (or the default) configuration; with --config the fires are computed from that file, no daemon \
            needed.
            """
    )

    @Argument(help: "Tasks to show (default: every task).", completion: .custom { words, _, prefix in DaemonNames.complete(words, tasks: true, watches: false, prefix: prefix) })
    var tasks: [String] = []
    @Option(name: .customShort("n"), help: "Fires per task (1-\(FirePreview.maximumCount)).")
    var count: Int = FirePreview.defaultCount
    @Option(name: .long, help: "Control socket of the daemon to ask (default: <runtime_dir>/control.sock of $WATCHKEEPER_CONFIG, else of the default configuration).",
            completion: .file())
    var socket: String?
    @Option(name: .long, help: "Compute the fires from this configuration file instead of asking the daemon; `every` then counts from now.",
            completion: .file(extensions: ["toml"]))
    var config: String?
    @Option(name: .long, help: ArgumentHelp("The fires after this instant instead of now, as systemd-analyze calendar --base-time: @SECONDS, or YYYY-MM-DD [HH:MM[:SS]] in the machine's zone or a zone named after it.",
                                            valueName: "time"))
    var from: String?
    @Flag(name: .long, help: "Print JSON (the Next reply of io.watchkeeper.Control).")
    var json = false

    private func baseTime() throws -> WallTime? {
        guard let from else { return nil }
        do {
            return try BaseTime.parse(from) { try TimeZoneRules.local() }
        } catch {
            throw ValidationError("--from: \(error)")
        }
    }

    func validate() throws {
        _ = try baseTime()
        guard (1 ... FirePreview.maximumCount).contains(count) else { throw ValidationError("-n must be between 1 and \(FirePreview.maximumCount)") }
        if socket != nil && config != nil {
            throw ValidationError("--socket asks the daemon and --config reads a file: give one of them")
        }
        if let config, let problem = ConfigLoader.argumentPathProblem(config) {
            throw ValidationError("unable to read the configuration: --config: \(problem)")
        }
    }

    func run() throws {
        let previews: [DumpValue]
        let base = try baseTime()
        if let config {
            previews = try fromFile(config, from: base)
        } else {
            var parameters: [DumpField] = [.init("count", .int(Int64(count)))]
            if !tasks.isEmpty { parameters.append(.init("tasks", .array(tasks.map { .string($0) }))) }
            if let base { parameters.append(.init("from", .int(base.secondsSinceEpoch))) }
            let path = socket ?? ControlClient.locateSocket(configPath: nil, environment: ProcessEnvironment.current())
            previews = try ControlOptions.call(.next, parameters, socketPath: path)["tasks"]?.arrayValue ?? []
        }
        if json {
            print(DumpValue.object([.init("tasks", .array(previews))]).json)
        } else if previews.isEmpty {
            print("no tasks are configured")
        } else {
            FirePreviewView.render(previews).forEach { print($0) }
        }
    }

    private func fromFile(_ path: String, from: WallTime?) throws -> [DumpValue] {
        HandledSignals.unblockInCallingThread()
        let configuration: Configuration
        switch ConfigLoader.load(path: path, environment: ProcessEnvironment.current()) {
        case .success(let loaded):
            configuration = loaded
        case .failure(let errors):
            StandardError.write(errors.description + "\n")
            throw ExitCode(WatchkeeperCore.ExitCode.configuration)
        }
        var selected: [TaskSettings] = []
        for name in tasks {
            guard let task = configuration.tasks.first(where: { $0.name == name }) else {
                StandardError.write("watchkeeper: no task named \(LineEscaping.escaped(name)) in \(LineEscaping.escaped(path))\n")
                throw ExitCode(WatchkeeperCore.ExitCode.refused)
            }
            selected.append(task)
        }
        let now = WallTime.now()
        return (tasks.isEmpty ? configuration.tasks : selected).map { task in
            var start = FirePreview.Start.fromFile(task, clusterConfigured: configuration.cluster != nil, now: now)
            start.from = from
            return FirePreview.preview(start, count: count).dumpValue
        }
    }
}
