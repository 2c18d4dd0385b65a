// What `watchkeeper import` proves about its output: that the configuration loads as
// check-config loads it, and (--check) that each imported task fires when its source would,
// computed by the source's own rules beside the daemon's schedule code.

#if canImport(Glibc)
import WatchkeeperCore
import Glibc
#endif

/// The next fires of one imported task by both rules, side by side.
public struct FireComparison: Sendable {
    public var task: String
    public var source: ImportSource
    /// The zone the times are shown in.
    public var zone: TimeZoneRules
    public var sourceFires: [Int64]
    public var importedFires: [Int64]
    /// Why a side could not be computed (then there is no table, and it is not an error
    /// unless `failed`).
    public var unavailable: String?
    public var failed: Bool = false

    public var differs: Bool {
        failed || rows.contains { $0.source != $0.imported }
    }

    /// The two lists merged in time order: an instant both have is one row, an instant only
    /// one has (or has more often) a row with the other side empty. Rows stop at the earlier
    /// of the two last fires, beyond which a missing fire only means the list was cut.
    public var rows: [(source: Int64?, imported: Int64?)] {
        guard unavailable == nil || (!sourceFires.isEmpty && !importedFires.isEmpty) else { return [] }
        let cutoff = min(sourceFires.last ?? .max, importedFires.last ?? .max)
        var rows: [(source: Int64?, imported: Int64?)] = []
        var left = sourceFires[...]
        var right = importedFires[...]
        while left.first != nil || right.first != nil {
            let a = left.first, b = right.first
            if let a, let b, a == b {
                rows.append((a, b)); left = left.dropFirst(); right = right.dropFirst()
            } else if let a, b == nil || a < b! {
                if a > cutoff { break }
                rows.append((a, nil)); left = left.dropFirst()
            } else if let b {
                if b > cutoff { break }
                rows.append((nil, b)); right = right.dropFirst()
            }
        }
        return rows
    }
}

public enum ImportCheck {
    /// The errors check-config would print for this text, or nil if it loads.
    public static func validate(_ toml: String, path: String, environment: [String: String]) -> ConfigErrors? {
        switch ConfigLoader.parse(source: toml, path: path, environment: environment) {
        case .success: return nil
        case .failure(let errors): return errors
        }
    }

    /// Each task with a schedule of its source, compared over the next `count` fires after
    /// `base` (UTC seconds). `calendarOracle` computes a systemd timer's fires (nil: none
    /// available on this machine, said in the result). `machineZone`: where cron reads its
    /// clock (tests give one; nil: this machine's).
    public static func compare(_ imported: ImportedConfig, loaded: Configuration, after base: Int64, count: Int = 20,
                               machineZone: TimeZoneRules? = nil,
                               calendarOracle: (([String], Int64, Int) -> Result<[Int64], CalendarOracleError>)?) -> [FireComparison] {
        let machine = machineZone ?? (try? TimeZoneRules.local()) ?? .utc
        var results: [FireComparison] = []
        for entry in imported.entries where entry.kind == .task {
            guard let task = loaded.tasks.first(where: { $0.name == entry.name }) else { continue }
            switch entry.origin {
            case .none:
                continue
            case .cron(let spec, let zoneName, let cron):
                results.append(compareCron(entry, task, spec: spec, zoneName: zoneName, cron: cron, machine: machine, after: base, count: count))
            case .systemdCalendar(let expressions):
                results.append(compareTimer(entry, task, expressions: expressions, machine: machine, after: base, count: count, oracle: calendarOracle))
            }
        }
        return results
    }

    /// Cron's side: its minute-by-minute loop in the machine's zone, an entry read in
    /// cronie's CRON_TZ where it has one; shown in the zone the entry is read in.
    private static func compareCron(_ entry: ImportedEntry, _ task: TaskSettings, spec: String, zoneName: String?, cron: CronFlavor,
                                    machine: TimeZoneRules, after base: Int64, count: Int) -> FireComparison {
        let entryZone = zoneName.flatMap { try? TimeZoneRules.load(identifier: $0) }
        let shown = entryZone ?? machine
        var result = FireComparison(task: entry.name, source: entry.source, zone: shown, sourceFires: [], importedFires: [])
        do {
            let schedule = try VixieCronSchedule(parsing: spec, stepAfterSingleValue: cron.acceptsStepAfterSingleValue)
            result.sourceFires = schedule.runs(after: base, count: count, in: machine, entryZone: cron.honoursCronTZ ? entryZone : nil)
        } catch {
            result.unavailable = "by cron's own rules: \(error.reason)"
            result.failed = true
        }
        result.importedFires = importedFires(task, after: base, count: count, zone: machine)
        return result
    }

    private static func compareTimer(_ entry: ImportedEntry, _ task: TaskSettings, expressions: [String], machine: TimeZoneRules, after base: Int64, count: Int,
                                     oracle: (([String], Int64, Int) -> Result<[Int64], CalendarOracleError>)?) -> FireComparison {
        var result = FireComparison(task: entry.name, source: entry.source, zone: machine, sourceFires: [], importedFires: [])
        guard let oracle else {
            result.unavailable = "systemd-analyze is not installed here: the timer's own fires cannot be computed"
            return result
        }
        switch oracle(expressions, base, count) {
        case .success(let fires): result.sourceFires = fires
        case .failure(let error):
            result.unavailable = error.description
            result.failed = true
        }
        result.importedFires = importedFires(task, after: base, count: count, zone: machine)
        if result.importedFires.isEmpty && result.unavailable == nil {
            result.unavailable = "the imported calendar schedule has no fire after that instant"
            result.failed = true
        }
        return result
    }

    /// The daemon's own schedule code: the fires its scheduler would arm, in order.
    static func importedFires(_ task: TaskSettings, after base: Int64, count: Int, zone fallback: TimeZoneRules) -> [Int64] {
        var fires: [Int64] = []
        // The scheduler's own next-fire function, cron or calendar alike.
        if task.schedule.isWallClock {
            let zone = task.schedule.timezone.flatMap { try? TimeZoneRules.load(identifier: $0) } ?? fallback
            var cursor = base
            while fires.count < count, let next = task.schedule.nextFire(after: cursor, in: zone) {
                fires.append(next)
                cursor = next
            }
        }
        return fires
    }

    /// The files cron ignored as a whole, one line each, and how many of them now run
    /// where they did not (each a difference: --check exits 1).
    public static func ignoredFiles(_ imported: ImportedConfig) -> (text: String, differences: Int) {
        var text = ""
        for ignored in imported.ignoredFiles {
            text += (ignored.translated ? "DIFFERENT: " : "same (not translated): ") + ignored.sentence + "\n"
        }
        return (text, imported.ignoredFiles.filter { $0.translated && $0.entries > 0 }.count)
    }

    /// One table per task: source fire | imported fire | same/DIFFERENT.
    public static func render(_ comparisons: [FireComparison], sourceLabel: String) -> String {
        var out = ""
        for comparison in comparisons {
            out += "\(comparison.task) (\(ImportedConfig.commentText(comparison.source.description)), zone \(comparison.zone.identifier)):\n"
            if let unavailable = comparison.unavailable {
                out += "  \(comparison.failed ? "error" : "not compared"): \(unavailable)\n"
                if comparison.sourceFires.isEmpty && comparison.importedFires.isEmpty { continue }
            }
            let width = 31
            out += "  " + pad(sourceLabel, width) + " | " + pad("imported", width) + " | \n"
            for (left, right) in comparison.rows {
                let verdict = left != nil && left == right ? "same" : "DIFFERENT"
                out += "  " + pad(left.map { format($0, in: comparison.zone) } ?? "-", width) + " | "
                    + pad(right.map { format($0, in: comparison.zone) } ?? "-", width) + " | " + verdict + "\n"
            }
        }
        return out
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }

    /// `2026-03-29 03:00:00 +02:00 CEST`
    static func format(_ utcSeconds: Int64, in zone: TimeZoneRules) -> String {
        let (offset, _, abbreviation) = zone.offset(at: utcSeconds)
        let local = zone.localTime(utcSeconds: utcSeconds)
        let sign = offset < 0 ? "-" : "+"
        let magnitude = abs(Int(offset))
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(local.year)-\(two(local.month))-\(two(local.day)) \(two(local.hour)):\(two(local.minute)):\(two(local.second)) "
            + "\(sign)\(two(magnitude / 3_600)):\(two(magnitude % 3_600 / 60)) \(abbreviation)"
    }
}

public struct CalendarOracleError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// systemd's own calendar arithmetic: `systemd-analyze calendar --iterations=N
/// --base-time=@T EXPR...`, its "(in UTC)" lines (or its times, when the zone is UTC)
/// read back as instants; several expressions are merged as a timer with several
/// OnCalendar= lines fires.
public enum SystemdAnalyzeCalendar {
    public static let path = "/usr/bin/systemd-analyze"

    public static var isInstalled: Bool { access(path, X_OK) == 0 }

    public static func fires(_ expressions: [String], after base: Int64, count: Int) -> Result<[Int64], CalendarOracleError> {
        // Without TZ, as systemd itself runs: the machine's /etc/localtime, which is also the
        // zone watchkeeper's scheduler uses (it never reads TZ).
        var command = "/usr/bin/env -u TZ \(path) calendar --iterations=\(count) --base-time=@\(base)"
        for expression in expressions { command += " " + ShellQuoting.quote(expression) }
        command += " 2>&1"
        let pipe: UnsafeMutablePointer<FILE>
        switch pointerOrErrno({ popen(command, "r") }) {
        case .success(let opened): pipe = opened
        case .failure(let error): return .failure(CalendarOracleError("unable to run systemd-analyze: \(error)"))
        }
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while true {
            let read = fread(&buffer, 1, buffer.count, pipe)
            if read <= 0 { break }
            output += buffer[0..<read]
        }
        let status = pclose(pipe)
        let text = String(decoding: output, as: UTF8.self)
        guard status == 0 else {
            return .failure(CalendarOracleError("systemd-analyze refused the expression: " + LineEscaping.escaped(text.split(separator: "\n").first.map(String.init) ?? "")))
        }
        return .success(parse(text, count: count))
    }

    /// The elapse lines, each replaced by the "(in UTC)" line after it when there is one.
    static func parse(_ text: String, count: Int) -> [Int64] {
        var fires: [Int64] = []
        var pending: Int64? = nil
        for rawLine in text.split(separator: "\n") {
            let line = rawLine.drop { $0 == " " }
            if line.hasPrefix("Next elapse:") || line.hasPrefix("Iter. #") {
                if let pending { fires.append(pending) }
                pending = instant(String(line))
            } else if line.hasPrefix("(in UTC):") {
                pending = instant(String(line))
            }
        }
        if let pending { fires.append(pending) }
        return Array(Set(fires)).sorted().prefix(count).map { $0 }
    }

    /// `...: Sun 2023-11-19 03:10:00 UTC` to seconds, when the zone shown is UTC.
    private static func instant(_ line: String) -> Int64? {
        let words = line.split(separator: " ")
        guard words.count >= 3, words.last == "UTC" else { return nil }
        let date = words[words.count - 3].split(separator: "-").compactMap { Int($0) }
        let time = words[words.count - 2].split(separator: ":").compactMap { Int($0) }
        guard date.count == 3, time.count == 3 else { return nil }
        return CivilCalendar.days(year: date[0], month: date[1], day: date[2]) * 86_400 + Int64(time[0] * 3_600 + time[1] * 60 + time[2])
    }
}
