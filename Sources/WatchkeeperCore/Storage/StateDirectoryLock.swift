// One watchkeeper per state directory (and per runtime directory, where the control socket
// and state.json are: Daemon.lockRuntimeDirectory). Two daemons on one directory would both catch up
// the same files and both write the ledger; SQLite keeps the file consistent, but not the
// work. An flock on <state_dir>/watchkeeper.lock says so at start-up, naming the other pid.
//
// flock rather than fcntl (POSIX) locks: an flock belongs to the open file description, so
// it is not dropped when some other descriptor of the same file is closed in this process
// (SQLite's own fcntl locks on other files are unaffected either way), and the kernel
// releases it when the process dies, however it dies: no stale lock to clean up.

import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

public struct StateDirectoryLockError: Error, Sendable, Equatable, CustomStringConvertible {
    public let directory: String
    /// The pid the holder wrote into the lock file, when another process holds the lock
    /// and its pid could be read.
    public let holder: pid_t?
    /// errno of the failed call; EWOULDBLOCK when another process holds the lock.
    public let errorNumber: Errno
    public let description: String
}

/// Held from start-up to exit; releasing it is closing the descriptor (or dying).
/// Not Sendable: the daemon's start-up owns it and only ever releases it.
public final class StateDirectoryLock {
    public static let fileName = "watchkeeper.lock"

    public let directory: String
    public let path: String
    /// "state directory" or "runtime directory", for the message naming the other holder.
    private let what: String
    /// -1 once released.
    private(set) var descriptor: Int32

    /// Takes the lock without waiting and writes `pid` into the file ("1234\n"). O_CLOEXEC
    /// matters: a job spawned while we run must not inherit the descriptor, or a job still
    /// running after the daemon exits would keep the next daemon from starting. O_NOFOLLOW
    /// and the regular-file check: the lock must be on our file, not wherever a planted
    /// link or FIFO (O_NONBLOCK, so opening one cannot hang) would take us.
    public init(stateDirectory: String, what: String = "state directory", pid: pid_t = getpid()) throws(StateDirectoryLockError) {
        directory = stateDirectory
        self.what = what
        path = (stateDirectory.hasSuffix("/") ? stateDirectory : stateDirectory + "/") + Self.fileName
        let path = path
        switch valueOrErrno({ open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600) }) {
        case .success(let opened): descriptor = opened
        case .failure(let error):
            descriptor = -1
            throw Self.failure(directory: directory, holder: nil, errorNumber: error, reason: "open \(path): \(error)")
        }
        do throws(StateDirectoryLockError) {
            var info = stat()
            guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
                throw Self.failure(directory: directory, holder: nil, errorNumber: .invalidArgument, reason: "\(path) is not a regular file")
            }
            try lock()
            try write(pid: pid)
        } catch {
            Glibc.close(descriptor)
            descriptor = -1
            throw error
        }
    }

    deinit {
        release()
    }

    /// Closes the descriptor, which releases the lock. The pid stays in the file: it is
    /// only read when the lock is held, and then the holder has written its own.
    public func release() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
    }

    public var isHeld: Bool { descriptor >= 0 }

    private func lock() throws(StateDirectoryLockError) {
        if case .failure(let error) = nothingOrErrno({ flock(descriptor, LOCK_EX | LOCK_NB) }) {
            guard error == .wouldBlock else {
                throw Self.failure(directory: directory, holder: nil, errorNumber: error, reason: "flock \(path): \(error)")
            }
            // The holder writes its pid right after locking: an empty file means it is just
            // starting, and the message says the pid is unknown rather than guessing.
            let holder = Self.readPID(path: path)
            let who = holder.map { "another watchkeeper (pid \($0))" } ?? "another process (its pid is not in \(path) yet)"
            throw Self.failure(directory: directory, holder: holder, errorNumber: error, reason: "\(who) is using this \(what)")
        }
    }

    private func write(pid: pid_t) throws(StateDirectoryLockError) {
        let text = Array("\(pid)\n".utf8)
        func failure(_ error: Errno) -> StateDirectoryLockError {
            Self.failure(directory: directory, holder: nil, errorNumber: error, reason: "write our pid into \(path): \(error)")
        }
        if case .failure(let error) = nothingOrErrno({ ftruncate(descriptor, 0) }) { throw failure(error) }
        switch valueOrErrno({ text.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) } }) {
        case .success(text.count): return
        case .success: throw failure(.ioError)
        case .failure(let error): throw failure(error)
        }
    }

    /// The pid in the file, read without taking the lock (its holder has it).
    static func readPID(path: String) -> pid_t? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        defer { Glibc.close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer.prefix(count), as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        guard let pid = pid_t(text), pid > 0 else { return nil }
        return pid
    }

    /// "unable to lock <directory>: <reason>".
    private static func failure(directory: String, holder: pid_t?, errorNumber: Errno, reason: String) -> StateDirectoryLockError {
        StateDirectoryLockError(directory: directory, holder: holder, errorNumber: errorNumber,
                                description: "unable to lock \(directory): \(reason)")
    }
}
