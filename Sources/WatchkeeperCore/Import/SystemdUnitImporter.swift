// systemd.timer(5), systemd.path(5) and systemd.service(5) units to tasks and watch rules:
// the trigger decides the schedule or the watched paths, the service the job.

#if canImport(Glibc)
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
            let events: [WatchEvent]
            var note: String
            switch setting.key {
            case "Unit":
                continue
            case "PathChanged":
                events = [.closedWrite, .movedIn, .created, .deleted, .movedOut, .attrib]
                note = "PathChanged=: a job when a file there is closed after writing, created, deleted, moved or has its attributes changed."
            case "PathModified":
                events = [.modified, .closedWrite, .movedIn, .created, .deleted, .movedOut, .attrib]
                note = "PathModified=: as PathChanged= and on every write too."
            case "DirectoryNotEmpty":
                events = [.created, .movedIn]
                note = "DirectoryNotEmpty=: one job per file that appears (and, with catch_up, per file already there at start), where systemd starts the service once while the directory is not empty."
            case "PathExists":
                events = [.created, .movedIn]
                note = "PathExists=: a job when the path appears (and at start if it is there); systemd also restarts the service while it keeps existing."
            case "PathExistsGlob":
                events = [.created, .movedIn]
                note = "PathExistsGlob=: a job for each file that appears matching the pattern (and at start for those already there)."
            case "MakeDirectory", "DirectoryMode":
                untranslated("watchkeeper does not create the watched directory; create it (e.g. with tmpfiles.d)")
                continue
            case "TriggerLimitIntervalSec", "TriggerLimitBurst":
                untranslated("watchkeeper has no trigger rate limit (max_concurrent limits jobs at once)")
                continue
            default:
                untranslated("no watchkeeper equivalent for [Path] \(setting.key)=")
                continue
            }
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
        func untranslated(_ setting: UnitFile.Setting, _ reason: String) {
            config.untranslated.append(UntranslatedLine(source: ImportSource(file: service.path, line: setting.line), text: setting.text, reason: reason))
        }
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
        let isOneshot = serviceType == "oneshot"
        for setting in service.settings where setting.section == "Service" {
            switch setting.key {
            case "ExecStartPre", "ExecStart", "ExecStartPost":
                continue
            case "Type":
                if !["oneshot", "simple", "exec"].contains(setting.value) {
                    untranslated(setting, "a job is a process watchkeeper waits for; Type=\(setting.value) has no equivalent, the main process's exit ends the run")
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
                if directory.hasPrefix("/") { entry["working_directory"] = .string(directory) } else { untranslated(setting, "only an absolute path maps to working_directory") }
            case "Environment":
                var pairs: [(key: String, value: String)] = []
                if case .table(let existing) = entry["environment"] { pairs = existing }
                for word in ExecCommand.words(setting.value) ?? [] {
                    guard let equals = word.firstIndex(of: "=") else { continue }
                    let key = String(word[..<equals])
                    if key.hasPrefix("WATCHKEEPER_") || key.isEmpty { untranslated(setting, "\"\(word)\": names starting with WATCHKEEPER_ are set by the daemon, and a name cannot be empty"); continue }
                    pairs.removeAll { $0.key == key }
                    pairs.append((key, String(word[word.index(after: equals)...])))
                }
                entry["environment"] = .table(pairs)
            case "EnvironmentFile":
                untranslated(setting, "systemd reads the file at every start; watchkeeper's environment is in the configuration: copy the variables into environment")
            case "TimeoutStartSec", "RuntimeMaxSec", "TimeoutSec":
                if setting.value == "infinity" { continue }
                // Only a oneshot service's start lasts its whole run; for the others the start
                // timeout is over once the process runs.
                if setting.key != "RuntimeMaxSec" && !isOneshot {
                    untranslated(setting, "for Type=\(serviceType) the start timeout ends when the process has started, not when it exits; only RuntimeMaxSec= would be a budget")
                    continue
                }
                guard let seconds = Self.timeSpan(setting.value) else { untranslated(setting, "unable to read the time span"); continue }
                if seconds > 0 {
                    entry["budget"] = .string(Self.durationText(min(max(seconds, 0.01), 7 * 86_400)))
                    entry.notes.append("\(setting.key)=\(setting.value) is the budget\(seconds > 7 * 86_400 ? " (capped at watchkeeper's maximum of 7d)" : "").")
                }
            case "TimeoutStopSec":
                if let seconds = Self.timeSpan(setting.value), seconds <= 3_600 { entry["kill_grace"] = .string(Self.durationText(seconds)) } else { untranslated(setting, "kill_grace is at most 1h") }
            case "KillSignal":
                if TaskSettings.signalNames[setting.value.uppercased().hasPrefix("SIG") ? setting.value.uppercased() : "SIG" + setting.value.uppercased()] != nil {
                    entry["stop_signal"] = .string(setting.value)
                } else {
                    untranslated(setting, "stop_signal is one of \(TaskSettings.signalNames.keys.sorted().joined(separator: ", "))")
                }
            case "MemoryMax":
                if let last = setting.value.last, "KMGT".contains(last) || last.isNumber, setting.value != "infinity" {
                    entry["memory_max"] = .string(last.isNumber ? setting.value : setting.value)
                } else {
                    untranslated(setting, "memory_max takes a size (K, M, G, T), not a percentage or infinity")
                }
            case "CPUWeight", "IOWeight":
                if let weight = Int(setting.value), (1...10_000).contains(weight) { entry[setting.key == "CPUWeight" ? "cpu_weight" : "io_weight"] = .integer(weight) } else { untranslated(setting, "a weight 1-10000 is needed") }
            case "TasksMax":
                if let limit = Int(setting.value), (1...4_194_304).contains(limit) { entry["tasks_max"] = .integer(limit) } else { untranslated(setting, "tasks_max takes a number of tasks") }
            case "Nice", "IOSchedulingClass", "IOSchedulingPriority", "CPUSchedulingPolicy":
                let low = (setting.key == "Nice" && (Int(setting.value) ?? 0) >= 10) || (setting.key == "IOSchedulingClass" && setting.value == "idle")
                if low && entry["priority"] == nil {
                    entry["priority"] = .string("low")
                    entry.notes.append("\(setting.key)=\(setting.value) is priority = \"low\": the job runs at the daemon's nice value + 10, and waits behind other jobs for a max_jobs slot.")
                } else if !low {
                    untranslated(setting, "only a low priority maps (priority = \"low\", nice + 10)")
                } else {
                    entry.notes.append("\(setting.key)=\(setting.value) is covered by priority = \"low\" (nice + 10; no I/O class).")
                }
            case "SyslogIdentifier":
                entry.notes.append("SyslogIdentifier=\(setting.value): the job's output is in the journal under the task's name.")
            case "StandardOutput", "StandardError":
                untranslated(setting, "a job's output goes to the journal (output = \"daemon\" or \"direct\")")
            default:
                let sandboxing = setting.key.hasPrefix("Protect") || setting.key.hasPrefix("Private") || setting.key.hasPrefix("Restrict")
                if sandboxing, Self.boolean(setting.value) == false {
                    untranslated(setting, "nothing to carry over: watchkeeper does not sandbox jobs, and this turns a protection off")
                    continue
                }
                untranslated(setting, setting.key.hasPrefix("Protect") || setting.key.hasPrefix("Private") || setting.key.hasPrefix("Restrict") || ["LockPersonality", "NoNewPrivileges", "CapabilityBoundingSet", "SystemCallFilter", "ReadWritePaths", "ReadOnlyPaths", "MemoryDenyWriteExecute", "ProtectSystem", "ProtectHome"].contains(setting.key)
                    ? "watchkeeper does not sandbox jobs: this protection is lost"
                    : "no watchkeeper equivalent for [Service] \(setting.key)=")
            }
        }
        if entry["budget"] == nil {
            entry["budget"] = .string("7d")
            entry.notes.append("No start timeout: budget = \"7d\", watchkeeper's maximum (a oneshot service's default TimeoutStartSec is infinity).")
        }
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
        return .success(())
    }

    // MARK: - Values

    static func boolean(_ text: String) -> Bool? {
        switch text.lowercased() {
        case "1", "yes", "y", "true", "t", "on": return true
        case "0", "no", "n", "false", "f", "off": return false
        default: return nil
        }
    }

    /// systemd.time(7) time spans: "5min 20s", "1h30m", "90" (seconds); nil if unreadable.
    static func timeSpan(_ text: String) -> Double? {
        let units: [String: Double] = [
            "usec": 1e-6, "us": 1e-6, "µs": 1e-6, "msec": 0.001, "ms": 0.001,
            "seconds": 1, "second": 1, "sec": 1, "s": 1, "": 1,
            "minutes": 60, "minute": 60, "min": 60, "m": 60,
            "hours": 3_600, "hour": 3_600, "hr": 3_600, "h": 3_600,
            "days": 86_400, "day": 86_400, "d": 86_400,
            "weeks": 604_800, "week": 604_800, "w": 604_800,
            "months": 2_629_800, "month": 2_629_800, "M": 2_629_800,
            "years": 31_557_600, "year": 31_557_600, "y": 31_557_600,
        ]
        var total = 0.0
        var characters = Array(text)[...]
        var sawPart = false
        while true {
            while characters.first == " " { characters = characters.dropFirst() }
            guard !characters.isEmpty else { break }
            var number = ""
            while let character = characters.first, character.isNumber || character == "." { number.append(character); characters = characters.dropFirst() }
            while characters.first == " " { characters = characters.dropFirst() }
            var unit = ""
            while let character = characters.first, character.isLetter || character == "µ" { unit.append(character); characters = characters.dropFirst() }
            guard let value = Double(number), let factor = units[unit] else { return nil }
            total += value * factor
            sawPart = true
        }
        return sawPart ? total : nil
    }

    /// Seconds as a watchkeeper duration: "1d2h", "15m", "1500ms".
    static func durationText(_ seconds: Double) -> String {
        var milliseconds = Int64((seconds * 1_000).rounded())
        if milliseconds == 0 { return "0s" }
        var out = ""
        for (unit, size) in [("d", Int64(86_400_000)), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] where milliseconds >= size {
            out += "\(milliseconds / size)\(unit)"
            milliseconds %= size
        }
        return out
    }
}
