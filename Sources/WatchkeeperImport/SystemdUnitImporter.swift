// systemd.timer(5), systemd.path(5) and systemd.service(5) units to tasks and watch rules:
// the trigger decides the schedule or the watched paths, the service the job.

#if canImport(Glibc)
import WatchkeeperCore
import Glibc
#endif

public struct SystemdUnitImporter: Sendable {
    /// Where a service is looked for after the trigger's own directory and the given files.
    public var searchDirectories: [String]

    public init(searchDirectories: [String] = ["/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"]) {
        self.searchDirectories = searchDirectories
    }

    /// `files` are all the paths given, so that a service given beside its timer is found.
    public func importFile(path: String, text: String, givenFiles: [String], into config: inout ImportedConfig) {
        let unit = UnitFile(path: path, text: text)
        if unit.name.hasSuffix(".service") {
            let triggered = givenFiles.contains { other in
                guard other != path, other.hasSuffix(".timer") || other.hasSuffix(".path") else { return false }
                return UnitFile.fileStem(other) == unit.stem || (readText(other).map { UnitFile(path: other, text: $0).last(other.hasSuffix(".timer") ? "Timer" : "Path", "Unit")?.value == unit.name } ?? false)
            }
            if !triggered {
                config.untranslated.append(UntranslatedLine(source: ImportSource(file: path, line: 1), text: unit.name,
                                                            reason: "a service without a .timer or .path unit among the files has no trigger to translate; give its timer or path unit"))
            }
            return
        }
        guard unit.name.hasSuffix(".timer") || unit.name.hasSuffix(".path") else {
            config.untranslated.append(UntranslatedLine(source: ImportSource(file: path, line: 1), text: unit.name, reason: "only .timer and .path units (with their services) are translated"))
            return
        }
        let isTimer = unit.name.hasSuffix(".timer")
        let triggerSection = isTimer ? "Timer" : "Path"
        if unit.stem.hasSuffix("@") {
            config.untranslated.append(UntranslatedLine(source: ImportSource(file: path, line: 1), text: unit.name,
                                                        reason: "a template unit needs an instance (\(unit.stem)INSTANCE.\(isTimer ? "timer" : "path")); import an instance's file"))
            return
        }
        let serviceName = unit.last(triggerSection, "Unit")?.value ?? unit.stem + ".service"
        guard let servicePath = findService(serviceName, besides: path, givenFiles: givenFiles), let serviceText = readText(servicePath) else {
            config.untranslated.append(UntranslatedLine(source: ImportSource(file: path, line: 1), text: unit.name,
                                                        reason: "unable to find \(serviceName) beside it, among the files given, or in \(searchDirectories.joined(separator: ", "))"))
            return
        }
        let service = UnitFile(path: servicePath, text: serviceText)
        if !config.sources.contains(servicePath) { config.sources.append(servicePath) }

        var job = ImportedEntry(kind: .task, name: "", source: ImportSource(file: path, line: 1), original: "")
        switch translateService(service, instanceOf: unit, into: &job, config: &config) {
        case .failure(let refusal):
            config.untranslated.append(UntranslatedLine(source: ImportSource(file: servicePath, line: refusal.line), text: refusal.text, reason: refusal.reason + "; so \(unit.name) is not translated"))
            return
        case .success: break
        }
        translateUnitSection(unit, into: &job, config: &config)
        translateUnitSection(service, into: &job, config: &config)
        for setting in unit.settings where setting.section == "Install" {
            config.untranslated.append(UntranslatedLine(source: ImportSource(file: unit.path, line: setting.line), text: setting.text,
                                                        reason: "a task or watch rule is enabled by being in the configuration"))
        }
        if isTimer {
            translateTimer(unit, job: job, config: &config)
        } else {
            translatePath(unit, job: job, config: &config)
        }
        if let dropIns = [servicePath + ".d", path + ".d"].first(where: { (directory: String) in access(directory, F_OK) == 0 }) {
            config.notes.append("\(dropIns) exists: drop-in files are not read; merge them into the result by hand.")
        }
    }

    private func readText(_ path: String) -> String? {
        guard case .success(let bytes) = ConfigFileReader.read(path) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    private func findService(_ name: String, besides trigger: String, givenFiles: [String]) -> String? {
        if let given = givenFiles.first(where: { $0 == name || $0.hasSuffix("/" + name) }) { return given }
        let directory = trigger.contains("/") ? String(trigger[..<trigger.lastIndex(of: "/")!]) : "."
        for candidate in [directory] + searchDirectories {
            let path = (candidate.isEmpty ? "" : candidate) + "/" + name
            if access(path, R_OK) == 0 { return path }
        }
        return nil
    }

    struct Refusal: Error {
        var line: Int
        var text: String
        var reason: String
    }

    // MARK: - The trigger

    private func translateTimer(_ timer: UnitFile, job: ImportedEntry, config: inout ImportedConfig) {
        var entry = job
        entry.name = config.uniqueName(from: timer.stem, line: nil)
        entry.source = ImportSource(file: timer.path, line: timer.settings.first { $0.section == "Timer" }?.line ?? 1)
        entry.original = timer.name
        let calendars = timer.list("Timer", "OnCalendar")
        let monotonicKeys = ["OnActiveSec", "OnBootSec", "OnStartupSec", "OnUnitActiveSec", "OnUnitInactiveSec"]
        var schedule: [(key: String, value: ImportValue)] = []
        func untranslated(_ setting: UnitFile.Setting, _ reason: String) {
            config.untranslated.append(UntranslatedLine(source: ImportSource(file: timer.path, line: setting.line), text: setting.text, reason: reason))
        }
        if !calendars.isEmpty {
            let values = calendars.map(\.value)
            schedule.append(("calendar", values.count == 1 ? .string(values[0]) : .strings(values)))
            entry.origin = .systemdCalendar(values)
            for key in monotonicKeys {
                for setting in timer.list("Timer", key) { untranslated(setting, "a task has one schedule: the calendar is kept") }
            }
        } else {
            let repeating = (timer.list("Timer", "OnUnitActiveSec") + timer.list("Timer", "OnUnitInactiveSec")).first
            let starting = (timer.list("Timer", "OnBootSec") + timer.list("Timer", "OnStartupSec") + timer.list("Timer", "OnActiveSec")).first
            if let repeating {
                guard let seconds = Self.timeSpan(repeating.value), seconds >= 0.1 else {
                    untranslated(repeating, "unable to read the time span \"\(repeating.value)\"")
                    return
                }
                schedule.append(("every", .string(Self.durationText(min(seconds, 366 * 86_400)))))
                entry.notes.append("\(repeating.key)=\(repeating.value) is every = \"\(Self.durationText(seconds))\": watchkeeper counts intervals from its start (anchor + k x interval), not from the service's last activation or deactivation, so a long run does not push the next one back.")
            } else {
                schedule.append(("manual", .bool(true)))
            }
            if let starting {
                schedule.append(("run_on_start", .bool(true)))
                entry.notes.append("\(starting.key)=\(starting.value) is run_on_start = true: the first run is when watchkeeper starts, not \(starting.value) after \(starting.key == "OnBootSec" ? "boot" : "the manager's start").")
                for setting in (timer.list("Timer", "OnBootSec") + timer.list("Timer", "OnStartupSec") + timer.list("Timer", "OnActiveSec")).dropFirst() {
                    untranslated(setting, "one start-up run is kept (\(starting.key))")
                }
            }
            for setting in (timer.list("Timer", "OnUnitActiveSec") + timer.list("Timer", "OnUnitInactiveSec")).dropFirst() {
                untranslated(setting, "a task has one interval (\(repeating?.key ?? "")) is kept")
            }
            if repeating == nil && starting == nil {
                config.untranslated.append(UntranslatedLine(source: ImportSource(file: timer.path, line: 1), text: timer.name, reason: "the timer has no OnCalendar= and no monotonic trigger; the task is manual"))
            }
        }
        entry.keys.insert(contentsOf: schedule, at: 0)
        for setting in timer.settings where setting.section == "Timer" {
            switch setting.key {
            case "OnCalendar", "OnActiveSec", "OnBootSec", "OnStartupSec", "OnUnitActiveSec", "OnUnitInactiveSec", "Unit":
                continue
            case "Persistent":
                if Self.boolean(setting.value) == true {
                    if calendars.isEmpty { untranslated(setting, "Persistent= only applies to OnCalendar= timers") } else { entry["persistent"] = .bool(true) }
                }
            case "RandomizedDelaySec":
                if let seconds = Self.timeSpan(setting.value) {
                    if seconds > 0 { entry["jitter"] = .string(Self.durationText(min(seconds, 86_400))) }
                    entry.notes.append("RandomizedDelaySec=\(setting.value) is jitter: a delay fixed per task and machine (from /etc/machine-id), where systemd picks a new one for every elapse\(seconds > 86_400 ? "; capped at watchkeeper's maximum of 1d" : "").")
                } else {
                    untranslated(setting, "unable to read the time span")
                }
            case "FixedRandomDelay":
                if Self.boolean(setting.value) == true { entry.notes.append("FixedRandomDelay=yes: watchkeeper's jitter is always fixed per task and machine.") }
            case "AccuracySec":
                entry.notes.append("AccuracySec=\(setting.value): watchkeeper fires at the exact time; systemd may elapse up to this much late to coalesce wake-ups.")
            case "WakeSystem":
                if Self.boolean(setting.value) == true { untranslated(setting, "watchkeeper does not wake a suspended system") }
            case "RemainAfterElapse":
                untranslated(setting, "a task has no elapsed state to keep")
            default:
                untranslated(setting, "no watchkeeper equivalent for [Timer] \(setting.key)=")
            }
        }
        if calendars.isEmpty, entry["persistent"] != nil { entry["persistent"] = nil }
        config.entries.append(entry)
    }

    private func translatePath(_ unit: UnitFile, job: ImportedEntry, config: inout ImportedConfig) {
        var translated = 0
        for setting in unit.settings where setting.section == "Path" {
            func untranslated(_ reason: String) {
                config.untranslated.append(UntranslatedLine(source: ImportSource(file: unit.path, line: setting.line), text: setting.text, reason: reason))
            }
            if setting.key == "Unit" { continue }
            guard let (events, described) = Self.pathEvents(setting.key) else {
                untranslated(Self.pathRefusal(setting.key))
                continue
            }
            var note = described
            let path = setting.value
            guard path.hasPrefix("/") else { untranslated("the path must be absolute"); continue }
            var directory = path
            var include: [String] = []
            var info = stat()
            let parent: String = {
                let slash = path.lastIndex(of: "/")!
                return slash == path.startIndex ? "/" : String(path[..<slash])
            }()
            let base = String(path[path.index(after: path.lastIndex(of: "/")!)...])
            if setting.key == "PathExistsGlob" {
                guard !parent.contains("*") && !parent.contains("?") && !parent.contains("[") else {
                    untranslated("only a pattern in the last path component maps to a watch rule (include)")
                    continue
                }
                directory = parent
                include = [base]
            } else if setting.key == "DirectoryNotEmpty" {
                directory = path
            } else if stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR && setting.key != "PathExists" {
                directory = path
                note += " \(path) is a directory here: changes of entries in it start jobs."
            } else {
                directory = parent
                include = [base]
                note += " The directory \(parent) is watched for the name \(base)."
            }
            var entry = job
            entry.kind = .watch
            entry.name = config.uniqueName(from: unit.stem, line: translated == 0 ? nil : setting.line)
            entry.source = ImportSource(file: unit.path, line: setting.line)
            entry.original = setting.text
            var keys: [(key: String, value: ImportValue)] = [("path", .string(directory)), ("events", .strings(events.map(\.rawValue)))]
            if !include.isEmpty { keys.append(("include", .strings(include))) }
            keys.append(("catch_up", .bool(setting.key == "DirectoryNotEmpty" || setting.key.hasPrefix("PathExists"))))
            entry.keys.insert(contentsOf: keys, at: 0)
            entry.notes.insert(note, at: 0)
            entry.notes.append("The service learns nothing of the file from systemd; here the job could use {path} or $WATCHKEEPER_PATH.")
            config.entries.append(entry)
            translated += 1
        }
        if translated == 0 {
            config.untranslated.append(UntranslatedLine(source: ImportSource(file: unit.path, line: 1), text: unit.name, reason: "no path directive that maps to a watch rule"))
        }
    }

    /// The events a path directive watches for, and what differs from systemd.
    private static func pathEvents(_ key: String) -> (events: [WatchEvent], note: String)? {
        switch key {
        case "PathChanged":
            return ([.closedWrite, .movedIn, .created, .deleted, .movedOut, .attrib],
                    "PathChanged=: a job when a file there is closed after writing, created, deleted, moved or has its attributes changed.")
        case "PathModified":
            return ([.modified, .closedWrite, .movedIn, .created, .deleted, .movedOut, .attrib], "PathModified=: as PathChanged= and on every write too.")
        case "DirectoryNotEmpty":
            return ([.created, .movedIn], "DirectoryNotEmpty=: one job per file that appears (and, with catch_up, per file already there at start), where systemd starts the service once while the directory is not empty.")
        case "PathExists":
            return ([.created, .movedIn], "PathExists=: a job when the path appears (and at start if it is there); systemd also restarts the service while it keeps existing.")
        case "PathExistsGlob":
            return ([.created, .movedIn], "PathExistsGlob=: a job for each file that appears matching the pattern (and at start for those already there).")
        default:
            return nil
        }
    }

    private static func pathRefusal(_ key: String) -> String {
        switch key {
        case "MakeDirectory", "DirectoryMode": return "watchkeeper does not create the watched directory; create it (e.g. with tmpfiles.d)"
        case "TriggerLimitIntervalSec", "TriggerLimitBurst": return "watchkeeper has no trigger rate limit (max_concurrent limits jobs at once)"
        default: return "no watchkeeper equivalent for [Path] \(key)="
        }
    }

    private func translateUnitSection(_ unit: UnitFile, into entry: inout ImportedEntry, config: inout ImportedConfig) {
        for setting in unit.settings where setting.section == "Unit" {
            switch setting.key {
            case "Description":
                entry.notes.insert("\(unit.name): \(setting.value)", at: 0)
            case "Documentation":
                entry.notes.append("\(unit.name) documentation: \(setting.value)")
            default:
                let reason = setting.key.hasPrefix("Condition") || setting.key.hasPrefix("Assert")
                    ? "watchkeeper has no start conditions; put a test in the command if it matters"
                    : "watchkeeper has no unit dependencies or ordering (a task's after names other tasks)"
                config.untranslated.append(UntranslatedLine(source: ImportSource(file: unit.path, line: setting.line), text: setting.text, reason: reason))
            }
        }
    }

    // MARK: - The service

    private func translateService(_ service: UnitFile, instanceOf trigger: UnitFile, into entry: inout ImportedEntry, config: inout ImportedConfig) -> Result<Void, Refusal> {
        var commands: [(line: UnitFile.Setting, command: ExecCommand)] = []
        for key in ["ExecStartPre", "ExecStart", "ExecStartPost"] {
            for setting in service.list("Service", key) {
                switch ExecCommand.parse(setting.value, unitName: service.name) {
                case .success(let command): commands.append((setting, command))
                case .failure(let problem): return .failure(Refusal(line: setting.line, text: setting.text, reason: problem.text))
                }
            }
        }
        guard !commands.isEmpty else {
            return .failure(Refusal(line: 1, text: service.name, reason: "the service has no ExecStart="))
        }
        var user: String? = nil
        let serviceType = service.last("Service", "Type")?.value ?? "simple"
        for setting in service.settings where setting.section == "Service" {
            var reasons: [String] = []
            func untranslated(_ text: String) { reasons.append(text) }
            if ["ExecStartPre", "ExecStart", "ExecStartPost"].contains(setting.key) { continue }
            switch applyIdentity(setting, into: &entry, user: &user, untranslated: untranslated) {
            case .failure(let refusal): return .failure(refusal)
            case .success(true): break
            case .success(false):
                if !applyLimit(setting, serviceType: serviceType, into: &entry, untranslated: untranslated) {
                    applyOther(setting, into: &entry, untranslated: untranslated)
                }
            }
            for reason in reasons {
                config.untranslated.append(UntranslatedLine(source: ImportSource(file: service.path, line: setting.line), text: setting.text, reason: reason))
            }
        }
        if entry["budget"] == nil {
            entry["budget"] = .string("7d")
            entry.notes.append("No start timeout: budget = \"7d\", watchkeeper's maximum (a oneshot service's default TimeoutStartSec is infinity).")
        }
        Self.applyCommands(commands, user: user, into: &entry)
        return .success(())
    }

    /// Who runs the job, where, with what environment; false: not one of those keys.
    private func applyIdentity(_ setting: UnitFile.Setting, into entry: inout ImportedEntry, user: inout String?,
                               untranslated: (String) -> Void) -> Result<Bool, Refusal> {
        switch setting.key {
        case "Type":
            if !["oneshot", "simple", "exec"].contains(setting.value) {
                untranslated("a job is a process watchkeeper waits for; Type=\(setting.value) has no equivalent, the main process's exit ends the run")
            }
        case "User":
            do { _ = try Credentials.lookup(user: setting.value, group: nil) } catch {
                return .failure(Refusal(line: setting.line, text: setting.text, reason: "\(error)"))
            }
            user = setting.value
            entry["user"] = .string(setting.value)
        case "Group":
            do { _ = try Credentials.lookup(user: nil, group: setting.value) } catch {
                return .failure(Refusal(line: setting.line, text: setting.text, reason: "\(error)"))
            }
            entry["group"] = .string(setting.value)
        case "WorkingDirectory":
            let directory = setting.value.hasPrefix("-") ? String(setting.value.dropFirst()) : setting.value
            if directory.hasPrefix("/") { entry["working_directory"] = .string(directory) } else { untranslated("only an absolute path maps to working_directory") }
        case "Environment":
            var pairs: [(key: String, value: String)] = []
            if case .table(let existing) = entry["environment"] { pairs = existing }
            for word in ExecCommand.words(setting.value) ?? [] {
                guard let equals = word.firstIndex(of: "=") else { continue }
                let key = String(word[..<equals])
                if key.hasPrefix("WATCHKEEPER_") || key.isEmpty { untranslated("\"\(word)\": names starting with WATCHKEEPER_ are set by the daemon, and a name cannot be empty"); continue }
                pairs.removeAll { $0.key == key }
                pairs.append((key, String(word[word.index(after: equals)...])))
            }
            entry["environment"] = .table(pairs)
        case "EnvironmentFile":
            untranslated("systemd reads the file at every start; watchkeeper's environment is in the configuration: copy the variables into environment")
        default:
            return .success(false)
        }
        return .success(true)
    }

    /// Time, signals and resources; false: not one of those keys.
    private func applyLimit(_ setting: UnitFile.Setting, serviceType: String, into entry: inout ImportedEntry, untranslated: (String) -> Void) -> Bool {
        let isOneshot = serviceType == "oneshot"
        switch setting.key {
        case "TimeoutStartSec", "RuntimeMaxSec", "TimeoutSec":
            if setting.value == "infinity" { return true }
            // Only a oneshot service's start lasts its whole run; for the others the start
            // timeout is over once the process runs.
            if setting.key != "RuntimeMaxSec" && !isOneshot {
                untranslated("for Type=\(serviceType) the start timeout ends when the process has started, not when it exits; only RuntimeMaxSec= would be a budget")
                return true
            }
            guard let seconds = Self.timeSpan(setting.value) else { untranslated("unable to read the time span"); return true }
            if seconds > 0 {
                entry["budget"] = .string(Self.durationText(min(max(seconds, 0.01), 7 * 86_400)))
                entry.notes.append("\(setting.key)=\(setting.value) is the budget\(seconds > 7 * 86_400 ? " (capped at watchkeeper's maximum of 7d)" : "").")
            }
        case "TimeoutStopSec":
            if let seconds = Self.timeSpan(setting.value), seconds <= 3_600 { entry["kill_grace"] = .string(Self.durationText(seconds)) } else { untranslated("kill_grace is at most 1h") }
        case "KillSignal":
            if TaskSettings.signalNames[setting.value.uppercased().hasPrefix("SIG") ? setting.value.uppercased() : "SIG" + setting.value.uppercased()] != nil {
                entry["stop_signal"] = .string(setting.value)
            } else {
                untranslated("stop_signal is one of \(TaskSettings.signalNames.keys.sorted().joined(separator: ", "))")
            }
        case "MemoryMax":
            if let last = setting.value.last, "KMGT".contains(last) || last.isNumber, setting.value != "infinity" {
                entry["memory_max"] = .string(last.isNumber ? setting.value : setting.value)
            } else {
                untranslated("memory_max takes a size (K, M, G, T), not a percentage or infinity")
            }
        case "CPUWeight", "IOWeight":
            if let weight = Int(setting.value), (1...10_000).contains(weight) { entry[setting.key == "CPUWeight" ? "cpu_weight" : "io_weight"] = .integer(weight) } else { untranslated("a weight 1-10000 is needed") }
        case "TasksMax":
            if let limit = Int(setting.value), (1...4_194_304).contains(limit) { entry["tasks_max"] = .integer(limit) } else { untranslated("tasks_max takes a number of tasks") }
        case "Nice", "IOSchedulingClass", "IOSchedulingPriority", "CPUSchedulingPolicy":
            let low = (setting.key == "Nice" && (Int(setting.value) ?? 0) >= 10) || (setting.key == "IOSchedulingClass" && setting.value == "idle")
            if low && entry["priority"] == nil {
                entry["priority"] = .string("low")
                entry.notes.append("\(setting.key)=\(setting.value) is priority = \"low\": the job runs at the daemon's nice value + 10, and waits behind other jobs for a max_jobs slot.")
            } else if !low {
                untranslated("only a low priority maps (priority = \"low\", nice + 10)")
            } else {
                entry.notes.append("\(setting.key)=\(setting.value) is covered by priority = \"low\" (nice + 10; no I/O class).")
            }
        default:
            return false
        }
        return true
    }

    private func applyOther(_ setting: UnitFile.Setting, into entry: inout ImportedEntry, untranslated: (String) -> Void) {
        switch setting.key {
        case "SyslogIdentifier":
            entry.notes.append("SyslogIdentifier=\(setting.value): the job's output is in the journal under the task's name.")
        case "StandardOutput", "StandardError":
            untranslated("a job's output goes to the journal (output = \"daemon\" or \"direct\")")
        default:
            let sandboxing = setting.key.hasPrefix("Protect") || setting.key.hasPrefix("Private") || setting.key.hasPrefix("Restrict")
            if sandboxing, Self.boolean(setting.value) == false {
                untranslated("nothing to carry over: watchkeeper does not sandbox jobs, and this turns a protection off")
                return
            }
            untranslated(setting.key.hasPrefix("Protect") || setting.key.hasPrefix("Private") || setting.key.hasPrefix("Restrict") || ["LockPersonality", "NoNewPrivileges", "CapabilityBoundingSet", "SystemCallFilter", "ReadWritePaths", "ReadOnlyPaths", "MemoryDenyWriteExecute", "ProtectSystem", "ProtectHome"].contains(setting.key)
                ? "watchkeeper does not sandbox jobs: this protection is lost"
                : "no watchkeeper equivalent for [Service] \(setting.key)=")
        }
    }

    /// Each Exec line's prefixes said; one plain command as arguments, several through
    /// /bin/sh in order.
    private static func applyCommands(_ commands: [(line: UnitFile.Setting, command: ExecCommand)], user: String?, into entry: inout ImportedEntry) {
        for (setting, command) in commands {
            if command.elevated {
                entry.notes.append("\(setting.key)=\(setting.value): the +/!/!! prefix ran this command with full privileges; here it runs as \(user ?? "the daemon's user") like the others.")
            }
            if command.argumentZero != nil {
                entry.notes.append("\(setting.key)=\(setting.value): the @ prefix set argv[0]; here argv[0] is the program path.")
            }
            if command.noExpansion {
                entry.notes.append("\(setting.key)=: the : prefix kept $ literal; so does the translation.")
            }
        }
        // One command without a failure-ignoring prefix or variables runs as it is;
        // several run in order through /bin/sh, each only if the previous succeeded.
        if commands.count == 1, !commands[0].command.ignoreFailure, !commands[0].command.usesVariables {
            entry["command"] = .strings(commands[0].command.arguments.map(ShellQuoting.literalArgument))
        } else {
            let script = commands.map { $0.command.ignoreFailure ? "(\($0.command.shellText) || true)" : $0.command.shellText }.joined(separator: " && ")
            entry["shell"] = .bool(true)
            entry["command"] = .string(script)
            if commands.count > 1 {
                entry.notes.append("The service's \(commands.count) Exec lines run in order in one shell, each only if the previous succeeded (a - prefix ignores a failure), as systemd runs them.")
            }
        }
    }
}
