import CWatchkeeperSystem
import Dispatch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

// The pipes between the daemon and its jobs. Every end is O_CLOEXEC (a child gets a copy
// only through the shim's dup2, so a job started concurrently never holds another job's
// pipe open) and has one owner, an `OwnedFileDescriptor`.
extension OwnedPipe {
    /// A job's stdout, stderr or progress pipe: the read end non-blocking, for the daemon's
    /// read source; the write end blocking, as the child's fd 1, 2 or 3.
    public static func forJobOutput() throws(SpawnError) -> OwnedPipe {
        let pipe = try pipeOrSpawnError()
        do {
            try makeNonBlocking(pipe.readEnd.rawValue)
        } catch {
            throw SpawnError(step: .pipe, errorNumber: error.rawValue, description: "unable to make pipe non-blocking: \(errorText(error.rawValue))")
        }
        return pipe
    }

    /// A pipe end just made has no status flag F_SETFL could clear (O_CLOEXEC is a
    /// descriptor flag), so no F_GETFL first: one syscall less for each of a job's pipes.
    private static func makeNonBlocking(_ fd: Int32) throws(Errno) {
        _ = try systemCall { fcntl(fd, F_SETFL, O_NONBLOCK) }
    }

    private static func pipeOrSpawnError() throws(SpawnError) -> OwnedPipe {
        do {
            return try OwnedPipe()
        } catch {
            throw SpawnError(step: .pipe, errorNumber: error.rawValue, description: "unable to create pipe: \(errorText(error.rawValue))")
        }
    }

    /// Gives up ownership of both ends, for code that manages them by hand (tests that
    /// close a write end to make EOF, the spawn benchmark).
    public consuming func releaseEnds() -> (readEnd: Int32, writeEnd: Int32) {
        (readEnd.release().rawValue, writeEnd.release().rawValue)
    }

    /// The most a pipe can hold without CAP_SYS_RESOURCE: 1 MiB, or less where
    /// fs.pipe-max-size is lower. Read once: F_SETPIPE_SZ still checks the current limit.
    public static let largestCapacity: Int = {
        let limit = (try? readSmallFile("/proc/sys/fs/pipe-max-size"))?.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) }
        return min(1 << 20, limit ?? 1 << 20)
    }()

    /// Asks the kernel for a pipe of `bytes` (F_SETPIPE_SZ); the size it gave, or the errno.
    func enlarge(to bytes: Int) -> Result<Int32, Errno> {
        let writer = writeEnd.rawValue
        return valueOrErrno { fcntl(writer, Int32(WK_F_SETPIPE_SZ), Int32(clamping: bytes)) }
    }

    /// A pipe that already holds all of `data`, its write end closed: the read end is a
    /// child's whole stdin, ending in EOF. Written before the child starts, so nothing
    /// has to feed it later; the pipe is enlarged to fit (at most `largestCapacity`).
    public static func filled(with data: [UInt8]) throws(SpawnError) -> OwnedFileDescriptor {
        // Root could enlarge a pipe past fs.pipe-max-size; the batch budget never asks it to.
        let capacity = largestCapacity
        func failure(_ text: String, _ code: Int32) -> SpawnError {
            SpawnError(step: .stdin, errorNumber: code, description: text)
        }
        guard data.count <= capacity else {
            throw failure("unable to hand \(data.count) bytes to the job's stdin: a pipe holds at most \(capacity) (fs.pipe-max-size)", E2BIG)
        }
        let pipe = try pipeOrSpawnError()
        let writer = pipe.writeEnd.rawValue
        // Non-blocking, so that a pipe smaller than believed fails the job instead of
        // hanging the jobs queue.
        do {
            try makeNonBlocking(writer)
        } catch {
            throw failure("unable to make the stdin pipe non-blocking: \(errorText(error.rawValue))", error.rawValue)
        }
        if data.count > 65_536 {
            switch pipe.enlarge(to: data.count) {
            case .success(let size) where size >= data.count: break
            case .success: throw failure("unable to hand \(data.count) bytes to the job's stdin: a pipe holds at most \(capacity) (fs.pipe-max-size): \(errorText(ENOSPC))", ENOSPC)
            case .failure(let error):
                throw failure("unable to hand \(data.count) bytes to the job's stdin: a pipe holds at most \(capacity) (fs.pipe-max-size): \(errorText(error.rawValue))", error.rawValue)
            }
        }
        var written = 0
        while written < data.count {
            let code: Int32
            switch valueOrErrno({ data.withUnsafeBytes { write(writer, $0.baseAddress! + written, data.count - written) } }) {
            case .success(let count) where count > 0:
                written += count
                continue
            case .success: code = EIO
            case .failure(let error): code = error.rawValue
            }
            throw failure("unable to write the job's stdin (\(written) of \(data.count) bytes written): \(errorText(code))", code)
        }
        return pipe.readEnd
    }
}
