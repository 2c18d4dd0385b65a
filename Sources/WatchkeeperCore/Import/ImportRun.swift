// `watchkeeper import`: read the files, translate them, and refuse to hand back a
// configuration that check-config would not accept.

#if canImport(Glibc)
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

    public init(format: ImportFormat, files: [String], systemCrontab: Bool? = nil, mail: Bool = true) {
        self.format = format
        self.files = files
        self.systemCrontab = systemCrontab
        self.mail = mail
    }
}

public struct ImportFailure: Error, Sendable, CustomStringConvertible {
    public var description: String
    public var exitCode: Int32
}

public enum ImportRun {
    public static let sendmailPath = "/usr/sbin/sendmail"

    /// The translated configuration, or why a file could not be read.
    public static func translate(_ options: ImportOptions) -> Result<ImportedConfig, ImportFailure> {
        var config = ImportedConfig()
        config.sources = options.files
        switch options.format {
        case .cron:
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
                let importer = CrontabImporter(systemFormat: options.systemCrontab ?? CrontabImporter.isSystemPath(file), mail: options.mail,
                                               sendmailPath: sendmailPath, sendmailInstalled: access(sendmailPath, X_OK) == 0)
                importer.importFile(path: file, text: text, into: &config)
            case .incron:
                IncrontabImporter().importFile(path: file, text: text, into: &config)
            case .systemd:
                SystemdUnitImporter().importFile(path: file, text: text, givenFiles: options.files, into: &config)
            }
        }
        return .success(config)
    }
}
