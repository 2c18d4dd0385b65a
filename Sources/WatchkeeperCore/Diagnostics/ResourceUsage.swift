import CSQLite
import CWatchkeeperSystem
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// What the process costs, read from /proc and getrusage at dump time.
public struct ResourceUsage: Sendable, Equatable {
    public var residentBytes: Int64?
    public var peakResidentBytes: Int64?
    public var threads: Int?
    public var openFileDescriptors: Int?
    public var userCPUSeconds: Double
    public var systemCPUSeconds: Double
    /// Where resident memory goes: anonymous pages (the heap and stacks, not the binary's
    /// pages), what malloc has handed out and what it keeps free without returning, and
    /// SQLite's share (page caches and statements of both connections).
    public var anonymousBytes: Int64? = nil
    public var mallocInUseBytes: Int64 = 0
    public var mallocFreeBytes: Int64 = 0
    public var sqliteBytes: Int64 = 0

    public static func current() -> ResourceUsage {
        let status = (try? readSmallFile("/proc/self/status")) ?? ""
        func kilobytes(_ field: String) -> Int64? {
            guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }) else { return nil }
            return line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int64($0) }.map { $0 * 1024 }
        }
        let threadLine = status.split(separator: "\n").first { $0.hasPrefix("Threads:") }
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        // mallinfo2 walks every arena under its lock: cheap next to building a dump.
        let heap = mallinfo2()
        return ResourceUsage(
            residentBytes: kilobytes("VmRSS"),
            peakResidentBytes: kilobytes("VmHWM"),
            threads: threadLine.flatMap { Int($0.split(separator: "\t").last?.trimmingSpaces ?? "") },
            openFileDescriptors: countOpenFileDescriptors(),
            userCPUSeconds: Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6,
            systemCPUSeconds: Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6,
            anonymousBytes: kilobytes("RssAnon"),
            mallocInUseBytes: Int64(heap.uordblks) + Int64(heap.hblkhd),
            mallocFreeBytes: Int64(heap.fordblks),
            sqliteBytes: sqlite3_memory_used()
        )
    }

    static func countOpenFileDescriptors() -> Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let isDot = withUnsafeBytes(of: entry.pointee.d_name) { $0.first == UInt8(ascii: ".") }
            if !isDot { count += 1 }
        }
        return count - 1 // the descriptor opendir itself holds
    }

    var dumpValue: DumpValue {
        func optional(_ value: Int64?) -> DumpValue { value.map { .int($0) } ?? .null }
        return .object([
            .init("rss_bytes", optional(residentBytes)),
            .init("rss_peak_bytes", optional(peakResidentBytes)),
            .init("threads", optional(threads.map(Int64.init))),
            .init("open_fds", optional(openFileDescriptors.map(Int64.init))),
            .init("cpu_user_s", .double(userCPUSeconds)),
            .init("cpu_system_s", .double(systemCPUSeconds)),
            .init("rss_anonymous_bytes", optional(anonymousBytes)),
            .init("malloc_in_use_bytes", .int(mallocInUseBytes)),
            .init("malloc_free_kept_bytes", .int(mallocFreeBytes)),
            .init("sqlite_bytes", .int(sqliteBytes)),
        ])
    }
}
