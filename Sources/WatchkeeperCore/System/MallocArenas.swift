import CWatchkeeperSystem
#if canImport(Glibc)
import Glibc
#endif

/// glibc gives each thread that contends for malloc an arena of its own (up to 8 per core),
/// and libdispatch's pool grows and shrinks with load, so a daemon running for days gathers
/// arenas whose freed memory stays resident. Measured with Tests/reliability/soak.py, 50
/// tasks every second and a reload every 10 s, 8 minutes: RSS rose 2.5 MiB with the default
/// and 0.9 MiB with MALLOC_ARENA_MAX=1. Two keep the jobs and watching queues from
/// serialising on one arena lock.
public enum MallocArenas {
    public static let limit: Int32 = 2

    /// Before any thread exists; MALLOC_ARENA_MAX in the environment still wins.
    public static func restrict() {
        guard getenv("MALLOC_ARENA_MAX") == nil else { return }
        _ = mallopt(M_ARENA_MAX, limit)
    }
}
