/// The part of a job's environment that every job of one rule or task shares: PATH and the
/// locale from the daemon, the account's HOME, USER, LOGNAME and SHELL, the settings'
/// `environment`, WATCHKEEPER_WATCH or WATCHKEEPER_TASK and WATCHKEEPER_BUDGET_SECONDS.
/// The engine builds it once per group and configuration, not once per job: building it
/// each time (a dictionary, a sort, a string per variable) was about 6 % of the daemon's CPU
/// per job in a burst (docs/measurements/performance.md).
public struct JobEnvironment: Sendable {
    static let defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    /// "KEY=value" entries, sorted by key, each with its key to be replaced by a job's own.
    private let entries: [(key: String, entry: [UInt8])]

    init(key: JobKey, settings: JobSettings, daemonEnvironment: [String: String], account: Account?) {
        var variables: [String: [UInt8]] = ["PATH": Array((daemonEnvironment["PATH"] ?? Self.defaultPath).utf8)]
        for name in ["LANG", "LC_ALL", "TZ"] {
            if let value = daemonEnvironment[name] { variables[name] = Array(value.utf8) }
        }
        if let account {
            variables["HOME"] = Array(account.home.utf8)
            variables["USER"] = Array(account.name.utf8)
            variables["LOGNAME"] = Array(account.name.utf8)
            variables["SHELL"] = Array(account.shell.utf8)
        }
        for (name, value) in settings.environment { variables[name] = Array(value.utf8) }
        variables[key.kind.fieldName] = Array(key.name.utf8)
        variables["WATCHKEEPER_BUDGET_SECONDS"] = Array(settings.budget.secondsText.utf8)
        entries = variables.sorted { $0.key < $1.key }.map { ($0.key, Array($0.key.utf8) + [UInt8(ascii: "=")] + $0.value) }
    }

    /// The whole block for one job: these entries, with the job's own variables (run ID,
    /// attempt, deadline, ...) added after them and replacing any of the same name; a later
    /// one of the job's own replaces an earlier one.
    func block(adding own: [(String, [UInt8])]) -> [[UInt8]] {
        var latest: [String: Int] = [:]
        latest.reserveCapacity(own.count)
        for (index, (name, _)) in own.enumerated() { latest[name] = index }
        var block: [[UInt8]] = []
        block.reserveCapacity(entries.count + latest.count)
        for (key, entry) in entries where latest[key] == nil { block.append(entry) }
        for (index, (name, value)) in own.enumerated() where latest[name] == index {
            block.append(Array(name.utf8) + [UInt8(ascii: "=")] + value)
        }
        return block
    }
}

/// Each group's shared environment block, built at the group's first start after it was
/// configured and forgotten when it is configured again or removed. Confined to the jobs
/// queue.
struct JobEnvironments {
    private var built: [JobKey: JobEnvironment] = [:]

    mutating func forget(_ key: JobKey) { built[key] = nil }

    /// Nil for jobs run as another user (`user`, `group`): they build theirs from that
    /// account each time.
    mutating func shared(_ key: JobKey, _ settings: JobSettings, context: JobContext) -> JobEnvironment? {
        guard settings.user == nil && settings.group == nil else { return nil }
        if let environment = built[key] { return environment }
        let environment = JobEnvironment(key: key, settings: settings, daemonEnvironment: context.daemonEnvironment, account: context.daemonAccount)
        built[key] = environment
        return environment
    }
}
