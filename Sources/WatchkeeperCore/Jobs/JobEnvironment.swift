/// The part of a job's environment that every job of one rule or task shares: PATH and the
/// locale from the daemon, the account's HOME, USER, LOGNAME and SHELL, the settings'
/// `environment`, WATCHKEEPER_WATCH or WATCHKEEPER_TASK and WATCHKEEPER_BUDGET_SECONDS.
/// The engine builds it once per group and configuration, not once per job: building it
/// each time (a dictionary, a sort, a string per variable) was about 6 % of the daemon's CPU
/// per job in a burst (docs/measurements/performance.md).
public struct JobEnvironment: Sendable {
    static let defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    /// The "KEY=value" entries, sorted by key, each ended by a NUL: copied as they are into
    /// a job's spawn strings (SpawnStrings), where a job's own variables may replace some.
    let block: [UInt8]
    /// Each entry's start in `block` and its key's length.
    let entries: [(start: Int, nameLength: Int, hasNUL: Bool)]

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
        var block: [UInt8] = []
        var entries: [(start: Int, nameLength: Int, hasNUL: Bool)] = []
        for (name, value) in variables.sorted(by: { $0.key < $1.key }) {
            let entry = Array(name.utf8) + [UInt8(ascii: "=")] + value
            entries.append((block.count, name.utf8.count, entry.contains(0)))
            block += entry + [0]
        }
        self.block = block
        self.entries = entries
    }

    /// The whole block for one job: these entries, with the job's own variables (run ID,
    /// attempt, deadline, ...) added after them and replacing any of the same name; a later
    /// one of the job's own replaces an earlier one.
    func block(adding own: [(String, [UInt8])]) -> [[UInt8]] {
        let strings = SpawnStrings()
        for (name, value) in own { strings.addOwn(name, value) }
        strings.finishEnvironment(shared: self)
        return strings.environment
    }
}
