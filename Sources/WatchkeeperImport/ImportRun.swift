// `watchkeeper import`: read the files, translate them, and refuse to hand back a
// configuration that check-config would not accept.

#if canImport(Glibc)
import WatchkeeperCore
import Glibc
#endif

public enum ImportFormat: String, Sendable, CaseIterable {
    case cron
    case incron
    case systemd
}

public struct ImportOptions: Sendable {
    public var format: ImportFormat
    public var files: [String]
    /// nil: decide by path (`/etc/crontab`, `/etc/cron.d/*`).
    public var systemCrontab: Bool?
    public var mail = true
    /// The cron the tables come from (`--cron`); nil: the one installed here.
    public var cron: CronFlavor?
    /// `--owner`: whose crontab it is, for a user's table read from outside the spool.
    public var owner: String?
    /// `--as-cron-runs`: only what cron really runs.
    public var asCronRuns = false

    public init(format: ImportFormat, files: [String], systemCrontab: Bool? = nil, mail: Bool = true, cron: CronFlavor? = nil,
                owner: String? = nil, asCronRuns: Bool = false) {
        self.format = format
        self.files = files
        self.systemCrontab = systemCrontab
        self.mail = mail
        self.cron = cron
        self.owner = owner
        self.asCronRuns = asCronRuns
    }
}

public struct ImportFailure: Error, Sendable, CustomStringConvertible {
    public var description: String
    public var exitCode: Int32
}

public enum ImportRun {
    public static let sendmailPath = "/usr/sbin/sendmail"

    /// The translated configuration, or why a file could not be read. `machineRoot`:
    /// where to look for the cron installed (tests give another root).
    public static func translate(_ options: ImportOptions, machineRoot: String = "") -> Result<ImportedConfig, ImportFailure> {
        var config = ImportedConfig()
        config.sources = options.files
        var flavor = CronFlavor.debian
        switch options.format {
        case .cron:
            if let chosen = options.cron {
                flavor = chosen
                config.notes.append("Read as \(chosen.title) reads its tables (--cron \(chosen.rawValue)).")
            } else if let (installed, reason) = CronFlavor.installed(root: machineRoot) {
                flavor = installed
                config.notes.append("Read as \(installed.title) reads its tables, since \(reason); --cron \(installed == .debian ? "cronie" : "debian") for the other.")
            } else {
                return .failure(ImportFailure(description: "unable to tell which cron the tables were written for (none is installed here, and the distribution does not say): pass --cron debian or --cron cronie", exitCode: 64))
            }
            config.notes.append("cron mails a job's output; watchkeeper writes it to the journal (journalctl -t TASK). Every task gets budget = \"7d\" (cron sets no time limit) and overlap = \"allow\" (cron starts a run even while the previous one lasts).")
        case .incron:
            config.notes.append("incron runs nothing for events that happened while it was down; every rule has catch_up = false to match. Every rule gets budget = \"7d\" (incron sets no time limit).")
        case .systemd:
            break
        }
        for file in options.files {
            let text: String
            switch ConfigFileReader.read(file) {
            case .success(let bytes): text = String(decoding: bytes, as: UTF8.self)
            case .failure(let failure): return .failure(ImportFailure(description: "unable to read \(LineEscaping.escaped(file)): \(failure.reason)", exitCode: 66))
            }
            switch options.format {
            case .cron:
                let importer = CrontabImporter(systemFormat: options.systemCrontab ?? CrontabImporter.isSystemPath(file), flavor: flavor, mail: options.mail,
                                               sendmailPath: sendmailPath, sendmailInstalled: access(sendmailPath, X_OK) == 0,
                                               owner: options.owner, asCronRuns: options.asCronRuns)
                importer.importFile(path: file, text: text, facts: CronFileFacts.of(file), into: &config)
            case .incron:
                IncrontabImporter().importFile(path: file, text: text, into: &config)
            case .systemd:
                SystemdUnitImporter().importFile(path: file, text: text, givenFiles: options.files, into: &config)
            }
        }
        return .success(config)
    }
}
