import TOMLKit

#if canImport(Glibc)
import Glibc
#endif

public enum TaskSchedule: Equatable, Sendable {
    /// Drift-free: fires at anchor + k·interval on the monotonic clock.
    case every(Duration)
    /// Wall-clock calendar times in a zone (nil: the machine's local zone).
    case cron(CronExpression, timezone: String?)
    /// systemd.time(7) calendar events, read in a zone (nil: local); the earliest of them
    /// fires. An event that names its own zone is read in that one.
    case calendar([CalendarEvent], timezone: String?)
    /// Only when triggered.
    case manual
}

public enum OverlapPolicy: String, Sendable, CaseIterable {
    case skip
    case queue
    case replace
    case allow
}

public struct RetryPolicy: Equatable, Sendable {
    /// Total attempts, the first run included.
    public var attempts: Int
    public var backoff: Duration
    public var maxBackoff: Duration

    /// Exponential backoff with ±20% jitter, capped at max_backoff.
    func delay(afterAttempt attempt: Int) -> Duration {
        var delay = backoff
        for _ in 1..<max(1, attempt) {
            delay = delay * 2
            if delay >= maxBackoff { break }
        }
        delay = min(delay, maxBackoff)
        return .nanoseconds(Int64(Double(delay.nanosecondsClamped) * Double.random(in: 0.8...1.2)))
    }
}

/// One `[[task]]` entry.
public struct TaskSettings: Equatable, Sendable {
    public var name: String
    public var schedule: TaskSchedule
    public var job: JobSettings
    public var jitter: Duration = .zero
    public var runOnStart = false
    public var overlap: OverlapPolicy = .skip
    public var maxConcurrent = 1
    public var retry: RetryPolicy?
    public var retryExpired = false
    public var after: [String] = []
    public var persistent = false
    public var catchUpWindow: Duration = .seconds(86_400)
    /// `one`: each fire runs on one host of the cluster, decided in etcd (docs/fleet.md).
    public var fleet: FleetScope = .each

    /// Placeholders a task's command may use.
    public static let placeholders = ["task", "run_id", "attempt", "scheduled"]

    package static let signalNames: [String: Int32] = [
        "SIGTERM": SIGTERM, "SIGINT": SIGINT, "SIGHUP": SIGHUP, "SIGQUIT": SIGQUIT,
        "SIGUSR1": SIGUSR1, "SIGUSR2": SIGUSR2, "SIGKILL": SIGKILL,
    ]

    /// `calendar = "..."` or a list of them (a timer's several OnCalendar= lines).
    static func readCalendar(_ reader: inout TableReader) -> [CalendarEvent]? {
        guard let value = reader.any("calendar") else { return nil }
        let context = reader.context
        var texts: [(String, SourcePosition?)] = []
        if let text = value.string {
            texts = [(text, reader.valuePosition("calendar"))]
        } else if let array = value.array, !array.isEmpty, array.allSatisfy({ $0.string != nil }) {
            texts = array.enumerated().map { index, element in
                (element.string ?? "", context.sourceMap.valuePosition(reader.path + [.key("calendar"), .index(index)]) ?? reader.valuePosition("calendar"))
            }
        } else {
            context.error(at: reader.valuePosition("calendar"), "\(reader.dotted("calendar")) must be a string or a non-empty array of strings, like \"Mon..Fri *-*-* 02:30\"")
            return []
        }
        var events: [CalendarEvent] = []
        for (text, start) in texts {
            do {
                events.append(try CalendarEvent(parsing: text))
            } catch {
                var position = start
                // Point into the string: the value's opening quote + column + 1.
                if let start { position = SourcePosition(line: start.line, column: start.column + error.column + 1) }
                context.error(at: position, "bad calendar event \"\(text)\" for \(reader.dotted("calendar")): \(error.message)")
            }
        }
        // A day's margin: the task's zone is not known here, and is at most a day off UTC. One
        // past date among others is a timer's leftover, not a mistake.
        if events.count == texts.count, !events.isEmpty,
           events.allSatisfy({ $0.nextFire(after: WallTime.now().secondsSinceEpoch - 86_400, in: .utc) == nil }) {
            context.error(at: reader.valuePosition("calendar"),
                          "calendar \(texts.map { "\"\($0.0)\"" }.joined(separator: ", ")) for \(reader.dotted("calendar")) never elapses again (systemd-analyze calendar says the same)")
        }
        return events
    }

    static func read(name: String, from reader: inout TableReader) -> TaskSettings? {
        let context = reader.context
        let job = readJob(&reader, placeholders: placeholders)

        var schedules: [TaskSchedule] = []
        if let interval = reader.duration("every", range: .milliseconds(100) ... .seconds(366 * 86_400)) {
            schedules.append(.every(interval))
        }
        let timezone = reader.string("timezone")
        if let text = reader.string("cron") {
            do {
                let expression = try CronExpression(parsing: text)
                if expression.neverFires {
                    context.error(at: reader.valuePosition("cron"), "cron \"\(text)\" for \(reader.dotted("cron")) never matches a real date")
                }
                schedules.append(.cron(expression, timezone: timezone))
            } catch {
                var position = reader.valuePosition("cron")
                // Point into the string at the offending field: the value's opening quote + column.
                if let start = position { position = SourcePosition(line: start.line, column: start.column + error.column) }
                context.error(at: position, "bad cron expression \"\(text)\" for \(reader.dotted("cron")): \(error.message)")
                schedules.append(.manual)
            }
        }
        if let events = readCalendar(&reader) {
            if timezone != nil, let zoned = events.first(where: { $0.timezone != nil && !$0.isTimestamp }) {
                context.error(at: reader.valuePosition("timezone"),
                              "\(reader.dotted("timezone")) and the zone in calendar \"\(zoned.normalized)\" disagree on where to read it: keep one of them")
            }
            schedules.append(.calendar(events, timezone: timezone))
        }
        if let zone = timezone {
            if reader.table["cron"] == nil && reader.table["calendar"] == nil {
                context.error(at: reader.valuePosition("timezone"), "\(reader.dotted("timezone")) only applies to a cron or calendar schedule")
            } else {
                do {
                    _ = try TimeZoneRules.load(identifier: zone)
                } catch {
                    context.error(at: reader.valuePosition("timezone"), "\(error)")
                }
            }
        }
        if reader.bool("manual") == true {
            schedules.append(.manual)
        }
        // A schedule key whose value was refused still counts as written: its own error
        // says what is wrong, and "no schedule" would be a second, false one.
        let written = ["every", "cron", "calendar"].filter { reader.table[$0] != nil }.count
            + (reader.table["manual"] != nil && reader.table["manual"]?.bool != false ? 1 : 0)
        if written != 1 {
            let message = written == 0
                ? "task \"\(name)\" has no schedule: set one of every = \"15m\", cron = \"0 3 * * *\", calendar = \"Mon..Fri 02:30\" or manual = true"
                : "task \"\(name)\" has more than one schedule: keep only one of every, cron, calendar and manual"
            context.error(at: reader.headerPosition, message)
        }

        var task = TaskSettings(name: name, schedule: schedules.first ?? .manual, job: job ?? JobSettings(command: .arguments(["/bin/true"])))
        if let jitter = reader.duration("jitter", range: .zero ... .seconds(86_400)) { task.jitter = jitter }
        if let value = reader.bool("run_on_start") { task.runOnStart = value }
        if let scope = reader.oneOf("fleet", allowed: FleetScope.allCases.map(\.rawValue)) { task.fleet = FleetScope(rawValue: scope) ?? .each }
        let policy = reader.oneOf("overlap", allowed: OverlapPolicy.allCases.map(\.rawValue))
        if let policy { task.overlap = OverlapPolicy(rawValue: policy) ?? .skip }
        // With overlap refused, which policy was meant is unknown: no second error here.
        let overlapKnown = policy != nil || reader.table["overlap"] == nil
        if let limit = reader.integer("max_concurrent", range: 1 ... 1_024) {
            task.maxConcurrent = limit
            if overlapKnown && task.overlap != .allow && limit > 1 {
                context.error(at: reader.valuePosition("max_concurrent"), "\(reader.dotted("max_concurrent")) above 1 needs overlap = \"allow\"")
            }
        } else if task.overlap == .allow {
            task.maxConcurrent = 1_024
        }
        task.retry = readRetry(&reader)
        if let value = reader.bool("retry_expired") { task.retryExpired = value }
        if let names = reader.stringArray("after", allowEmpty: true) { task.after = names }
        if let value = reader.bool("persistent") { task.persistent = value }
        if let window = reader.duration("catch_up_window", range: .seconds(1) ... .seconds(366 * 86_400)) { task.catchUpWindow = window }
        return job == nil ? nil : task
    }

    /// `retry = { attempts = 3, backoff = "10s", max_backoff = "5m" }`, for tasks and watches.
    static func readRetry(_ reader: inout TableReader) -> RetryPolicy? {
        guard let retry = reader.table("retry") else { return nil }
        var retryReader = TableReader(table: retry, path: reader.path + [.key("retry")], displayName: "\(reader.dotted("retry"))", context: reader.context)
        let attempts = retryReader.integer("attempts", range: 1 ... 100) ?? 3
        let backoff = retryReader.duration("backoff", range: .milliseconds(100) ... .seconds(86_400)) ?? .seconds(10)
        let givenMaximum = retryReader.duration("max_backoff", range: .milliseconds(100) ... .seconds(7 * 86_400))
        if let givenMaximum, givenMaximum < backoff {
            reader.context.error(at: retryReader.valuePosition("max_backoff"),
                                 "\(retryReader.dotted("max_backoff")) = \"\(givenMaximum.compactDescription)\" is shorter than backoff = \"\(backoff.compactDescription)\": the longest wait must be at least the first")
        }
        let maxBackoff = givenMaximum ?? .seconds(300)
        retryReader.reportUnknownKeys()
        return RetryPolicy(attempts: attempts, backoff: backoff, maxBackoff: max(backoff, maxBackoff))
    }

    /// The keys every job has, whatever starts it.
    ///
    /// Every key is read even when `command` is refused, so that each is checked and none
    /// is reported as unknown; the job is nil if anything that defines it was refused.
    static func readJob(_ reader: inout TableReader, placeholders: [String]) -> JobSettings? {
        let context = reader.context
        let shellValue = reader.bool("shell")
        // nil: shell was written but refused, so neither form of command can be judged.
        let shell: Bool? = reader.table["shell"] == nil ? false : shellValue
        let command = readCommand("command", shell: shell, from: &reader, placeholders: placeholders, required: true)
        var job = JobSettings(command: command ?? .arguments([]))
        if let budget = reader.duration("budget", range: .milliseconds(10) ... .seconds(7 * 86_400)) { job.budget = budget }
        if let text = reader.string("warn_at") {
            if text.hasSuffix("%"), let percent = Double(text.dropLast()), percent > 0, percent < 100 {
                job.warnAt = percent / 100
            } else {
                context.error(at: reader.valuePosition("warn_at"), "\(reader.dotted("warn_at")) = \"\(text)\" must be a percentage of the budget between 0% and 100%, like \"80%\"")
            }
        }
        job.onExpire = readCommand("on_expire", shell: shell, from: &reader, placeholders: placeholders + ["pid", "budget"], required: false)
        if let budget = reader.duration("on_expire_budget", range: .milliseconds(10) ... .seconds(3_600)) { job.onExpireBudget = budget }
        job.onFailure = readCommand("on_failure", shell: shell, from: &reader, placeholders: placeholders + ["budget", "outcome"], required: false)
        if let budget = reader.duration("on_failure_budget", range: .milliseconds(10) ... .seconds(3_600)) { job.onFailureBudget = budget }
        job.onSuccess = readCommand("on_success", shell: shell, from: &reader, placeholders: placeholders + ["budget", "outcome"], required: false)
        if let budget = reader.duration("on_success_budget", range: .milliseconds(10) ... .seconds(3_600)) { job.onSuccessBudget = budget }
        if let name = reader.string("stop_signal") {
            let normalised = name.uppercased().hasPrefix("SIG") ? name.uppercased() : "SIG" + name.uppercased()
            if let number = signalNames[normalised] {
                job.stopSignal = number
            } else {
                context.error(at: reader.valuePosition("stop_signal"), "\(reader.dotted("stop_signal")) = \"\(name)\" is not one of: \(signalNames.keys.sorted().joined(separator: ", "))")
            }
        }
        if let grace = reader.duration("kill_grace", range: .zero ... .seconds(3_600)) { job.killGrace = grace }
        job.user = reader.string("user")
        job.group = reader.string("group")
        if job.user != nil || job.group != nil {
            do {
                _ = try Credentials.lookup(user: job.user, group: job.group)
            } catch {
                context.error(at: reader.valuePosition(job.user != nil ? "user" : "group"), "\(error)")
            }
        }
        job.workingDirectory = reader.absolutePath("working_directory")
        if let environment = reader.table("environment") {
            for key in environment.keys {
                guard let value = environment[key]?.string else {
                    context.error(at: reader.context.sourceMap.valuePosition(reader.path + [.key("environment"), .key(key)]),
                                  "\(reader.dotted("environment")).\(key) must be a string")
                    continue
                }
                if key.isEmpty || key.contains("=") || key.hasPrefix("WATCHKEEPER_") {
                    context.error(at: reader.context.sourceMap.keyPosition(reader.path + [.key("environment"), .key(key)]),
                                  "invalid environment variable name \"\(key)\" (WATCHKEEPER_ names are set by the daemon)")
                    continue
                }
                job.environment[key] = value
            }
        }
        if let priority = reader.oneOf("priority", allowed: JobPriority.allCases.map(\.rawValue)) {
            job.priority = JobPriority(rawValue: priority) ?? .default
        }
        if let output = reader.oneOf("output", allowed: JobOutputRoute.allCases.map(\.rawValue)) {
            job.output = JobOutputRoute(rawValue: output) ?? .daemon
        }
        job.limits = JobLimits.read(&reader)
        return command == nil || shell == nil ? nil : job
    }

    /// `shell` nil: its value was refused, so the command is not judged against it.
    static func readCommand(_ key: String, shell: Bool?, from reader: inout TableReader, placeholders: [String], required: Bool) -> JobSettings.Command? {
        let context = reader.context
        guard let raw = reader.any(key) else {
            if required { context.error(at: reader.headerPosition, "missing required key \"\(key)\" in \(reader.displayName)") }
            return nil
        }
        let position = reader.valuePosition(key)
        guard let shell else { return nil }
        if shell {
            guard let script = raw.string else {
                context.error(at: position, "\(reader.dotted(key)) must be a string when shell = true")
                return nil
            }
            return .shell(script)
        }
        if raw.type == .string {
            context.error(at: position, "\(reader.dotted(key)) must be an array of arguments, like [\"/usr/bin/rsync\", \"-a\", \"{task}\"]; set shell = true to run a string through /bin/sh -c")
            return nil
        }
        guard let arguments = reader.stringArray(key) else { return nil }
        if arguments.first?.isEmpty == true {
            context.error(at: context.sourceMap.valuePosition(reader.path + [.key(key), .index(0)]) ?? position,
                          "\(reader.dotted(key)) must start with the program to run, not an empty string")
            return nil
        }
        for (index, argument) in arguments.enumerated() {
            if let problem = Placeholders.check(argument, known: placeholders) {
                let elementPosition = context.sourceMap.valuePosition(reader.path + [.key(key), .index(index)]) ?? position
                context.error(at: elementPosition, "\(reader.dotted(key)): \(problem.message)")
                return nil
            }
        }
        return .arguments(arguments)
    }

    /// `after` must name other tasks, and the graph must have no cycle. `declared` holds
    /// every named entry's table path, including entries refused for other reasons, so
    /// positions are right and a refused task is not also reported as missing.
    /// `fleet = "one"` needs a cluster, and the policies that only mean something on one
    /// host are refused rather than run differently on each.
    static func validateFleet(_ tasks: [TaskSettings], cluster: ClusterSettings?, declared: [String: [TOMLPathComponent]], context: ValidationContext) {
        let fleetNames = Set(tasks.filter { $0.fleet == .one }.map(\.name))
        for task in tasks {
            func position(_ key: String) -> SourcePosition? {
                declared[task.name].flatMap { context.sourceMap.valuePosition($0 + [.key(key)]) }
            }
            if task.fleet == .one {
                if cluster == nil {
                    context.error(at: position("fleet"), "task \"\(task.name)\": fleet = \"one\" needs a [cluster] section: the etcd cluster the hosts decide through")
                }
                if task.runOnStart {
                    context.error(at: position("run_on_start"), "task \"\(task.name)\": run_on_start would start one run per host of the fleet; a fleet task runs at instants every host computes alike (use `watchkeeper trigger --fleet`)")
                }
                if task.overlap == .queue || task.overlap == .replace {
                    context.error(at: position("overlap"), "task \"\(task.name)\": overlap = \"\(task.overlap.rawValue)\" is not available with fleet = \"one\" (skip or allow): a fire waiting or replacing on one host would not be seen by the others")
                }
                if !task.after.isEmpty {
                    context.error(at: position("after"), "task \"\(task.name)\": after is not available with fleet = \"one\": the tasks it waits for run on this host, the fire on any")
                }
            } else if let dependency = task.after.first(where: fleetNames.contains) {
                context.error(at: position("after"), "task \"\(task.name)\": after = \"\(dependency)\": a fleet task runs on any host, so this host cannot wait for it")
            }
        }
    }

    static func validateDependencies(_ tasks: [TaskSettings], declared: [String: [TOMLPathComponent]], context: ValidationContext) {
        let names = Set(tasks.map(\.name))
        func afterPosition(_ task: TaskSettings) -> SourcePosition? {
            declared[task.name].flatMap { context.sourceMap.valuePosition($0 + [.key("after")]) }
        }
        for task in tasks {
            for dependency in task.after where declared[dependency] == nil || dependency == task.name {
                let reason = dependency == task.name ? "a task cannot run after itself" : "no task is named \"\(dependency)\""
                context.error(at: afterPosition(task), "task \"\(task.name)\": after = \"\(dependency)\": \(reason)")
            }
        }
        // Depth-first search for a cycle; report it once, naming the loop. The path is an
        // explicit stack: recursing once per task overflowed the thread's stack on a chain
        // of a few thousand tasks, each after the next, and a reload with it killed the daemon.
        let edges = Dictionary(uniqueKeysWithValues: tasks.map { task in
            (task.name, task.after.filter { names.contains($0) && $0 != task.name })
        })
        enum Mark { case onPath, finished }
        var marks: [String: Mark] = [:]
        for root in tasks where marks[root.name] == nil {
            // The tasks from root to the current one, each with its next dependency to follow.
            var path: [(name: String, next: Int)] = [(root.name, 0)]
            marks[root.name] = .onPath
            while let (name, next) = path.last {
                let dependencies = edges[name] ?? []
                guard next < dependencies.count else {
                    marks[name] = .finished
                    path.removeLast()
                    continue
                }
                path[path.count - 1].next += 1
                let dependency = dependencies[next]
                switch marks[dependency] {
                case .finished?:
                    continue
                case .onPath?:
                    let loop = path[(path.firstIndex { $0.name == dependency } ?? 0)...].map(\.name) + [dependency]
                    if let task = tasks.first(where: { $0.name == dependency }) {
                        context.error(at: afterPosition(task), "tasks depend on each other in a cycle: \(describeCycle(loop))")
                    }
                    return
                case nil:
                    marks[dependency] = .onPath
                    path.append((dependency, 0))
                }
            }
        }
    }

    /// "a → b → a"; a loop through more than a dozen tasks is shortened to its first few
    /// and its last, with the count, so the message stays one readable line.
    static func describeCycle(_ loop: [String]) -> String {
        guard loop.count > 12 else { return loop.joined(separator: " → ") }
        return (loop.prefix(5) + ["…"] + loop.suffix(2)).joined(separator: " → ") + " (\(loop.count - 1) tasks)"
    }
}

extension TaskSchedule {
    /// Cron and calendar schedules: fires at wall-clock times of a zone.
    public var isWallClock: Bool {
        switch self {
        case .cron, .calendar: return true
        case .every, .manual: return false
        }
    }

    /// The `timezone` key of a wall-clock schedule; nil: the machine's zone.
    public var timezone: String? {
        switch self {
        case .cron(_, let zone), .calendar(_, let zone): return zone
        case .every, .manual: return nil
        }
    }

    /// The next wall-clock fire strictly after `utcSeconds`, read in `zone`; nil for `every`
    /// and `manual`, and for a schedule that never fires again.
    public func nextFire(after utcSeconds: Int64, in zone: TimeZoneRules) -> Int64? {
        switch self {
        case .cron(let expression, _):
            return expression.nextFire(after: utcSeconds, in: zone)
        case .calendar(let events, _):
            return events.compactMap { $0.nextFire(after: utcSeconds, in: zone) }.min()
        case .every, .manual:
            return nil
        }
    }

    /// `cron 0 3 * * *`, `calendar Mon..Fri *-*-* 02:30:00; *-*-01 00:00:00`.
    public var wallClockDescription: String {
        switch self {
        case .cron(let expression, _): return "cron \(expression.description)"
        case .calendar(let events, _): return "calendar " + events.map(\.normalized).joined(separator: "; ")
        case .every(let interval): return "every \(interval.compactDescription)"
        case .manual: return "manual"
        }
    }
}
