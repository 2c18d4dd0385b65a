import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// One cgroup v2 directory, held open: its interface files are read and written relative
/// to the fd, so a path renamed or replaced meanwhile cannot redirect a write.
// @unchecked Sendable: immutable after open (the fd); used on the jobs queue, and at start before any queue runs.
final class CgroupDirectory: @unchecked Sendable {
    let path: String
    private let descriptor: OwnedFileDescriptor

    init(path: String) throws(Errno) {
        self.path = path
        descriptor = OwnedFileDescriptor(adopting: try systemCall { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) })
    }

    private init(path: String, adopting fd: Int32) {
        self.path = path
        descriptor = OwnedFileDescriptor(adopting: fd)
    }

    var rawValue: Int32 { descriptor.rawValue }

    /// Interface files are small: one read returns all of cgroup.events or memory.events.
    func read(_ file: String) throws(Errno) -> String {
        let fd = try systemCall { openat(descriptor.rawValue, file, O_RDONLY | O_CLOEXEC) }
        defer { close(fd) }
        var text: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while true {
            let count = try systemCall { buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
            if count == 0 { break }
            text += buffer[0..<count]
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// One write: the kernel parses each write of an interface file as one value.
    func write(_ file: String, _ value: String) throws(Errno) {
        let fd = try openForWriting(file)
        defer { close(fd) }
        let bytes = Array(value.utf8)
        try systemCall { bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } }
    }

    /// The caller closes it.
    func openForWriting(_ file: String) throws(Errno) -> Int32 {
        try systemCall { openat(descriptor.rawValue, file, O_WRONLY | O_CLOEXEC) }
    }

    /// `key value` lines (cgroup.events, memory.events): the value of `key`, if present.
    func counter(_ key: String, in file: String) -> Int? {
        guard let text = try? read(file) else { return nil }
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2, parts[0] == key { return Int(parts[1]) }
        }
        return nil
    }

    /// A new child cgroup, or the existing one of that name.
    func makeChild(_ name: String) throws(Errno) -> CgroupDirectory {
        do {
            try systemCall { mkdirat(descriptor.rawValue, name, 0o755) }
        } catch where error == .fileExists {
        }
        let fd = try systemCall { openat(descriptor.rawValue, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        return CgroupDirectory(path: path + "/" + name, adopting: fd)
    }

    /// rmdir: EBUSY while a process is still in it.
    func removeChild(_ name: String) throws(Errno) {
        try systemCall { unlinkat(descriptor.rawValue, name, AT_REMOVEDIR) }
    }

    /// The child cgroups' names.
    func children() -> [String] {
        let fd = openat(descriptor.rawValue, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0, let stream = fdopendir(fd) else {
            if fd >= 0 { close(fd) }
            return []
        }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            guard entry.pointee.d_type == UInt8(DT_DIR) else { continue }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// The processes in this cgroup alone (not its children).
    func processIDs() -> [pid_t] {
        guard let text = try? read("cgroup.procs") else { return [] }
        return text.split(separator: "\n").compactMap { pid_t($0) }
    }

    /// Whether any process is in this cgroup or below: cgroup.events' "populated".
    var isPopulated: Bool {
        counter("populated", in: "cgroup.events").map { $0 != 0 } ?? !processIDs().isEmpty
    }

    /// Ends every process in it and below at once (cgroup.kill, Linux 5.14); before
    /// that, SIGKILL to each process listed, which a fork racing the loop can outrun.
    @discardableResult
    func killAll() -> Int {
        if (try? write("cgroup.kill", "1")) != nil { return 1 }
        return signalAll(SIGKILL)
    }

    /// `signal` to every process listed in it; returns how many. A pid read here can
    /// only be reused after its process is reaped, and the job's own processes are
    /// reaped by their parents in the cgroup or by init: the window is that of systemd's cg_kill.
    @discardableResult
    func signalAll(_ signal: Int32) -> Int {
        var signalled = 0
        for pid in processIDs() where kill(pid, signal) == 0 { signalled += 1 }
        return signalled
    }
}
