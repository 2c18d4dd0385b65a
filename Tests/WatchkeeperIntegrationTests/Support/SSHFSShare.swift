import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A real network file system on loopback: Debian's sshd on a free loopback port with a host
/// key and a user key made here, and sshfs mounting its `server` directory on `mountPoint`.
/// What the test writes into `server` directly is what another host would write into the
/// share: this host's kernel never sees it written through the mount.
final class SSHFSShare {
    let root: String
    var server: String { root + "/server" }
    var mountPoint: String { root + "/mnt" }
    private(set) var port: UInt16 = 0
    private var sshd: pid_t?
    private(set) var sshfs: pid_t?

    /// Both in Debian: openssh-server and sshfs (the Makefile's deps install them).
    static func requireTools() throws {
        for tool in ["/usr/sbin/sshd", "/usr/bin/sshfs", "/usr/bin/ssh-keygen", "/usr/bin/fusermount3"] where access(tool, X_OK) != 0 {
            XCTFail("\(tool) is missing: apt-get install openssh-server sshfs (make deps does)")
            throw XCTSkip("no \(tool)")
        }
        guard access("/dev/fuse", R_OK | W_OK) == 0 else {
            XCTFail("/dev/fuse is not usable here: sshfs needs FUSE")
            throw XCTSkip("no /dev/fuse")
        }
    }

    init(root: String) throws {
        try Self.requireTools()
        self.root = root
        let manager = FileManager.default
        for directory in [server, mountPoint, "/run/sshd"] { try manager.createDirectory(atPath: directory, withIntermediateDirectories: true) }
        for key in ["host", "user"] {
            try Self.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", root + "/\(key)_key"])
        }
        try manager.copyItem(atPath: root + "/user_key.pub", toPath: root + "/authorized_keys")
        port = try Self.freeLoopbackPort()
        try """
            ListenAddress 127.0.0.1:\(port)
            HostKey \(root)/host_key
            AuthorizedKeysFile \(root)/authorized_keys
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            PermitRootLogin prohibit-password
            StrictModes no
            UsePAM no
            Subsystem sftp internal-sftp
            PidFile none

            """.write(toFile: root + "/sshd_config", atomically: true, encoding: .utf8)
        sshd = try Self.spawn("/usr/sbin/sshd", ["-D", "-e", "-f", root + "/sshd_config"])
        guard waitFor(10, { Self.accepts(port: self.port) }) else {
            throw XCTSkip("sshd did not listen on 127.0.0.1:\(port) within 10 s")
        }
        try mount()
    }

    deinit {
        unmount()
        if let sshd { Self.end(sshd) }
    }

    /// sshfs in the foreground (so this test owns its process), without its 20 s cache of
    /// listings and attributes: what the documentation tells users to mount with.
    func mount() throws {
        sshfs = try Self.spawn("/usr/bin/sshfs", [
            "-f", "-p", "\(port)", "-o",
            "dir_cache=no,IdentityFile=\(root)/user_key,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes,LogLevel=ERROR",
            "root@127.0.0.1:\(server)", mountPoint,
        ])
        guard waitFor(10, { self.isMounted }) else { throw XCTSkip("sshfs did not mount \(mountPoint) within 10 s") }
    }

    var isMounted: Bool {
        guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return false }
        return table.split(separator: "\n").contains { $0.contains(" \(mountPoint) ") && $0.contains("fuse.sshfs") }
    }

    /// The sshfs process dies: the mount stays, and every call on it fails with ENOTCONN.
    func killClient() {
        guard let sshfs else { return }
        kill(sshfs, SIGKILL)
        var status: Int32 = 0
        _ = waitpid(sshfs, &status, 0)
        self.sshfs = nil
    }

    /// The server stops answering: calls on the mount hang until `resumeClient`.
    func stopClient() { sshfs.map { _ = kill($0, SIGSTOP) } }
    func resumeClient() { sshfs.map { _ = kill($0, SIGCONT) } }

    /// What an administrator does after the client died: a lazy unmount, then a new mount.
    func restore() throws {
        unmount()
        try mount()
    }

    func unmount() {
        if let sshfs { kill(sshfs, SIGCONT) }
        _ = try? Self.run("/usr/bin/fusermount3", ["-u", "-z", mountPoint], allowFailure: true)
        if let sshfs { Self.end(sshfs, signal: SIGKILL) }
        sshfs = nil
    }

    /// Started with posix_spawn, not Foundation's Process: its reaper thread waits for one
    /// child at a time, so a long-lived sshd left a short fusermount3 never reaped.
    static func spawn(_ tool: String, _ arguments: [String]) throws -> pid_t {
        try spawnChild([tool] + arguments, environment: ProcessInfo.processInfo.environment, stdout: .discarded, stderr: .discarded)
    }

    /// SIGTERM (or `signal`), then its exit collected.
    static func end(_ pid: pid_t, signal: Int32 = SIGTERM) {
        kill(pid, SIGCONT)
        kill(pid, signal)
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
    }

    @discardableResult
    static func run(_ tool: String, _ arguments: [String], allowFailure: Bool = false) throws -> Int32 {
        let pid = try spawn(tool, arguments)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        if !allowFailure && code != 0 {
            throw NSError(domain: "\(tool) \(arguments.joined(separator: " ")) exited \(code)", code: Int(code))
        }
        return code
    }

    /// A port the kernel gave out and that is free again at once (sshd binds it next).
    static func freeLoopbackPort() throws -> UInt16 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        guard bound else { throw NSError(domain: "unable to bind a loopback port", code: Int(errno)) }
        return UInt16(bigEndian: address.sin_port)
    }

    static func accepts(port: UInt16) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        address.sin_port = port.bigEndian
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
