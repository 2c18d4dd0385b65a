import CWatchkeeperSystem
import Dispatch
import Logging
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// The control socket's listening end, for ControlServer on the control queue: binding it
/// (a stale socket replaced, a live one or a file in the way refused), its mode and group,
/// accepting, and pausing that (for a second after EMFILE, or until the server says).
///
/// A dispatch read source, unlike the clients: a listening socket never reports a hang-up
/// (no peer can shut both its directions), which is what libdispatch's epoll backend
/// cannot take (DescriptorPoller).
final class ControlListener {
    private let queue: SubsystemQueue
    private let sources: SourceRegistry
    private let logger: Logger
    private var source: FileDescriptorReadSource?
    private var stats: SourceStats?
    /// Who paused accepting: a source is suspended once, whatever the number of reasons.
    private var pausedFor: Set<PauseReason> = []
    private var retry: RegisteredTimer?
    private(set) var path: String?
    private var inode: ino_t = 0

    enum PauseReason: Hashable {
        /// accept failed (EMFILE, ENFILE): again after a second.
        case failure
        /// The server holds as many descriptors as it may.
        case descriptors
    }

    struct ListenError: Error {
        let message: String
    }

    init(queue: SubsystemQueue, sources: SourceRegistry, logger: Logger) {
        self.queue = queue
        self.sources = sources
        self.logger = logger
    }

    /// Binds and listens at `path`; `onReadable` runs on the queue whenever a connection waits.
    func open(at path: String, onReadable: @escaping () -> Void) throws(ListenError) {
        guard path.utf8.count <= Int(WK_SUN_PATH_MAX) else {
            throw ListenError(message: "unable to create the control socket \(path): the path is longer than \(WK_SUN_PATH_MAX) bytes; choose a shorter runtime_dir")
        }
        try removeStaleSocket(path)
        // A nested function, so the owned fd is never conditionally initialised (which the
        // compiler does not support for noncopyable values): on failure it closes on return.
        func open() throws(Errno) -> FileDescriptorReadSource {
            let fd = OwnedFileDescriptor(adopting: try systemCall { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0) })
            try socketCall(fd.rawValue, path: path, connecting: false)
            try systemCall { Glibc.listen(fd.rawValue, 128) }
            return fd.makeReadSource(queue: queue.queue)
        }
        let opened: FileDescriptorReadSource
        do {
            opened = try open()
        } catch {
            throw ListenError(message: error.unable("create the control socket \(path)"))
        }
        var info = stat()
        if lstat(path, &info) == 0 { inode = info.st_ino }
        self.path = path
        let stats = sources.register(.read, owner: "control", target: "control socket \(path)", on: queue)
        opened.source.setEventHandler {
            stats.fired()
            onReadable()
        }
        opened.activate()
        source = opened
        self.stats = stats
        logger.info("control socket listening on \(path)")
    }

    /// A socket left by a daemon that died is replaced; one that still answers belongs to a
    /// running daemon and is left alone; anything that is not a socket is never deleted.
    private func removeStaleSocket(_ path: String) throws(ListenError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw ListenError(message: "unable to create the control socket \(path): a file that is not a socket is in the way; remove it")
        }
        if let probe = try? systemCall({ socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }) {
            defer { Glibc.close(probe) }
            let live = (try? socketCall(probe, path: path, connecting: true)) != nil
            if live {
                throw ListenError(message: "unable to create the control socket \(path): another process is listening on it (a second watchkeeper with the same runtime_dir?)")
            }
        }
        unlink(path)
        logger.notice("replaced a stale control socket at \(path) (left by a daemon that did not stop cleanly)")
    }

    /// 0660, group `gid`: the file mode keeps strangers from connecting at all; SO_PEERCRED
    /// decides for those who can. With a `read_group` (`openToAll`), 0666: a file has one
    /// group, and SO_PEERCRED turns away at the door whoever is in neither.
    func setOwnership(group gid: gid_t, openToAll: Bool) throws(Errno) {
        guard let path else { return }
        try systemCall { chmod(path, openToAll ? 0o666 : 0o660) }
        try systemCall { chown(path, uid_t.max, gid) }
    }

    /// Stops listening; the socket file goes too, unless another has replaced it.
    func close() {
        if let source {
            if !pausedFor.isEmpty { source.source.resume() }
            source.cancel()
        }
        pausedFor = []
        retry?.cancel()
        if let stats { sources.unregister(stats) }
        source = nil
        stats = nil
        if let path {
            var info = stat()
            if lstat(path, &info) == 0, info.st_ino == inode { unlink(path) }
        }
        path = nil
    }

    /// One waiting connection, non-blocking and close-on-exec; EAGAIN when none waits.
    func accept() -> Result<Int32, Errno> {
        guard let source else { return .failure(.badFileDescriptor) }
        return valueOrErrno { wk_accept_nonblocking(source.descriptor.rawValue) }
    }

    var isPaused: Bool { !pausedFor.isEmpty }

    /// No readable events until every reason is resumed; `.failure` resumes by itself a second later.
    func pause(_ reason: PauseReason) {
        guard let source, pausedFor.insert(reason).inserted else { return }
        if pausedFor.count == 1 { source.source.suspend() }
        guard reason == .failure else { return }
        if retry == nil {
            retry = sources.makeTimer(owner: "control", target: "accept again after a failure", on: queue) { [unowned self] in
                self.resume(.failure)
            }
        }
        retry?.schedule(after: .seconds(1))
    }

    func resume(_ reason: PauseReason) {
        guard let source, pausedFor.remove(reason) != nil, pausedFor.isEmpty else { return }
        source.source.resume()
    }
}
