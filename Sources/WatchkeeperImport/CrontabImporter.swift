// crontab(5) to tasks: user crontabs (five fields and a command) and the system format of
// /etc/crontab and /etc/cron.d/* (a user column before the command), read the way the cron
// being left reads them (CronFlavor): which lines it reads, which files it ignores whole,
// what it does with CRON_TZ, and the CR and byte-order mark a Windows editor leaves.

#if canImport(Glibc)
import WatchkeeperCore
import Glibc
#endif

public struct CrontabImporter: Sendable {
    /// The user column is there (`/etc/crontab`, `/etc/cron.d/*`).
    public var systemFormat: Bool
    public var flavor: CronFlavor
    /// Whether failures are mailed like cron's output (MAILTO), through `sendmailPath`.
    public var mail: Bool
    public var sendmailPath: String
    /// Whether `sendmailPath` exists on the machine doing the import (said in the output).
    public var sendmailInstalled: Bool
    /// Whose table it is when its path does not say (`--owner`: a copy of a user's crontab).
    public var owner: String?
    /// `--as-cron-runs`: exactly what cron runs, not what the table meant: nothing from a
    /// file cron ignores, no line it skips, and the CR it keeps at the end of a command.
    public var asCronRuns: Bool

    public init(systemFormat: Bool, flavor: CronFlavor = .debian, mail: Bool = true, sendmailPath: String = "/usr/sbin/sendmail",
                sendmailInstalled: Bool, owner: String? = nil, asCronRuns: Bool = false) {
        self.systemFormat = systemFormat
        self.flavor = flavor
        self.mail = mail
        self.sendmailPath = sendmailPath
        self.sendmailInstalled = sendmailInstalled
        self.owner = owner
        self.asCronRuns = asCronRuns
    }

    /// `/etc/crontab` and the files of `/etc/cron.d` have a user column; others do not.
    public static func isSystemPath(_ path: String) -> Bool {
        path == "/etc/crontab" || path.hasPrefix("/etc/cron.d/")
    }

    /// A user's crontab in a cron's spool is named after its owner (Debian's
    /// /var/spool/cron/crontabs, cronie's /var/spool/cron).
    static func spoolOwner(_ path: String) -> String? {
        for spool in CronFlavor.allCases.map(\.spoolDirectory) where path.hasPrefix(spool) {
            let name = String(path.dropFirst(spool.count))
            if !name.isEmpty && !name.contains("/") { return name }
        }
        return nil
    }

    /// `facts`: the file's stat, looked at when it is where cron reads tables.
    public func importFile(path: String, text: String, facts: CronFileFacts? = nil, into config: inout ImportedConfig) {
        let lines = SourceLines(text)
        let owner = self.owner ?? Self.spoolOwner(path)
        let reading = reading(lines, path: path, facts: facts, owner: owner)
        if let refusal = reading.fileRefusal {
            // The entries the table meant, its BOM and CRs aside.
            let entries = lines.lines.filter {
                if case .entry = CrontabLine.read($0.text, systemFormat: systemFormat, flavor: flavor) { true } else { false }
            }.count
            config.ignoredFiles.append(IgnoredFile(file: path, reason: refusal, cron: flavor.title, translated: !asCronRuns, entries: entries))
            if asCronRuns { return }
        }
        for note in fileNotes(lines, path: path) where !config.notes.contains(note) { config.notes.append(note) }
        let translator = CronEntryTranslator(flavor: flavor, mail: mail, sendmailPath: sendmailPath, owner: owner)
        var state = CrontabState()
        for (index, line) in lines.lines.enumerated() {
            let source = ImportSource(file: path, line: line.number)
            // What cron reads, or what the table meant: without its BOM and CR.
            let text = asCronRuns ? line.raw : line.text
            let skipped = flavor.ignoresWholeFileOnBadLine ? nil : reading.skips[index]
            if asCronRuns, let skipped {
                if reading.kinds[index] != .nothing { config.untranslated.append(UntranslatedLine(source: source, text: line.text, reason: skipped)) }
                continue
            }
            switch CrontabLine.read(text, systemFormat: systemFormat, flavor: flavor) {
            case .nothing:
                continue
            case .assignment(let name, let value):
                assign(name, value, source: source, line: line.text, state: &state, config: &config)
            case .entry(let entry):
                switch translator.translate(entry, state: state, source: source, config: &config) {
                case .success(var task):
                    if let skipped { task.notes.append("\(skipped); translated as written.") }
                    task.original = String(Substring(line.text).drop { $0 == " " || $0 == "\t" })
                    config.entries.append(task)
                case .failure(let refusal):
                    config.untranslated.append(UntranslatedLine(source: source, text: line.text, reason: refusal.text))
                }
            case .bad(let reason):
                config.untranslated.append(UntranslatedLine(source: source, text: line.text, reason: badLine(reason)))
            }
        }
        if config.entries.contains(where: { $0.source.file == path && $0["on_failure"] != nil }) {
            let note = sendmailInstalled
                ? "on_failure mails through \(sendmailPath) -t, which is installed on the machine that ran this import."
                : "on_failure mails through \(sendmailPath) -t, which is NOT installed on the machine that ran this import: install an MTA (e.g. the Debian package exim4 or msmtp-mta) where this runs, or remove on_failure."
            if !config.notes.contains(note) { config.notes.append(note) }
        }
    }

    private func badLine(_ reason: String) -> String {
        flavor.ignoresWholeFileOnBadLine
            ? "\(flavor.title) cannot read this line (\(reason)) and ignores the whole file for it"
            : "\(flavor.title) cannot read this line (\(reason)) and skips it"
    }

    // MARK: The file as cron reads it

    struct Reading {
        /// Each line as cron classifies it, with its BOM and CR.
        var kinds: [CrontabLine] = []
        /// Why cron skips a line (cronie) or, for Debian, ignores the file for it.
        var skips: [Int: String] = [:]
        /// Why cron reads nothing of the file.
        var fileRefusal: String?
    }

    func reading(_ lines: SourceLines, path: String, facts: CronFileFacts?, owner: String?) -> Reading {
        var result = Reading()
        var ownerID: (uid: UInt32, name: String)?
        if let owner {
            guard let credentials = try? Credentials.lookup(user: owner, group: nil) else {
                result.fileRefusal = "its owner \(owner) has no account on this machine (an orphan, as cron logs it)"
                result.kinds = lines.lines.map { CrontabLine.read($0.raw, systemFormat: systemFormat, flavor: flavor) }
                return result
            }
            ownerID = (credentials.uid, owner)
        }
        result.fileRefusal = flavor.refusesFile(at: path, facts: cronReads(path) ? facts : nil, owner: ownerID)
        for (index, line) in lines.lines.enumerated() {
            var kind = CrontabLine.read(line.raw, systemFormat: systemFormat, flavor: flavor)
            if case .entry(let entry) = kind, let user = entry.user, (try? Credentials.lookup(user: user, group: nil)) == nil {
                // Debian's load_entry refuses the line; cronie keeps it and fails each run.
                kind = flavor == .debian ? .bad("no user \(user) on this machine") : kind
                if flavor == .cronie { result.skips[index] = "cronie never runs this line: no user \(user) on this machine (it logs an error at each run)" }
            }
            result.kinds.append(kind)
            var why: String?
            if case .bad(let reason) = kind {
                why = index == 0 && lines.hasByteOrderMark ? "the file starts with a byte-order mark, which makes its first line one cron cannot read (\(reason))" : "line \(line.number) is one it cannot read (\(reason))"
            } else if index == lines.lines.count - 1 && lines.lastLineUnterminated && kind != .nothing {
                why = "its last line has no newline at its end"
            }
            guard let why else { continue }
            result.skips[index] = flavor.ignoresWholeFileOnBadLine ? why : "cronie skips this line: \(why)"
            if flavor.ignoresWholeFileOnBadLine && result.fileRefusal == nil { result.fileRefusal = why }
        }
        return result
    }

    /// Whether `path` is where this cron reads tables (where its owner and mode count).
    private func cronReads(_ path: String) -> Bool {
        Self.isSystemPath(path) || path.hasPrefix(flavor.spoolDirectory)
    }

    private func fileNotes(_ lines: SourceLines, path: String) -> [String] {
        var notes: [String] = []
        let effect = asCronRuns
            ? "and so do these tasks (--as-cron-runs): a command then usually fails (`/usr/local/bin/backup\\r: not found`), or writes to a file whose name ends in CR"
            : "so a command usually fails there (`/usr/local/bin/backup\\r: not found`) or writes to a file whose name ends in CR; translated without it"
        if let note = lines.windowsNote(file: path, reader: flavor.title, effect: effect) { notes.append(note) }
        if lines.hasByteOrderMark {
            notes.append("\(path) starts with a byte-order mark (U+FEFF, the bytes EF BB BF a Windows editor writes): cron reads it as part of the first line"
                + (asCronRuns ? "." : "; translated without it."))
        }
        return notes
    }

    // MARK: Assignments

    private func assign(_ name: String, _ value: String, source: ImportSource, line: String, state: inout CrontabState, config: inout ImportedConfig) {
        if name.unicodeScalars.contains("\u{FEFF}") {
            config.untranslated.append(UntranslatedLine(source: source, text: line, reason: "cron reads the byte-order mark as part of this name, so it sets \(ImportedConfig.commentText(name)), which no program reads as \(name.unicodeScalars.filter { $0 != "\u{FEFF}" }.map(String.init).joined())"))
            return
        }
        switch name {
        case "CRON_TZ" where flavor.honoursCronTZ:
            if (try? TimeZoneRules.load(identifier: value)) != nil {
                state.timezone = value
            } else {
                // glibc reads a TZ it cannot find as UTC, and cronie sets TZ=CRON_TZ.
                state.timezone = "UTC"
                config.untranslated.append(UntranslatedLine(source: source, text: line, reason: "this machine has no zone \(value): cronie (glibc) reads the entries after it in UTC, and so do these tasks"))
            }
        case "CRON_TZ":
            state.ignoredCronTZ = value.isEmpty ? nil : value
        case "SHELL":
            state.shell = value
        case "MAILTO":
            state.mailTo = value
        default:
            break
        }
        if name.hasPrefix("WATCHKEEPER_") || name.isEmpty {
            config.untranslated.append(UntranslatedLine(source: source, text: line, reason: "names starting with WATCHKEEPER_ are set by the daemon and cannot be given to a job"))
            return
        }
        state.environment.removeAll { $0.key == name }
        state.environment.append((name, value))
    }
}

extension Substring {
    func trimmingBlanks() -> String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
