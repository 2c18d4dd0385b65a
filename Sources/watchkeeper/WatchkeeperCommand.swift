import ArgumentParser
import Dispatch
import Logging
import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

enum ProcessStart {
    nonisolated(unsafe) static var instant = MonotonicInstant(nanoseconds: 0)
    static func mark() { instant = .now }
}

struct WatchkeeperCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watchkeeper",
        abstract: "Watch directories, run periodic tasks with time budgets, and explain it all in the journal.",
        discussion: """
            Signals: USR1 writes a state dump to the journal and <runtime_dir>/state.json; HUP reloads \
            the configuration (an invalid file is rejected and the old one kept); TERM or INT drains \
            running work and exits 0.
            Exit codes: 0 success, 64 usage error, 70 a job outlived the drain, 71 system error, \
            75 another watchkeeper holds the state directory, 78 invalid configuration. The control \
            commands: 1 the daemon refused (no such task or run), 69 the daemon is not running, 75 it is \
            starting or stopping, 76 no valid answer, 77 permission denied, 78 reload refused. `logs`: 1 no entries, \
            66 the journal has no files, 77 none readable. See watchkeeper(8).
            """,
        version: WatchkeeperVersion.current,
        subcommands: [Run.self, CheckConfig.self, Import.self, Status.self, Trigger.self, Cancel.self, Reload.self, Dump.self, Tasks.self, Watches.self, History.self, Fleet.self, Next.self, Metrics.self, Logs.self]
    )
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the daemon in the foreground (systemd Type=notify; no forking, no pidfile)."
    )

    @Option(name: .long, help: "Configuration file (default: $WATCHKEEPER_CONFIG, else \(ConfigLoader.defaultPath)).",
            completion: .file(extensions: ["toml"]))
    var config: String?

    @Option(name: .long, help: "Log level, overriding [daemon] log_level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level?

    /// `--config ""` is a mistake, not a request for the default path.
    func validate() throws {
        if let config, let problem = ConfigLoader.argumentPathProblem(config) {
            throw ValidationError("unable to run: --config: \(problem)")
        }
    }

    func run() throws {
        let environment = ProcessEnvironment.current()
        let path = ConfigLoader.resolvePath(explicit: config, environment: environment)
        Daemon.run(options: RunOptions(configPath: path, logLevelOverride: logLevel, environment: environment,
                                       processStart: ProcessStart.instant))
    }
}

struct CheckConfig: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validate a configuration file: exit 0, or print every error as PATH:LINE:COLUMN: message and exit 78."
    )

    @Argument(help: "Configuration file (default: $WATCHKEEPER_CONFIG, else \(ConfigLoader.defaultPath)).",
              completion: .file(extensions: ["toml"]))
    var path: String?

    /// A usage error (exit 64, with the usage), like any other bad argument.
    func validate() throws {
        if let problem = ConfigLoader.argumentPathProblem(path) {
            throw ValidationError("unable to check configuration: \(problem)")
        }
    }

    func run() throws {
        // Not a daemon: let Ctrl-C work as usual.
        HandledSignals.unblockInCallingThread()
        let environment = ProcessEnvironment.current()
        let resolved = ConfigLoader.resolvePath(explicit: path, environment: environment)
        switch ConfigLoader.load(path: resolved, environment: environment) {
        case .success:
            print("\(resolved): ok")
        case .failure(let errors):
            StandardError.write(errors.description + "\n")
            throw ExitCode(WatchkeeperCore.ExitCode.configuration)
        }
    }
}
