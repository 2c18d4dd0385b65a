#if os(Linux) && canImport(XCTest)
import Foundation
import XCTest
import CWatchkeeperSystem

/// A scratch cgroup v2 directory marked as systemd marks one it delegates (the
/// trusted.delegate attribute), for starting the daemon in as if under `Delegate=yes`.
/// Needs root and a writable cgroup2 mount (/sys/fs/cgroup, or /sys/fs/cgroup/unified on
/// a hybrid host); the test is skipped with the reason otherwise.
public final class DelegatedCgroup {
    public let path: String

    public init() throws {
        guard geteuid() == 0 else { throw XCTSkip("cgroup delegation needs root") }
        guard let mountinfo = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8),
              let mount = mountinfo.split(separator: "\n").map({ $0.split(separator: " ") })
                  .first(where: { fields in fields.firstIndex(of: "-").map { fields.count > $0 + 1 && fields[$0 + 1] == "cgroup2" } ?? false }) else {
            throw XCTSkip("no cgroup2 hierarchy mounted")
        }
        let root = String(mount[4])
        path = "\(root)/wk-it-\(getpid())-\(UInt32.random(in: 0 ... .max))"
        guard mkdir(path, 0o755) == 0 else { throw XCTSkip("unable to create a cgroup under \(root): \(String(cString: strerror(errno)))") }
        let value: [UInt8] = [UInt8(ascii: "1")]
        guard setxattr(path, "trusted.delegate", value, 1, 0) == 0 else {
            let reason = String(cString: strerror(errno))
            rmdir(path)
            throw XCTSkip("unable to mark \(path) delegated: \(reason)")
        }
    }

    /// The child cgroups' names (the daemon's leaf and the jobs').
    public var children: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).filter {
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: path + "/" + $0, isDirectory: &isDirectory) && isDirectory.boolValue
        }.sorted()
    }

    /// Kills whatever is left (the daemon is stopped by then) and removes the tree.
    deinit {
        for child in children {
            try? "1".write(toFile: "\(path)/\(child)/cgroup.kill", atomically: false, encoding: .utf8)
        }
        for _ in 0..<100 {
            for child in children { rmdir("\(path)/\(child)") }
            if rmdir(path) == 0 { return }
            usleep(20_000)
        }
    }
}
#endif
