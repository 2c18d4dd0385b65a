/// A job's resource limits, enforced by the cgroup it runs in: `memory_max`, `tasks_max`,
/// `cpu_weight` and `io_weight` map to memory.max, pids.max, cpu.weight and io.weight.
/// Where the daemon has no delegated cgroup (or the controller is not available there) they
/// cannot be enforced, and the daemon says so at start and in the dump.
public struct JobLimits: Equatable, Sendable {
    public var memoryMax: UInt64?
    public var tasksMax: Int?
    public var cpuWeight: Int?
    public var ioWeight: Int?

    public init() {}

    public var isEmpty: Bool { memoryMax == nil && tasksMax == nil && cpuWeight == nil && ioWeight == nil }

    /// One cgroup file per limit that is set, with the controller it needs.
    public var cgroupFiles: [(key: String, controller: String, file: String, value: String)] {
        var files: [(key: String, controller: String, file: String, value: String)] = []
        if let memoryMax {
            files.append(("memory_max", "memory", "memory.max", String(memoryMax)))
            // No swap beyond the limit: a job over memory_max is killed, not swapped out slowly.
            files.append(("memory_max", "memory", "memory.swap.max", "0"))
        }
        if let tasksMax { files.append(("tasks_max", "pids", "pids.max", String(tasksMax))) }
        if let cpuWeight { files.append(("cpu_weight", "cpu", "cpu.weight", String(cpuWeight))) }
        if let ioWeight { files.append(("io_weight", "io", "io.weight", "default \(ioWeight)")) }
        return files
    }

    /// The controllers the set limits need.
    public var controllers: Set<String> { Set(cgroupFiles.map(\.controller)) }

    /// "memory_max 64M, tasks_max 32", for messages.
    public var summary: String {
        var parts: [String] = []
        if let memoryMax { parts.append("memory_max \(Self.sizeText(memoryMax))") }
        if let tasksMax { parts.append("tasks_max \(tasksMax)") }
        if let cpuWeight { parts.append("cpu_weight \(cpuWeight)") }
        if let ioWeight { parts.append("io_weight \(ioWeight)") }
        return parts.joined(separator: ", ")
    }

    /// Bytes with K, M, G or T (powers of 1024, as systemd's MemoryMax=), or a bare number.
    public static func parseSize(_ text: String) -> UInt64? {
        let units: [Character: UInt64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]
        var digits = Substring(text)
        var multiplier: UInt64 = 1
        if let last = digits.last, let unit = units[Character(last.uppercased())] {
            multiplier = unit
            digits = digits.dropLast()
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber), let number = UInt64(digits) else { return nil }
        let (bytes, overflow) = number.multipliedReportingOverflow(by: multiplier)
        return overflow ? nil : bytes
    }

    static func sizeText(_ bytes: UInt64) -> String {
        for (unit, size) in [("T", UInt64(1) << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)] where bytes % size == 0 {
            return "\(bytes / size)\(unit)"
        }
        return "\(bytes) bytes"
    }

    /// Below this a job would start only to be killed at once.
    static let smallestMemoryMax: UInt64 = 1 << 20

    static func read(_ reader: inout TableReader) -> JobLimits {
        var limits = JobLimits()
        if let value = reader.any("memory_max") {
            let text = value.int.map(String.init) ?? value.string
            if let text, let bytes = parseSize(text), bytes >= smallestMemoryMax {
                limits.memoryMax = bytes
            } else if let text, let bytes = parseSize(text) {
                reader.context.error(at: reader.valuePosition("memory_max"),
                                     "\(reader.dotted("memory_max")) = \(bytes) bytes is too small: at least 1M, or a job starts only to be killed by the OOM killer")
            } else {
                let shown = text.map { " = \"\($0)\"" } ?? ", \(article(value.type)),"
                reader.context.error(at: reader.valuePosition("memory_max"),
                                     "\(reader.dotted("memory_max"))\(shown) must be a size in bytes, or with K, M, G or T (powers of 1024), like \"512M\"")
            }
        }
        // pids.max counts threads too; the kernel's own limit is 4194304.
        limits.tasksMax = reader.integer("tasks_max", range: 1 ... 4_194_304)
        // cgroup v2's ranges: 100 is the default weight of every cgroup.
        limits.cpuWeight = reader.integer("cpu_weight", range: 1 ... 10_000)
        limits.ioWeight = reader.integer("io_weight", range: 1 ... 10_000)
        return limits
    }
}
