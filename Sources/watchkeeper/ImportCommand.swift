import ArgumentParser
import WatchkeeperCore
import WatchkeeperImport

#if canImport(Glibc)
import Glibc
#endif

extension ImportFormat: ExpressibleByArgument {}
extension CronFlavor: ExpressibleByArgument {}

struct Import: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Translate crontabs, incrontabs or systemd timer and path units into a watchkeeper configuration.",
        discussion: """
            Writes TOML to stdout (or --output) with a comment naming the sources, a NOTE wherever the \
            result behaves differently, and every source line that was not translated with the reason. \
            The result is loaded as check-config loads it before it is written; a translation it refuses \
            is printed to stderr and nothing is written (exit 70). With --check, the next 20 fires of \
            every task by the source's own rules (cron's minute-by-minute matcher, or systemd-analyze \
            calendar) are printed beside the imported task's: exit 1 if any differ. See docs/import.md.
            """
    )

    @Argument(help: "What the files are: cron (crontab(5)), incron (incrontab(5)) or systemd (.timer and .path units; their services are found by Unit= or name).")
    var format: ImportFormat

    @Argument(help: "The files to translate.", completion: .file())
    var files: [String]

    @Option(name: [.short, .long], help: ArgumentHelp("Write the configuration here instead of stdout.", valueName: "file"), completion: .file(extensions: ["toml"]))
    var output: String?

    @Flag(name: .long, inversion: .prefixedNo, help: "cron: the files have a user column (default: only /etc/crontab and /etc/cron.d/*).")
    var system: Bool?

    @Flag(name: .long, help: "cron: no on_failure mail hooks (cron mails output to MAILTO or the owner).")
    var noMail = false

    @Option(name: .long, help: ArgumentHelp("cron: the cron the tables come from, whose rules (CRON_TZ, bad lines, PATH) are kept: debian or cronie (default: the one installed here, else the distribution's).",
                                            valueName: "cron"))
    var cron: CronFlavor?

    @Option(name: .long, help: ArgumentHelp("cron: whose crontab the files are, when their path does not say (a copy of /var/spool/cron/crontabs/USER).", valueName: "user"))
    var owner: String?

    @Flag(name: .long, help: "cron: translate only what cron really runs: nothing from a file it ignores as a whole, no line it skips, the CR a Windows line end leaves in a command.")
    var asCronRuns = false

    @Flag(name: .long, help: "Compare the next 20 fires of each task by the source's rules and by watchkeeper's.")
    var check = false

    @Option(name: .long, help: ArgumentHelp("With --check, count fires from this instant (seconds since the epoch) instead of now.", valueName: "seconds"))
    var checkFrom: Int64?

    func validate() throws {
        if files.isEmpty { throw ValidationError("unable to import: name at least one file") }
        if format != .cron && (cron != nil || owner != nil || asCronRuns) {
            throw ValidationError("unable to import: --cron, --owner and --as-cron-runs are for crontabs (import cron)")
        }
        if let output, output.isEmpty { throw ValidationError("unable to import: --output: the path is empty") }
    }

    func run() throws {
        HandledSignals.unblockInCallingThread()
        let options = ImportOptions(format: format, files: files, systemCrontab: system, mail: !noMail, cron: cron, owner: owner, asCronRuns: asCronRuns)
        let imported: ImportedConfig
        switch ImportRun.translate(options) {
        case .success(let config): imported = config
        case .failure(let failure):
            StandardError.write("watchkeeper: \(failure.description)\n")
            throw ExitCode(failure.exitCode)
        }
        let toml = imported.toml()
        let environment = ProcessEnvironment.current()
        let loaded: Configuration
        switch ConfigLoader.parse(source: toml, path: output ?? "<import>", environment: environment) {
        case .success(let configuration): loaded = configuration
        case .failure(let errors):
            StandardError.write(toml)
            StandardError.write(errors.description + "\n")
            StandardError.write("watchkeeper: unable to import: the translation above does not pass check-config (\(errors.total) error(s)); nothing was written\n")
            throw ExitCode(WatchkeeperCore.ExitCode.software)
        }
        if let output {
            guard writeFile(output, toml) else {
                StandardError.write("watchkeeper: unable to write \(LineEscaping.escaped(output)): \(String(cString: strerror(errno)))\n")
                throw ExitCode(WatchkeeperCore.ExitCode.osError)
            }
        } else {
            print(toml, terminator: "")
        }
        guard check else { return }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let base = checkFrom ?? Int64(now.tv_sec)
        let oracle: (([String], Int64, Int) -> Result<[Int64], CalendarOracleError>)? = SystemdAnalyzeCalendar.isInstalled
            ? { SystemdAnalyzeCalendar.fires($0, after: $1, count: $2) } : nil
        let comparisons = ImportCheck.compare(imported, loaded: loaded, after: base, calendarOracle: oracle)
        let label = format == .systemd ? "systemd-analyze" : "cron"
        let ignored = ImportCheck.ignoredFiles(imported)
        var report = ignored.text + (comparisons.isEmpty ? "no task has a schedule to compare\n" : ImportCheck.render(comparisons, sourceLabel: label))
        let different = comparisons.filter(\.differs).count + ignored.differences
        let notCompared = comparisons.filter { $0.unavailable != nil && !$0.failed }.count
        let skipped = notCompared == 0 ? "" : " (\(notCompared) task(s) not compared, said above)"
        let files = ignored.differences == 0 ? "" : " (\(ignored.differences) of them file(s) cron ignores whole, whose tasks now run)"
        report += different == 0 ? "--check: no difference\(skipped)\n" : "--check: \(different) task(s) fire differently from their source\(files)\(skipped)\n"
        // With the configuration on stdout, the tables go to stderr so the file stays clean.
        if output == nil { StandardError.write(report) } else { print(report, terminator: "") }
        if different > 0 { throw ExitCode(1) }
    }

    private func writeFile(_ path: String, _ text: String) -> Bool {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            bytes = bytes.dropFirst(written)
        }
        return true
    }
}
