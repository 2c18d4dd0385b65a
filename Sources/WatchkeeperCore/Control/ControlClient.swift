import CWatchkeeperSystem
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Why a control command could not get its answer, with the exit code it ends with.
public enum ControlClientError: Error, CustomStringConvertible {
    /// No socket, or nothing listening on it.
    case notRunning(path: String, reason: String)
    /// The socket's mode or the daemon refused this user.
    case permissionDenied(path: String, group: String?)
    /// Connected, but the conversation failed (timeout, a reply that is not Varlink).
    case failed(path: String, reason: String)

    public var description: String {
        switch self {
        case .notRunning(let path, let reason):
            return "watchkeeper is not running, or not listening on \(path): \(reason)"
        case .permissionDenied(let path, let group):
            let join = group.map { "run as root, or join group \($0) (usermod -aG \($0) USER, then log in again)" }
                ?? "run as root, or ask for [daemon] control_group to be set to a group you are in"
            return "permission denied on the control socket \(path): \(join)"
        case .failed(let path, let reason):
            return "unable to talk to watchkeeper on \(path): \(reason)"
        }
    }

    public var exitCode: Int32 {
        switch self {
        case .notRunning: return ExitCode.unavailable
        case .permissionDenied: return ExitCode.permission
        case .failed: return ExitCode.protocolError
        }
    }
}

/// One connection to the control socket, for the CLI: blocking calls with a deadline
/// (SO_RCVTIMEO/SO_SNDTIMEO), replies read up to their NUL.
public final class ControlClient {
    public let path: String
    private let socket: OwnedFileDescriptor
    private var buffered: [UInt8] = []

    private init(path: String, socket: consuming OwnedFileDescriptor) {
        self.path = path
        self.socket = socket
    }

    /// `<runtime_dir>/control.sock` of the configuration `run` would use. A configuration this
    /// user cannot read or that is invalid still has a runtime_dir: the default, or
    /// $RUNTIME_DIRECTORY as systemd sets it.
    public static func locateSocket(configPath: String?, environment: [String: String]) -> String {
        let path = ConfigLoader.resolvePath(explicit: configPath, environment: environment)
        let runtime: String
        if case .success(let configuration) = ConfigLoader.load(path: path, environment: environment) {
            runtime = configuration.daemon.runtimeDirectory
        } else {
            runtime = DaemonSettings(environment: environment).runtimeDirectory
        }
        return ControlServer.socketPath(runtimeDirectory: runtime)
    }

    public static func connect(path: String, timeout: Duration) throws(ControlClientError) -> ControlClient {
        func open() throws(Errno) -> ControlClient {
            let fd = OwnedFileDescriptor(adopting: try systemCall { Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) })
            try socketCall(fd.rawValue, path: path, connecting: true)
            return ControlClient(path: path, socket: fd)
        }
        do {
            let client = try open()
            client.setTimeout(timeout)
            return client
        } catch .noSuchFileOrDirectory {
            throw .notRunning(path: path, reason: "no control socket there (start it with: systemctl start watchkeeper)")
        } catch .connectionRefused {
            throw .notRunning(path: path, reason: "nothing is listening (a socket left by a daemon that stopped)")
        } catch .permissionDenied {
            var info = stat()
            let group = stat(path, &info) == 0 ? ControlAccess.groupName(info.st_gid) : nil
            throw .permissionDenied(path: path, group: group == "root" ? nil : group)
        } catch {
            throw .failed(path: path, reason: error.unable("connect"))
        }
    }

    public func setTimeout(_ timeout: Duration) {
        var value = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
        setsockopt(socket.rawValue, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(socket.rawValue, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Sends `call` and returns its reply; a PermissionDenied error becomes
    /// `ControlClientError.permissionDenied`, other errors are the caller's to explain.
    public func call(_ call: VarlinkCall) throws(ControlClientError) -> Result<DumpValue, VarlinkError> {
        try send(call.encoded)
        let message = try readMessage()
        let reply: VarlinkReply
        do {
            reply = try VarlinkReply.decode(message)
        } catch {
            throw .failed(path: path, reason: "the reply is not Varlink: \(error)")
        }
        switch reply {
        case .parameters(let fields, _):
            return .success(.object(fields))
        case .error(let error) where error.name == ControlInterface.ErrorName.permissionDenied.qualified:
            throw .permissionDenied(path: path, group: error["group"]?.stringValue)
        case .error(let error):
            return .failure(error)
        }
    }

    private func send(_ bytes: [UInt8]) throws(ControlClientError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.send(socket.rawValue, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
            if written < 0 {
                if errno == EINTR { continue }
                throw .failed(path: path, reason: Errno(rawValue: errno).unable("send the request"))
            }
            offset += written
        }
    }

    private func readMessage() throws(ControlClientError) -> [UInt8] {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            if let nul = buffered.firstIndex(of: 0) {
                let message = Array(buffered[..<nul])
                buffered.removeSubrange(...nul)
                return message
            }
            let count = chunk.withUnsafeMutableBytes { read(socket.rawValue, $0.baseAddress, $0.count) }
            if count > 0 {
                buffered += chunk[..<count]
            } else if count == 0 {
                throw .failed(path: path, reason: "the daemon closed the connection before replying (it may be stopping)")
            } else if errno == EAGAIN {
                throw .failed(path: path, reason: "no reply in time (the daemon may be overloaded or stuck; `kill -USR1` its pid for a dump)")
            } else if errno != EINTR {
                throw .failed(path: path, reason: Errno(rawValue: errno).unable("read the reply"))
            }
        }
    }
}
