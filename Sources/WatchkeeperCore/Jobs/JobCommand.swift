/// A job's command, parsed once: each argv element's literal bytes and the placeholders
/// between them, each placeholder's name already told apart. The engine keeps one per group
/// and configuration (JobSpawnPlan), so a job's spawn only writes its values into the
/// gaps (JobPlaceholders) instead of parsing every template again and gathering every value
/// into a dictionary first (docs/measurements/latency-path.md). The result is
/// `Placeholders.expand`'s, byte for byte.
struct JobCommand: Sendable {
    /// The values a template can name; `other` is looked up by its name only.
    enum Value: Sendable, Equatable {
        case kind(JobKind), runID, attempt, scheduled, pid, budget, path, directory, name, event, other
    }

    enum Piece: Sendable {
        case literal([UInt8])
        case placeholder(String, Value)
    }

    struct Argument: Sendable {
        let pieces: [Piece]
        /// The element is "{x}" and nothing else: a list placeholder of that name (`{paths}`)
        /// becomes one argument per value.
        let standalone: String?
    }

    let arguments: [Argument]

    /// `name`: the task's or rule's, a shell command's `$0`.
    init(_ command: JobSettings.Command, name: String) {
        switch command {
        case .arguments(let templates):
            arguments = templates.map(Self.argument)
        case .shell(let script):
            // Placeholders are not substituted into shell text.
            arguments = ["/bin/sh", "-c", script, name].map { Argument(pieces: [.literal(Array($0.utf8))], standalone: nil) }
        }
    }

    private static func argument(_ template: String) -> Argument {
        let standalone = template.hasPrefix("{") && template.hasSuffix("}") ? String(template.dropFirst().dropLast()) : nil
        // A template that does not parse (configuration checks them all) is taken literally.
        guard case .success(let parsed) = Placeholders.parse(template) else {
            return Argument(pieces: [.literal(Array(template.utf8))], standalone: standalone)
        }
        let pieces = parsed.map { piece -> Piece in
            switch piece {
            case .literal(let bytes): return .literal(bytes)
            case .placeholder(let name): return .placeholder(name, value(named: name))
            }
        }
        return Argument(pieces: pieces, standalone: standalone)
    }

    private static func value(named name: String) -> Value {
        switch name {
        case JobKind.task.rawValue: return .kind(.task)
        case JobKind.watch.rawValue: return .kind(.watch)
        case "run_id": return .runID
        case "attempt": return .attempt
        case "scheduled": return .scheduled
        case "pid": return .pid
        case "budget": return .budget
        case "path": return .path
        case "dir": return .directory
        case "name": return .name
        case "event": return .event
        default: return .other
        }
    }

    /// argv, with `values` in the gaps.
    func write(to strings: SpawnStrings, _ values: JobPlaceholders) {
        for argument in arguments {
            if let name = argument.standalone, values.writeList(name, to: strings) { continue }
            strings.startArgument()
            for piece in argument.pieces {
                switch piece {
                case .literal(let bytes): strings.append(bytes)
                case .placeholder(let name, let value): values.write(name, value, to: strings)
                }
            }
            strings.endArgument()
        }
    }
}

/// One spawn's placeholder values, written where a template names them: the run's
/// (`{task}`/`{watch}`, `{run_id}`, `{attempt}`, `{scheduled}`, `{budget}`, `{pid}` once the
/// job runs), its subject's (`{path}`, `{dir}`, `{name}`, `{event}`, the list `{paths}`), and a
/// hook's own, which replace any of the same name. A name with no value is empty. The
/// formatted ones ({scheduled}, an ISO 8601 time; {budget}) are made only when named.
struct JobPlaceholders {
    private let key: JobKey
    private let runID: String
    private let attempt: Int
    private let budget: Duration
    private let subject: JobSubject
    private let startedWall: WallTime?
    private let pid: Int32?
    private let more: [String: [UInt8]]

    /// `startedWall`: `{scheduled}` of a run that was not scheduled; `pid`: the job's, for its
    /// handlers and hooks; `more`: a hook's own values.
    init(request: JobRequest, startedWall: WallTime?, pid: Int32?, more: [String: [UInt8]]) {
        key = request.key
        runID = request.runID
        attempt = request.attempt
        budget = request.settings.budget
        subject = request.subject
        self.startedWall = startedWall
        self.pid = pid
        self.more = more
    }

    func write(_ name: String, _ value: JobCommand.Value, to strings: SpawnStrings) {
        if !more.isEmpty, let given = more[name] { return strings.append(given) }
        switch value {
        case .kind(let kind):
            if kind == key.kind { strings.append(key.name.utf8) }
        case .runID:
            strings.append(runID.utf8)
        case .attempt:
            strings.appendDecimal(attempt)
        case .scheduled:
            strings.appendISO8601(subject.scheduledAt ?? startedWall ?? .now())
        case .pid:
            if let pid { strings.appendDecimal(Int(pid)) }
        case .budget:
            strings.append(budget.compactDescription.utf8)
        case .path, .directory, .name, .event:
            subject.writePlaceholder(value, to: strings)
        case .other:
            break
        }
    }

    /// One argument per value of the list placeholder `name`; false if there is no such list.
    func writeList(_ name: String, to strings: SpawnStrings) -> Bool {
        subject.writeList(name, to: strings)
    }
}
