import Dispatch
import CWatchkeeperSystem
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// How the daemon holds a job's processes together so that ending the job ends all of
/// them: a cgroup per job where systemd delegated one to the daemon (`Delegate=yes`), a
/// process group otherwise, which a double fork with setsid escapes. Chosen once at start.
public enum JobContainment: Sendable {
    case cgroups(JobCgroups)
    case processGroups(reason: String)

    /// The controllers that limits can use: only with cgroups, and only those enabled.
    var controllers: Set<String> {
        if case .cgroups(let tree) = self { return tree.controllers }
        return []
    }

    /// For the start-up line and the dump.
    public var description: String {
        switch self {
        case .cgroups(let tree):
            let enabled = tree.controllers.sorted().joined(separator: " ")
            return "a cgroup per job under \(tree.path) (controllers: \(enabled.isEmpty ? "none" : enabled))"
        case .processGroups(let reason):
            return "process groups (\(reason)): a job that calls setsid in a child escapes expiry, and limits are not enforced"
        }
    }

    /// The limits among `limits` that this containment cannot enforce, and why, e.g.
    /// "memory_max (the memory controller is not available in /sys/fs/cgroup/x)".
    public func unenforceable(_ limits: JobLimits) -> [String] {
        var keys: [String] = []
        for file in limits.cgroupFiles where !keys.contains(file.key) {
            switch self {
            case .processGroups:
                keys.append(file.key)
            case .cgroups(let tree) where !tree.controllers.contains(file.controller):
                keys.append(file.key)
            case .cgroups:
                continue
            }
        }
        return keys.map { key in
            switch self {
            case .processGroups: return "\(key) (no delegated cgroup)"
            case .cgroups(let tree):
                let controller = limits.cgroupFiles.first { $0.key == key }?.controller ?? "?"
                return "\(key) (the \(controller) controller is not available in \(tree.path); cgroup.controllers: \(tree.available.sorted().joined(separator: " ")))"
            }
        }
    }

    /// Reads where the daemon runs and, if that cgroup is delegated to it, moves the
    /// daemon into its `daemon` leaf, enables the controllers limits need for the jobs'
    /// cgroups beside it, and removes job cgroups an earlier instance left.
    public static func setUp() -> JobContainment {
        guard let own = try? readSmallFile("/proc/self/cgroup"), let cgroupPath = CgroupLocation.unifiedPath(procSelfCgroup: own) else {
            return .processGroups(reason: "no cgroup v2 hierarchy")
        }
        guard let mountinfo = try? readSmallFile("/proc/self/mountinfo"),
              let mount = CgroupLocation.unifiedMount(mountinfo: mountinfo),
              let path = CgroupLocation.directory(path: cgroupPath, mount: mount) else {
            return .processGroups(reason: "the cgroup v2 hierarchy is not mounted where this process can see its cgroup \(cgroupPath)")
        }
        guard isDelegated(path) else {
            return .processGroups(reason: "the cgroup \(path) is not delegated to the daemon; under systemd, Delegate=yes in the unit delegates it")
        }
        do {
            return .cgroups(try JobCgroups(path: path))
        } catch {
            return .processGroups(reason: error.description)
        }
    }

    /// systemd marks a delegated cgroup with the trusted.delegate (and, since v252,
    /// user.delegate) extended attribute "1".
    static func isDelegated(_ path: String) -> Bool {
        for name in ["trusted.delegate", "user.delegate"] {
            var value = [UInt8](repeating: 0, count: 8)
            let count = value.withUnsafeMutableBytes { getxattr(path, name, $0.baseAddress, $0.count) }
            if count >= 1, value[0] == UInt8(ascii: "1") { return true }
        }
        return false
    }
}

/// Why the delegated cgroup could not be set up, with the path and the cause.
public struct CgroupSetupError: Error, CustomStringConvertible, Sendable {
    public let description: String
}
