/// What every job of one rule or task spawns with and that does not change between its
/// jobs: its command parsed (JobCommand) and its shared environment block (JobEnvironment),
/// made at the group's first start after it was configured, so that a job's spawn only
/// writes its own values (path, run ID, times) into the jobs queue's SpawnStrings
/// (docs/measurements/latency-path.md).
final class JobSpawnPlan: Sendable {
    let command: JobCommand
    /// Nil for jobs run as another user (`user`, `group`): they build theirs from that
    /// account each time.
    let environment: JobEnvironment?
    /// What the dump calls a job's budget and warn_at timers ("backup budget 1h"), the same
    /// for every job of the group.
    let timerTargets: (budget: String, warnAt: String)

    init(key: JobKey, settings: JobSettings, context: JobContext) {
        command = JobCommand(settings.command, name: key.name)
        environment = settings.user == nil && settings.group == nil
            ? JobEnvironment(key: key, settings: settings, daemonEnvironment: context.daemonEnvironment, account: context.daemonAccount)
            : nil
        timerTargets = Self.timerTargets(key.name, settings.budget)
    }

    static func timerTargets(_ name: String, _ budget: Duration) -> (budget: String, warnAt: String) {
        ("\(name) budget \(budget.compactDescription)", "\(name) warn_at")
    }
}

/// Each group's plan, forgotten when the group is configured again (a reload that changes
/// its command or environment spawns the new one) or removed. Confined to the jobs queue.
struct JobSpawnPlans {
    private var made: [JobKey: JobSpawnPlan] = [:]

    mutating func forget(_ key: JobKey) { made[key] = nil }

    mutating func plan(_ key: JobKey, _ settings: JobSettings, context: JobContext) -> JobSpawnPlan {
        if let plan = made[key] { return plan }
        let plan = JobSpawnPlan(key: key, settings: settings, context: context)
        made[key] = plan
        return plan
    }
}
