// One crontab entry, read as cron reads it (CrontabLine), into a task that runs as cron runs
// it: the schedule, the user, `SHELL -c command` ($0 is the shell), `%` as standard input,
// the environment cron builds (the table's assignments, SHELL, PATH), HOME as the working
// directory, and MAILTO as an on_failure hook.

#if canImport(Glibc)
import WatchkeeperCore
import Glibc
#endif

/// What the table has said by the entry's line: its assignments in order, and the ones
/// cron itself reads.
struct CrontabState {
    var environment: [(key: String, value: String)] = []
    var shell = "/bin/sh"
    var mailTo: String?
    /// cronie's CRON_TZ, once it named a zone (nil: the machine's).
    var timezone: String?
    /// Debian's CRON_TZ, which it does not read: said on each entry after it.
    var ignoredCronTZ: String?
    var home: String? { environment.last { $0.key == "HOME" }?.value }
}

struct CronEntryTranslator {
    var flavor: CronFlavor
    var mail: Bool
    var sendmailPath: String
    /// The table's owner: a spool file's name, or --owner.
    var owner: String?

    struct Refusal: Error { let text: String }

    func translate(_ entry: CrontabEntryText, state: CrontabState, source: ImportSource, config: inout ImportedConfig) -> Result<ImportedEntry, Refusal> {
        guard !entry.command.isEmpty else { return .failure(Refusal(text: "an entry without a command: Debian's cron runs an empty command, a task needs one")) }
        let (command, stdin) = Self.splitPercent(entry.command)
        var task = ImportedEntry(kind: .task, name: config.uniqueName(from: Self.programName(command), line: source.line), source: source, original: "")
        if case .failure(let refusal) = schedule(entry.schedule, state: state, into: &task) { return .failure(refusal) }
        let user = entry.user ?? owner
        var account: Account?
        if let user {
            do {
                account = Account.lookup(uid: try Credentials.lookup(user: user, group: nil).uid)
            } catch {
                return .failure(Refusal(text: "\(error) (the job would run as this user)"))
            }
            task["user"] = .string(user)
        }
        runLikeCron(command, stdin: stdin, state: state, account: account, into: &task)
        if let zone = state.ignoredCronTZ {
            task.notes.append("CRON_TZ=\(zone): Debian's cron does not read it (every entry runs in the machine's zone) and passes it to the job as a variable, as this task does. Add timezone = \"\(zone)\" to run it in that zone.")
        }
        if state.timezone == nil, let zone = state.environment.last(where: { $0.key == "TZ" })?.value {
            task.notes.append("TZ=\(zone) is in the job's environment only: cron schedules in its own zone whatever TZ says\(flavor.honoursCronTZ ? " (only CRON_TZ changes that, here timezone)" : "").")
        }
        // Cron neither limits a job's time nor holds back a run while the previous one lasts.
        task["budget"] = .string("7d")
        task["overlap"] = .string("allow")
        mailHook(state: state, user: user, into: &task)
        return .success(task)
    }

    private func schedule(_ spec: String, state: CrontabState, into task: inout ImportedEntry) -> Result<Void, Refusal> {
        if spec == "@reboot" {
            task["manual"] = .bool(true)
            task["run_on_start"] = .bool(true)
            task.notes.append("@reboot: runs when watchkeeper starts (manual = true, run_on_start = true), which is at boot when it is enabled, but also after every restart of the daemon; a reload does not run it again.")
            return .success(())
        }
        do {
            let expression = try CronExpression(parsing: spec)
            if expression.neverFires { return .failure(Refusal(text: "\"\(spec)\" never matches a real date: cron accepts it and never runs it, watchkeeper refuses it")) }
        } catch {
            return .failure(Refusal(text: "watchkeeper's cron syntax refuses \"\(spec)\": \(error.message)"))
        }
        task["cron"] = .string(spec)
        if let zone = state.timezone { task["timezone"] = .string(zone) }
        task.origin = .cron(spec, timezone: state.timezone, cron: flavor)
        return .success(())
    }

    /// As cron's child runs it: `execle(SHELL, SHELL, "-c", command)` in HOME, with the
    /// table's variables and those cron sets when the table does not (SHELL, PATH; HOME
    /// and LOGNAME are the account's, as the daemon sets them).
    private func runLikeCron(_ command: String, stdin: String?, state: CrontabState, account: Account?, into task: inout ImportedEntry) {
        var script = command
        if let stdin {
            // The command goes to a second shell as it is: spliced into a script, a final
            // backslash would have joined the next line (`one\` lost its backslash).
            script = "printf '%s' \(ShellQuoting.quote(stdin)) | \(ShellQuoting.quote(state.shell)) -c \(ShellQuoting.quote(command))"
            task.notes.append("The text after the first unescaped % in the source becomes the job's standard input, each further % a newline and a final newline added, as cron does: printf '%s' '<input>' | SHELL -c '<command>'.")
        }
        task["command"] = .strings([state.shell, "-c", script].map(ShellQuoting.literalArgument))
        var environment = state.environment
        if !environment.contains(where: { $0.key == "SHELL" }) { environment.insert(("SHELL", state.shell), at: 0) }
        if !environment.contains(where: { $0.key == "PATH" }) { environment.insert(("PATH", flavor.defaultPath), at: 0) }
        task["environment"] = .table(environment)
        let home = state.home ?? account?.home
        var info = stat()
        if let home, stat(home, &info) == 0, info.st_mode & S_IFMT == S_IFDIR {
            task["working_directory"] = .string(home)
        } else if let home {
            let cron = flavor == .debian ? "Debian's cron then runs the job in its own directory (/var/spool/cron)" : "cronie then does not run the job"
            task.notes.append("HOME \(home) is not a directory on the machine that ran this import: cron changes to it before the command, and \(cron); no working_directory is set (the daemon's, / under its unit).")
        }
    }

    private func mailHook(state: CrontabState, user: String?, into task: inout ImportedEntry) {
        let recipient: String? = switch state.mailTo {
        case nil: user
        case ""?: nil
        case let address?: address
        }
        if mail, let recipient {
            task["on_failure"] = .strings(["/bin/sh", "-c", Self.mailScript(to: recipient, sendmail: sendmailPath)].map(ShellQuoting.literalArgument))
            task.notes.append("cron mails any output of a job to \(state.mailTo == nil ? "its owner" : "MAILTO"); watchkeeper sends the journal the output and mails \(recipient) only when the run fails or expires, with its last output lines.")
        } else if state.mailTo == nil && user == nil && mail {
            task.notes.append("cron would mail the job's output to the crontab's owner, who is not known from this path (--owner names them); no mail is sent (set MAILTO to have failures mailed).")
        } else if !mail && state.mailTo != "" {
            task.notes.append("cron would mail the job's output; --no-mail: nothing is mailed, the output is in the journal.")
        }
    }

    /// The on_failure script: a message to `recipient` naming the task, its body the run's
    /// last output lines, handed to sendmail, which reads the recipients from To:.
    static func mailScript(to recipient: String, sendmail: String) -> String {
        "(printf 'To: %s\\nSubject: watchkeeper task %s: %s\\n\\n' \(ShellQuoting.quote(recipient)) \"$WATCHKEEPER_TASK\" \"$WATCHKEEPER_OUTCOME\"; "
            + "cat \"$WATCHKEEPER_OUTPUT_FILE\") | \(ShellQuoting.quote(sendmail)) -t"
    }

    /// The command and its standard input, as cron's do_command.c makes them. In the
    /// command, the first `%` not escaped by a backslash ends it, and `\%` and `\\` lose
    /// their backslash (other backslashes stay). The rest is the input, written as
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
                if character == "%" || character == "\\" { command.removeLast() }
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
        return (command, stdinText(rest))
    }

    private static func stdinText(_ rest: Substring) -> String {
        var input = ""
        var needNewline = false
        var escaped = false
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
        return input
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
