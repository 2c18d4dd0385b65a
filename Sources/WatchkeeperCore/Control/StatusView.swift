/// How the CLI draws: colour only on a terminal that wants it (NO_COLOR, TERM=dumb),
/// block characters only in a UTF-8 locale.
public struct TerminalStyle: Sendable {
    public var colour: Bool
    public var unicode: Bool
    public var width: Int

    public init(colour: Bool, unicode: Bool, width: Int = 100) {
        self.colour = colour
        self.unicode = unicode
        self.width = width
    }

    /// For a stream: colour only if it is a terminal and NO_COLOR is unset (https://no-color.org).
    public static func detect(isTerminal: Bool, environment: [String: String], width: Int? = nil) -> TerminalStyle {
        let noColour = !(environment["NO_COLOR"] ?? "").isEmpty || environment["TERM"] == "dumb"
        let locale = environment["LC_ALL"].flatMap { $0.isEmpty ? nil : $0 } ?? environment["LC_CTYPE"].flatMap { $0.isEmpty ? nil : $0 } ?? environment["LANG"] ?? ""
        let utf8 = locale.uppercased().contains(utf8: "UTF-8") || locale.uppercased().contains(utf8: "UTF8")
        return TerminalStyle(colour: isTerminal && !noColour, unicode: utf8, width: width ?? 100)
    }

    enum Colour: String {
        case green = "32", yellow = "33", red = "31", bold = "1", dim = "2"
    }

    func paint(_ text: String, _ colour: Colour) -> String {
        guard self.colour else { return text }
        return "\u{1B}[\(colour.rawValue)m\(text)\u{1B}[0m"
    }

    /// `[██████░░░░]`: `fraction` filled; a `|` at `mark` (the budget's warning point).
    func bar(_ fraction: Double, width: Int = 24, mark: Double? = nil, colour: Colour? = nil) -> String {
        let clamped = min(max(fraction.isFinite ? fraction : 0, 0), 1)
        let filled = Int((clamped * Double(width)).rounded())
        let markAt = mark.map { Int((min(max($0, 0), 1) * Double(width)).rounded()) }
        var cells = ""
        for index in 0 ..< width {
            if index == markAt, index >= filled { cells += "|"; continue }
            cells += index < filled ? (unicode ? "█" : "#") : (unicode ? "░" : ".")
        }
        let body = colour.map { paint(cells, $0) } ?? cells
        return "[" + body + "]"
    }
}

/// `watchkeeper status`: the Status reply as an operator reads it, in the manner of
/// `systemctl status`. Every text from outside the daemon (names, paths, STATUS= text) is
/// escaped: a job must not be able to send escape sequences to the operator's terminal.
public enum StatusView {
    public static func render(_ status: DumpValue, style: TerminalStyle) -> String {
        var lines: [String] = []
        let daemon = status["daemon"]
        let state = daemon?["state"]?.stringValue ?? "unknown"
        let dotColour: TerminalStyle.Colour = state == "running" ? .green : state.hasPrefix("stopping") || state.hasPrefix("draining") ? .yellow : .red
        let dot = style.paint(style.unicode ? "●" : "*", dotColour)
        let uptime = status["uptime_s"]?.doubleValue.map { Duration.seconds($0).compactDescription } ?? "?"
        // Stopping: how long the drain has taken, then the uptime, so neither reads as the other.
        let since = daemon?["draining_s"]?.doubleValue.map { "\(Duration.seconds($0).compactDescription), up \(uptime)" } ?? uptime
        lines.append("\(dot) watchkeeper \(text(status["version"])) - \(style.paint(state, dotColour)) for \(since), pid \(text(status["pid"]))")
        if let config = daemon?["config"] {
            var line = "    Config: \(text(config["path"])), generation \(text(config["generation"])), loaded \(text(config["loaded_at"]))"
            if let reload = config["last_reload"], reload != .null {
                let ok = reload["result"]?.stringValue == "ok"
                line += "; last reload \(text(reload["at"])) " + (ok ? "ok" : style.paint("FAILED", .red))
            }
            lines.append(line)
            for error in config["last_reload"]?["errors"]?.arrayValue ?? [] {
                lines.append("            " + style.paint(text(error), .red))
            }
        }
        lines.append("    Status: \(text(status["status"]))")
        if let jobs = status["jobs"] {
            lines.append("      Jobs: \(text(jobs["running_total"])) running, \(text(jobs["waiting_total"])) waiting, \(text(jobs["retrying_total"])) waiting to retry; max_jobs \(text(jobs["max_jobs"])), \(text(jobs["started_since_start"])) started since start")
        }
        if let watchdog = status["watchdog"] {
            let withheld = watchdog["pings_withheld"]?.intValue ?? 0
            let stuck = watchdog["queues_stuck"]?.arrayValue ?? []
            var line = "  Watchdog: " + (watchdog["systemd_watchdog"] == .null ? "not requested by systemd" : "pings sent \(text(watchdog["pings_sent"]))")
            if withheld > 0 { line += ", " + style.paint("\(withheld) withheld", .red) }
            if !stuck.isEmpty { line += "; " + style.paint("stuck: \(stuck.map(text).joined(separator: ", "))", .red) }
            lines.append(line)
        }
        if let cluster = status["cluster"], cluster["stuck"] == nil {
            lines += Self.cluster(cluster, style: style)
        }
        lines += runningJobs(status["jobs"]?["running"]?.arrayValue ?? [], style: style)
        lines += tasks(status["tasks"]?["tasks"]?.arrayValue ?? [], style: style)
        lines += watches(status["watches"], style: style)
        let stuck = status["stuck_components"]?.arrayValue ?? []
        if !stuck.isEmpty {
            lines.append("")
            lines.append(style.paint("Not answering in time: \(stuck.map(text).joined(separator: ", ")) (see `watchkeeper dump`)", .red))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    private static func runningJobs(_ running: [DumpValue], style: TerminalStyle) -> [String] {
        guard !running.isEmpty else { return ["", "Running jobs: none"] }
        var lines = ["", "Running jobs:"]
        for job in running {
            let kind = job["task"] != nil ? "task" : "watch"
            var head = "  \(style.paint(text(job[kind]), .bold)) (\(kind))  run \(text(job["run_id"]))  pid \(text(job["pid"]))  \(text(job["phase"]))"
            if let about = job["about"] { head += "  " + path(about) }
            lines.append(head)
            let statusText = job["status"].flatMap { $0 == .null ? nil : text($0) }
            if let progress = job["progress"]?.doubleValue {
                lines.append("    progress \(style.bar(progress / 100, colour: .green)) \(pad(String(Int(progress)) + "%", 4))" + (statusText.map { "  " + $0 } ?? ""))
            } else if let statusText {
                lines.append("    status   \(statusText)")
            }
            if let elapsed = job["elapsed_s"]?.doubleValue, let budget = job["budget_s"]?.doubleValue, budget > 0 {
                let warn = job["warn_at_s"]?.doubleValue
                let fraction = elapsed / budget
                let colour: TerminalStyle.Colour = fraction >= 1 ? .red : (warn.map { elapsed >= $0 } ?? false) ? .yellow : .green
                var line = "    budget   \(style.bar(fraction, mark: warn.map { $0 / budget }, colour: colour)) \(Duration.seconds(elapsed).compactDescription) of \(Duration.seconds(budget).compactDescription)"
                if let warn { line += " (warns at \(Duration.seconds(warn).compactDescription))" }
                lines.append(line)
            }
        }
        return lines
    }

    /// "   Cluster: member a of /watchkeeper/prod via http://10.0.0.1:2379, lease 3f2a held
    /// (expires in 8.1s, renewed 1.9s ago)"; when fires are held, why, in red.
    private static func cluster(_ cluster: DumpValue, style: TerminalStyle) -> [String] {
        let state = cluster["lease_state"]?.stringValue ?? "none"
        var line = "   Cluster: member \(text(cluster["name"])) of \(text(cluster["prefix"])) via \(text(cluster["endpoint_in_use"])), "
        switch state {
        case "held":
            line += "lease \(text(cluster["lease_id"])) " + style.paint("held", .green)
            if let renewed = cluster["last_renewal_age_s"]?.doubleValue { line += " (renewed \(Duration.seconds(renewed).compactDescription) ago)" }
        case "fencing":
            line += style.paint("lease \(text(cluster["lease_id"])) not renewed: fleet jobs stopped", .red)
        default:
            line += style.paint("no lease: fleet fires held", .red)
        }
        var lines = [line]
        if let holder = cluster["name_held_by"], holder != .null {
            lines.append("            " + style.paint("the member name \(text(cluster["name"])) is held by another member, \(text(holder)): no fleet duty here until it goes", .red))
        } else if state != "held", let error = cluster["last_error"], error != .null {
            lines.append("            " + style.paint(text(error), .red))
        }
        return lines
    }

    private static func tasks(_ tasks: [DumpValue], style: TerminalStyle) -> [String] {
        guard !tasks.isEmpty else { return [] }
        let rows = tasks.map { task -> [String] in
            let last = task["last_runs"]?.arrayValue?.first
            var lastText = last.map { "\(text($0["outcome"])) \(text($0["started_at"]))" } ?? "-"
            // A fleet task: its last fire wherever it ran, and where.
            if let fire = task["fleet_state"]?["last_fire"], fire != .null {
                let outcome = fire["outcome"].flatMap { $0 == .null ? nil : text($0) } ?? text(fire["state"])
                lastText = "\(outcome) on \(text(fire["host"])) \(text(fire["instant"]))"
            }
            if let held = task["fleet_state"]?["held_fire"], held != .null { lastText += style.paint(" (fire \(text(held)) held)", .red) }
            return [text(task["name"]), text(task["schedule"]), text(task["next_run"]), lastText]
        }
        return ["", "Next runs:"] + TableView.render(header: ["TASK", "SCHEDULE", "NEXT RUN", "LAST RUN"], rows: rows, indent: 2)
    }

    private static func watches(_ section: DumpValue?, style: TerminalStyle) -> [String] {
        guard let rules = section?["rules"]?.arrayValue, !rules.isEmpty else { return [] }
        let rows = rules.map { rule -> [String] in
            let problems = Self.problems(of: rule)
            let problem = problems.isEmpty ? "-" : style.paint(problems.joined(separator: ", "), .yellow)
            return [text(rule["name"]), text(rule["root"]), text(rule["inotify_watches"]), text(rule["events_seen"]),
                    text(rule["jobs_submitted"]), text(rule["pending_settle"]), problem]
        }
        var lines = ["", "Watches:"] + TableView.render(header: ["WATCH", "ROOT", "DIRS", "EVENTS", "JOBS", "SETTLING", "PROBLEMS"], rows: rows, indent: 2)
        // Which trees are polled, and why: inotify does not see what other hosts write there.
        for rule in rules {
            for tree in rule["polled_trees"]?.arrayValue ?? [] {
                let every = tree["interval_s"]?.doubleValue.map { Duration.milliseconds(Int64($0 * 1_000)).compactDescription } ?? "?"
                let why = text(rule["method"]) == "poll" ? "method = poll" : "inotify does not see other hosts' writes"
                lines.append("  \(text(rule["name"])): polls \(text(tree["tree"])) (\(text(tree["file_system"])), \(why)) every \(every): \(text(tree["state"])), \(text(tree["passes"])) passes, last \(text(tree["last_pass_ms"])) ms")
            }
        }
        for problem in section?["problems"]?.arrayValue ?? [] {
            lines.append("  " + style.paint(text(problem), .yellow))
        }
        return lines
    }

    /// What is wrong with a watch rule (the dump's `watches.rules` entry), one phrase each:
    /// what `status` and `watches` both show.
    public static func problems(of rule: DumpValue) -> [String] {
        var problems: [String] = []
        if rule["root_missing"]?.boolValue == true { problems.append("root missing") }
        if let count = rule["unwatched_total"]?.intValue, count > 0 { problems.append("\(count) unwatched") }
        if let count = rule["overflows"]?.intValue, count > 0 { problems.append("\(count) overflow(s)") }
        for tree in rule["polled_trees"]?.arrayValue ?? [] where text(tree["state"]) != "polling" && text(tree["state"]) != "first pass" {
            problems.append("poll \(text(tree["tree"])) \(text(tree["state"]))")
        }
        return problems
    }

    /// A value as one escaped line.
    public static func text(_ value: DumpValue?) -> String {
        guard let value else { return "-" }
        if case .object(let fields) = value {
            return fields.map { "\(LineEscaping.escaped($0.key)): \($0.value.scalarText)" }.joined(separator: ", ")
        }
        return value.scalarText
    }

    /// A file's path (or a batch's summary) as one escaped line. The daemon sends it as
    /// `.bytes`, which JSON carries as a string when it is UTF-8 and otherwise as the array
    /// of byte values; the CLI reads that array back, and shows it as the path it is
    /// (`in/\xff.csv`), not as a list of numbers.
    public static func path(_ value: DumpValue?) -> String {
        if let values = value?.arrayValue, !values.isEmpty {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(values.count)
            for element in values {
                guard let number = element.intValue, let byte = UInt8(exactly: number) else { return text(value) }
                bytes.append(byte)
            }
            return LineEscaping.escaped(bytes)
        }
        return text(value)
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
    }
}

/// Columns aligned on the widest cell, like `systemctl list-units`.
public enum TableView {
    public static func render(header: [String], rows: [[String]], indent: Int = 0) -> [String] {
        var widths = header.map { visibleWidth($0) }
        for row in rows {
            for (index, cell) in row.enumerated() where index < widths.count {
                widths[index] = max(widths[index], visibleWidth(cell))
            }
        }
        let pad = String(repeating: " ", count: indent)
        return ([header] + rows).map { row in
            var line = pad
            for (index, cell) in row.enumerated() {
                line += cell
                if index < row.count - 1 { line += String(repeating: " ", count: widths[index] - visibleWidth(cell) + 2) }
            }
            return line
        }
    }

    /// Characters a terminal shows: colour escapes take no room.
    static func visibleWidth(_ text: String) -> Int {
        var width = 0
        var inEscape = false
        for scalar in text.unicodeScalars {
            if inEscape {
                if scalar == "m" { inEscape = false }
            } else if scalar == "\u{1B}" {
                inEscape = true
            } else {
                width += 1
            }
        }
        return width
    }
}
