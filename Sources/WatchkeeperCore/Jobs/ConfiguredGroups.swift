/// The groups the engine runs, by key, each with its spawn plan (its parsed command and
/// shared environment block), made at its first start after the group was configured:
/// a changed or removed group's plan goes with it. A plain value of the engine's.
struct ConfiguredGroups {
    private var groups: [JobKey: JobGroup] = [:]
    private var plans = JobSpawnPlans()

    subscript(key: JobKey) -> JobGroup? { groups[key] }
    var keys: Dictionary<JobKey, JobGroup>.Keys { groups.keys }
    /// fleet = "one": the groups whose jobs the fence stops.
    var fleetKeys: Set<JobKey> { Set(groups.values.filter(\.fleet).map(\.key)) }

    mutating func set(_ group: JobGroup) {
        groups[group.key] = group
        plans.forget(group.key)
    }

    mutating func remove(_ key: JobKey) {
        groups[key] = nil
        plans.forget(key)
    }

    mutating func plan(for group: JobGroup, context: JobContext) -> JobSpawnPlan {
        plans.plan(group.key, group.settings, context: context)
    }
}
