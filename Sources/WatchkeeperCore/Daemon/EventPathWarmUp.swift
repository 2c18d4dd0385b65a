/// The runtime's conformance lookups a file's first event makes on its way to its job, made
/// once at the start instead. The first insertion into an empty Dictionary or Set of a given
/// type instantiates its storage class by mangled name, and the runtime then looks up the
/// key's Hashable conformance by scanning every conformance record of the binary: about
/// 115,000 instructions per key type, most of the 1.5 million the reader thread ran for the
/// first file after a start against 115,000 for each later one (callgrind;
/// docs/measurements/latency-path.md, "The first event after a start"). The runtime caches
/// each answer for the process's life, and a dynamic cast asks the same question, so one
/// cast per key type fills the cache. A type missing here costs the first event's latency,
/// nothing else.
enum EventPathWarmUp {
    /// The key types of the dictionaries and sets the event path fills first: RuleMemory,
    /// TrackedChanges, DirectoryWatcher, JobLine, JobSpawnPlans, ActiveRuns, JobEnvironment
    /// and DescriptorPoller.
    private static let keyTypes: [Any.Type] = [InodeKey.self, [UInt8].self, WatchBackendKind.self, JobKey.self, RunID.self,
                                               String.self, UInt64.self]

    /// How many of the key types are Hashable (all of them); unoptimized, so the casts are
    /// asked of the runtime rather than answered by the compiler.
    @_optimize(none)
    static func run() -> Int {
        var hashable = 0
        for type in keyTypes where type is any Hashable.Type { hashable += 1 }
        return hashable
    }
}
