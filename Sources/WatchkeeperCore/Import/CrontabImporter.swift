// crontab(5) to tasks: user crontabs (five fields and a command) and the system format of
// /etc/crontab and /etc/cron.d/* (a user column before the command), read the way Debian's
// Vixie cron reads them.

#if canImport(Glibc)
import Glibc
#endif

public struct CrontabImporter: Sendable {
    /// The user column is there (`/etc/crontab`, `/etc/cron.d/*`).
    public var systemFormat: Bool
    /// Whether failures are mailed like cron's output (MAILTO), through `sendmailPath`.
    public var mail: Bool
    public var sendmailPath: String
    /// Whether `sendmailPath` exists on the machine doing the import (said in the output).
    public var sendmailInstalled: Bool

    public init(systemFormat: Bool, mail: Bool = true, sendmailPath: String = "/usr/sbin/sendmail", sendmailInstalled: Bool) {
        self.systemFormat = systemFormat
        self.mail = mail
        self.sendmailPath = sendmailPath
        self.sendmailInstalled = sendmailInstalled
    }

    /// `/etc/crontab` and the files of `/etc/cron.d` have a user column; others do not.
    public static func isSystemPath(_ path: String) -> Bool {
        path == "/etc/crontab" || path.hasPrefix("/etc/cron.d/")
    }

    /// A user's crontab in Debian's spool is named after its owner.
    static func spoolOwner(_ path: String) -> String? {
        let spool = "/var/spool/cron/crontabs/"
        guard path.hasPrefix(spool) else { return nil }
        let name = String(path.dropFirst(spool.count))
        return name.isEmpty || name.contains("/") ? nil : name
    }

    /// Cron's default PATH for jobs (Debian: `_PATH_DEFPATH`); the daemon's is longer.
    static let cronDefaultPath = "/usr/bin:/bin"

    public func importFile(path: String, text: String, into config: inout ImportedConfig) {
        var environment: [(key: String, value: String)] = []
        var shell = "/bin/sh"
        var mailTo: String? = nil
        var timezone: String? = nil
        let owner = Self.spoolOwner(path)
        var sawMail = false
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        for (index, rawLine) in lines.enumerated() {
            let lineNumber = index + 1
            let source = ImportSource(file: path, line: lineNumber)
            var line = Substring(rawLine)
            if line.hasSuffix("\r") { line = line.dropLast() }
            let trimmed = line.drop { $0 == " " || $0 == "\t" }
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            if let (name, value) = Self.assignment(trimmed) {
                switch name {
                case "CRON_TZ":
                    do {
                        _ = try TimeZoneRules.load(identifier: value)
                        timezone = value
                    } catch {
                        config.untranslated.append(UntranslatedLine(source: source, text: String(line), reason: "\(error); the following entries use the machine's zone"))
                        timezone = nil
                    }
                    continue
                case "SHELL":
                    shell = value
                case "MAILTO":
                    mailTo = value
                default:
                    break
                }
                if name.hasPrefix("WATCHKEEPER_") || name.isEmpty {
                    config.untranslated.append(UntranslatedLine(source: source, text: String(line), reason: "names starting with WATCHKEEPER_ are set by the daemon and cannot be given to a job"))
                    continue
                }
                environment.removeAll { $0.key == name }
                environment.append((name, value))
                continue
            }
            switch entry(trimmed, source: source, environment: environment, shell: shell, mailTo: mailTo, owner: owner, timezone: timezone, config: &config) {
            case .success(var entry):
                if entry["on_failure"] != nil { sawMail = true }
                entry.original = String(trimmed)
                config.entries.append(entry)
            case .failure(let reason):
                config.untranslated.append(UntranslatedLine(source: source, text: String(line), reason: reason.text))
            }
        }
        if sawMail {
            let note = sendmailInstalled
                ? "on_failure mails through \(sendmailPath) -t, which is installed on the machine that ran this import."
                : "on_failure mails through \(sendmailPath) -t, which is NOT installed on the machine that ran this import: install an MTA (e.g. the Debian package exim4 or msmtp-mta) where this runs, or remove on_failure."
            if !config.notes.contains(note) { config.notes.append(note) }
        }
    }

    struct Refusal: Error { let text: String }

    /// `NAME = value`, the value's surrounding blanks dropped and one pair of matching
    /// quotes removed, as cron's load_env does; nil if the line is not an assignment.
    static func assignment(_ line: Substring) -> (String, String)? {
        guard let first = line.unicodeScalars.first, first.isASCII, first.properties.isAlphabetic || first == "_" else { return nil }
        guard let equals = line.firstIndex(of: "=") else { return nil }
        let name = line[..<equals].trimmingBlanks()
        guard name.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_") }) else { return nil }
        var value = line[line.index(after: equals)...].trimmingBlanks()
        if value.count >= 2, let quote = value.first, quote == "\"" || quote == "'", value.last == quote {
            value = String(value.dropFirst().dropLast())
        }
        return (name, value)
    }

    private func entry(_ line: Substring, source: ImportSource, environment: [(key: String, value: String)], shell: String,
                       mailTo: String?, owner: String?, timezone: String?, config: inout ImportedConfig) -> Result<ImportedEntry, Refusal> {
        var rest = line
        func nextField() -> String? {
            rest = rest.drop { $0 == " " || $0 == "\t" }
            guard !rest.isEmpty else { return nil }
            let end = rest.firstIndex { $0 == " " || $0 == "\t" } ?? rest.endIndex
            let field = String(rest[..<end])
            rest = rest[end...]
            return field
        }
        var fields: [String] = []
        let first = nextField() ?? ""
        if first.hasPrefix("@") {
            fields = [first]
        } else {
            fields = [first]
            for _ in 0..<4 {
                guard let field = nextField() else { return .failure(Refusal(text: "not a cron entry: fewer than five time fields and a command")) }
                fields.append(field)
            }
        }
        var user = owner
        if systemFormat {
            guard let column = nextField() else { return .failure(Refusal(text: "no user column and command (system crontab format)")) }
            user = column
        }
        // The command is the rest of the line, its leading blanks dropped (cron keeps the rest).
        let commandText = String(rest.drop { $0 == " " || $0 == "\t" })
        guard !commandText.isEmpty else { return .failure(Refusal(text: "the entry has no command")) }
        let spec = fields.joined(separator: " ")

        let (command, stdin) = Self.splitPercent(commandText)
        var entry = ImportedEntry(kind: .task, name: config.uniqueName(from: Self.programName(command), line: source.line), source: source, original: "")
        if spec.lowercased() == "@reboot" {
            entry["manual"] = .bool(true)
            entry["run_on_start"] = .bool(true)
            entry.notes.append("@reboot: runs when watchkeeper starts (manual = true, run_on_start = true), which is at boot when it is enabled, but also after every restart of the daemon; a reload does not run it again.")
        } else {
            do {
                let expression = try CronExpression(parsing: spec)
                if expression.neverFires { return .failure(Refusal(text: "\"\(spec)\" never matches a real date: cron accepts it and never runs it, watchkeeper refuses it")) }
            } catch {
                return .failure(Refusal(text: "watchkeeper's cron syntax refuses \"\(spec)\": \(error.message)"))
            }
            entry["cron"] = .string(spec)
            if let timezone { entry["timezone"] = .string(timezone) }
            entry.origin = .cron(spec, timezone: timezone)
        }
        if let user {
            do {
                _ = try Credentials.lookup(user: user, group: nil)
            } catch {
                return .failure(Refusal(text: "\(error) (the job would run as this user)"))
            }
            entry["user"] = .string(user)
        }

        var script = command
        if let stdin {
            script = "printf '%s' \(ShellQuoting.quote(stdin)) | (\n\(command)\n)"
            entry.notes.append("The text after the first unescaped % in the source becomes the job's standard input, each further % a newline and a final newline added, as Debian's cron does: the command is wrapped as printf '%s' '<input>' | ( command ).")
        }
        let usesSh = shell == "/bin/sh"
        if usesSh {
            entry["shell"] = .bool(true)
            entry["command"] = .string(script)
        } else {
            entry["command"] = .strings([ShellQuoting.literalArgument(shell), "-c", ShellQuoting.literalArgument(script)])
            entry.notes.append("SHELL=\(shell): the command runs as \(shell) -c '<command>', as cron runs it.")
        }

        if timezone == nil, let zone = environment.first(where: { $0.key == "TZ" })?.value {
            entry.notes.append("TZ=\(zone) is in the job's environment only: cron schedules in its own zone whatever TZ says (only CRON_TZ changes that, here timezone).")
        }
        var jobEnvironment = environment
        if !jobEnvironment.contains(where: { $0.key == "PATH" }) {
            jobEnvironment.insert(("PATH", Self.cronDefaultPath), at: 0)
        }
        entry["environment"] = .table(jobEnvironment)
        // Cron neither limits a job's time nor holds back a run while the previous one lasts.
        entry["budget"] = .string("7d")
        entry["overlap"] = .string("allow")

        let recipient: String? = switch mailTo {
        case nil: user
        case ""?: nil
        case let address?: address
        }
        if mail, let recipient {
            let hook = Self.mailScript(to: recipient, sendmail: sendmailPath)
            entry["on_failure"] = usesSh ? .string(hook) : .strings(["/bin/sh", "-c", hook])
            entry.notes.append("cron mails any output of a job to \(mailTo == nil ? "its owner" : "MAILTO"); watchkeeper sends the journal the output and mails \(recipient) only when the run fails or expires, with its last output lines.")
        } else if mailTo == nil && user == nil && mail {
            entry.notes.append("cron would mail the job's output to the crontab's owner, who is not known from this path; no mail is sent (set MAILTO to have failures mailed).")
        } else if !mail && mailTo != "" {
            entry.notes.append("cron would mail the job's output; --no-mail: nothing is mailed, the output is in the journal.")
        }
        return .success(entry)
    }

    /// The on_failure script: a message to `recipient` naming the task, its body the run's
    /// last output lines, handed to sendmail, which reads the recipients from To:.
    static func mailScript(to recipient: String, sendmail: String) -> String {
        "(printf 'To: %s\\nSubject: watchkeeper task %s: %s\\n\\n' \(ShellQuoting.quote(recipient)) \"$WATCHKEEPER_TASK\" \"$WATCHKEEPER_OUTCOME\"; "
            + "cat \"$WATCHKEEPER_OUTPUT_FILE\") | \(ShellQuoting.quote(sendmail)) -t"
    }

    /// The command and its standard input, as Debian's cron (do_command.c) makes them.
    /// In the command, the first `%` not escaped by a backslash ends it, and `\%` and `\\`
    /// lose their backslash (other backslashes stay). The rest is the input, written as
    /// `\%` -> `%`, `%` -> newline, `\x` -> `\x`, with a newline added when it does not end
    /// with one; nil when there is no `%`.
    static func splitPercent(_ text: String) -> (command: String, stdin: String?) {
        var command = ""
        var rest: Substring? = nil
        var escaped = false
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            index = text.index(after: index)
            if escaped {
                escaped = false
                if character == "%" || character == "\\" {
                    command.removeLast()
                }
                command.append(character)
                continue
            }
            if character == "\\" {
                escaped = true
                command.append(character)
                continue
            }
            if character == "%" {
                rest = text[index...]
                break
            }
            command.append(character)
        }
        guard let rest else { return (command, nil) }
        var input = ""
        var needNewline = false
        escaped = false
        for original in rest {
            var character = original
            if escaped {
                if character != "%" { input += "\\" }
            } else if character == "%" {
                character = "\n"
            }
            escaped = character == "\\"
            if !escaped {
                input.append(character)
                needNewline = character != "\n"
            }
        }
        if escaped { input += "\\" }
        if needNewline { input += "\n" }
        return (command, input)
    }

    /// The program a command runs, for the task's name: in the first part of a `&&`, `||`,
    /// `;` or `|` chain that is not a guard (`test -x ... ||`, `cd / &&`), the first word that
    /// is not an assignment, a redirection or a wrapper like `nice`.
    static func programName(_ command: String) -> String {
        let guards: Set<String> = ["test", "[", "[[", "command", "cd", "true", "type", "which"]
        let wrappers: Set<String> = ["exec", "nice", "ionice", "env", "sudo", "timeout", "flock", "chronic", "!", "{", "(", "if", "then", "do", "time"]
        var segments: [[String]] = [[]]
        for word in command.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).map(String.init) {
            if ["&&", "||", ";", "|", "&"].contains(word) {
                segments.append([])
            } else {
                segments[segments.count - 1].append(word)
            }
        }
        for segment in segments {
            let words = segment.filter { !$0.contains("=") && !$0.hasPrefix(">") && !$0.hasPrefix("<") && !$0.hasPrefix("-") && !$0.hasPrefix("2>") && !wrappers.contains($0) && Int($0) == nil }
            guard let word = words.first, !guards.contains(word) else { continue }
            let base = word.split(separator: "/").last.map(String.init) ?? word
            if !base.isEmpty { return base }
        }
        return "cron"
    }
}

extension Substring {
    func trimmingBlanks() -> String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
