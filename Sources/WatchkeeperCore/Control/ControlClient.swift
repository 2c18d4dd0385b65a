import CWatchkeeperSystem
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Why a control command could not get its answer, with the exit code it ends with.
public enum ControlClientError: Error, CustomStringConvertible {
    /// No socket, or nothing listening on it.
    case notRunning(path: String, reason: String)
    /// The socket's mode or the daemon refused this user; `method` when the user may only
    /// read (`read_group`) and the call acts.
    case permissionDenied(path: String, group: String?, method: String? = nil)
    /// Connected, but the conversation failed (timeout, a reply that is not Varlink).
    case failed(path: String, reason: String)

    public var description: String {
        switch self {
        case .notRunning(let path, let reason):
            return "watchkeeper is not running, or not listening on \(path): \(reason)"
        case .permissionDenied(let path, let group, let method):
            let join = group.map { "run as root, or join group \($0) (usermod -aG \($0) USER, then log in again)" }
                ?? "run as root, or ask for [daemon] control_group to be set to a group you are in"
            let what = method.map { ": this user may only read (read_group), and \($0) acts" } ?? ""
            return "permission denied on the control socket \(path)\(what): \(join)"
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

/// One connection to the control socket, for the CLI: each call has one deadline for the
/// whole exchange (a server that trickles bytes or never sends the NUL cannot hold it past
/// the timeout), and a reply is read in linear time, however large.
public final class ControlClient {
    public let path: String
    private let socket: OwnedFileDescriptor
    private var buffered: [UInt8] = []
    /// Where in `buffered` the search for the reply's NUL goes on: bytes before it have been
    /// looked at already.
    private var searched = 0
    private var timeout: Duration = .seconds(30)

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

    /// For each call from now on: the time from sending it to having its whole reply.
    public func setTimeout(_ timeout: Duration) {
        self.timeout = timeout
    }

    /// Sends `call` and returns its reply; a PermissionDenied error becomes
    /// `ControlClientError.permissionDenied`, other errors are the caller's to explain.
    public func call(_ call: VarlinkCall) throws(ControlClientError) -> Result<DumpValue, VarlinkError> {
        let deadline = MonotonicInstant.now + timeout
        do {
            try send(call.encoded, deadline: deadline)
        } catch {
            // A daemon that refuses this user answers at once and closes: the answer may
            // be waiting even though the request could not be sent (EPIPE).
            guard let message = try? readMessage(deadline: deadline), let reply = try? VarlinkReply.decode(message),
                  case .error(let refusal) = reply, refusal.name == ControlInterface.ErrorName.permissionDenied.qualified else {
                throw error
            }
            throw .permissionDenied(path: path, group: refusal["group"]?.stringValue)
        }
        let message = try readMessage(deadline: deadline)
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
            throw .permissionDenied(path: path, group: error["group"]?.stringValue, method: error["method"]?.stringValue)
        case .error(let error):
            return .failure(error)
        }
    }

    private func send(_ bytes: [UInt8], deadline: MonotonicInstant) throws(ControlClientError) {
        var offset = 0
        while offset < bytes.count {
            try wait(for: Int16(POLLOUT), until: deadline, doing: "send the request")
            switch valueOrErrno({ bytes.withUnsafeBytes { Glibc.send(socket.rawValue, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) } }) {
            case .success(let written): offset += written
            case .failure(.resourceTemporarilyUnavailable): continue
            case .failure(let error): throw .failed(path: path, reason: error.unable("send the request"))
            }
        }
    }

    private func readMessage(deadline: MonotonicInstant) throws(ControlClientError) -> [UInt8] {
        var chunk = [UInt8](repeating: 0, count: 256 * 1024)
        while true {
            // Only the bytes not looked at yet: searching the whole buffer after each read
            // made a 6 MB reply take seconds.
            if let nul = buffered[searched...].firstIndex(of: 0) {
                let message = Array(buffered[..<nul])
                buffered.removeSubrange(...nul)
                searched = 0
                return message
            }
            searched = buffered.count
            try wait(for: Int16(POLLIN), until: deadline, doing: "read the reply")
            let outcome = chunk.withUnsafeMutableBytes { buffer in
                NonBlockingRead { recv(socket.rawValue, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT)) }
            }
            switch outcome {
            case .bytes(let count):
                buffered += chunk[..<count]
            case .wouldBlock:
                continue
            case .endOfFile:
                throw .failed(path: path, reason: "the daemon closed the connection before replying (it may be stopping)")
            case .failed(let error):
                throw .failed(path: path, reason: error.unable("read the reply"))
            }
        }
    }

    /// Until the socket is ready for `events`, or the call's deadline.
    private func wait(for events: Int16, until deadline: MonotonicInstant, doing what: String) throws(ControlClientError) {
        while true {
            let left = deadline - .now
            guard left > .zero else {
                throw .failed(path: path, reason: "no reply within \(timeout.compactDescription) (the daemon may be overloaded or stuck; `kill -USR1` its pid for a dump)")
            }
            var descriptor = pollfd(fd: socket.rawValue, events: events, revents: 0)
            let milliseconds = Int32(clamping: (left.nanosecondsClamped + 999_999) / 1_000_000)
            // Not retried here: an interrupted poll goes round again with the time left.
            switch valueOrErrno(retryOnInterrupt: false, { poll(&descriptor, 1, milliseconds) }) {
            case .success(let ready) where ready > 0: return
            case .success, .failure(.interrupted): continue
            case .failure(let error): throw .failed(path: path, reason: error.unable(what))
            }
        }
    }
}
