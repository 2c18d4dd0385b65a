import Logging

/// What the parts of the watcher share, on the watching queue: the rules (the
/// coordinator's input: only DirectoryWatcher adds or removes one), whether new work is
/// accepted (false from the drain on), the clock, the log, and the mount table as the mount
/// watcher last read it. Each part keeps its own state; this is what they all read.
final class WatchingState {
    let queue: SubsystemQueue
    let logger: Logger
    let sources: SourceRegistry
    /// The daemon's environment: the WATCHKEEPER_TEST_* settings the tests lower limits with.
    let environment: [String: String]
    let clock: any WatchClock
    var rules: [String: WatchRule] = [:]
    /// The rules in the configuration's order.
    var order: [String] = []
    var accepting = true
    /// Follows /proc/self/mountinfo; nil until a rule needs it, or if it could not.
    var mounts: MountWatcher?

    init(queue: SubsystemQueue, logger: Logger, sources: SourceRegistry, environment: [String: String], clock: any WatchClock) {
        self.queue = queue
        self.logger = logger
        self.sources = sources
        self.environment = environment
        self.clock = clock
    }

    /// Still the rule of its name: not retired or replaced by a reload meanwhile.
    func isCurrent(_ rule: WatchRule) -> Bool { rules[rule.name] === rule }

    /// The rules in order.
    var ordered: [WatchRule] { order.compactMap { rules[$0] } }

    /// The mount table as the mount watcher last read it, or read now without one.
    func mountTable() -> [MountInfoEntry] {
        if let mounts { return mounts.mounts }
        return (try? readSmallFile("/proc/self/mountinfo")).map { MountInfoEntry.parse(Array($0.utf8)) } ?? []
    }
}
