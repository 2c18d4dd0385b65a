// Where the daemon's own cgroup v2 directory is, from /proc/self/cgroup and
// /proc/self/mountinfo. Pure text functions, so hybrid hosts (v1 controllers beside a
// unified hierarchy at /sys/fs/cgroup/unified), cgroup namespaces and escaped mount
// points are tested without such a host.

enum CgroupLocation {
    /// The unified hierarchy's path of this process ("0::/system.slice/x.service"), or
    /// nil on a v1-only host.
    static func unifiedPath(procSelfCgroup text: String) -> String? {
        for line in text.split(separator: "\n") where line.hasPrefix("0::") {
            let path = String(line.dropFirst(3))
            return path.hasPrefix("/") ? path : nil
        }
        return nil
    }

    /// The first cgroup2 mount's point and root ("/" unless bind-mounted from inside).
    static func unifiedMount(mountinfo text: String) -> (point: String, root: String)? {
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard let dash = fields.firstIndex(of: "-"), dash + 1 < fields.count, fields.count > 4,
                  fields[dash + 1] == "cgroup2" else { continue }
            return (unescape(fields[4]), unescape(fields[3]))
        }
        return nil
    }

    /// The directory of `path` (from /proc/self/cgroup) under a mount of the hierarchy.
    static func directory(path: String, mount: (point: String, root: String)) -> String? {
        var relative = path
        if mount.root != "/" {
            guard path == mount.root || path.hasPrefix(mount.root + "/") else { return nil }
            relative = String(path.dropFirst(mount.root.count))
        }
        if relative == "/" { relative = "" }
        return mount.point == "/" ? (relative.isEmpty ? "/" : relative) : mount.point + relative
    }

    /// mountinfo escapes space, tab, newline and backslash as \040, \011, \012, \134.
    static func unescape(_ field: Substring) -> String {
        var bytes: [UInt8] = []
        let utf8 = Array(field.utf8)
        var index = 0
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "\\"), index + 3 < utf8.count,
               let value = UInt8(String(decoding: utf8[index + 1 ... index + 3], as: UTF8.self), radix: 8) {
                bytes.append(value)
                index += 4
            } else {
                bytes.append(utf8[index])
                index += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
