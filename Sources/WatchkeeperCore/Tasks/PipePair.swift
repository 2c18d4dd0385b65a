import CWatchkeeperSpawn
#if canImport(Glibc)
import Glibc
#endif

// MARK: - Pipes

/// A pipe whose both ends are O_CLOEXEC: a child gets a copy only through the shim's dup2,
/// so a job started concurrently never holds another job's pipe open.
public struct PipePair: Sendable {
    public let readEnd: Int32
    public let writeEnd: Int32

    /// `nonBlockingRead`: for a dispatch read source on the read end.
    public static func make(nonBlockingRead: Bool) throws(SpawnError) -> PipePair {
        var ends: [Int32] = [-1, -1]
        guard wk_pipe_cloexec(&ends) == 0 else {
            let code = errno
            throw SpawnError(step: .pipe, errorNumber: code, description: "unable to create pipe: \(errorText(code))")
        }
        if nonBlockingRead {
            let flags = fcntl(ends[0], F_GETFL)
            if flags < 0 || fcntl(ends[0], F_SETFL, flags | O_NONBLOCK) < 0 {
                let code = errno
                close(ends[0])
                close(ends[1])
                throw SpawnError(
                    step: .pipe, errorNumber: code,
                    description: "unable to make pipe non-blocking: \(errorText(code))"
                )
            }
        }
        return PipePair(readEnd: ends[0], writeEnd: ends[1])
    }
}

extension PipePair {
    /// fcntl's F_SETPIPE_SZ, which Swift's Glibc module does not import.
    static let setSizeCommand: Int32 = 1031

    /// The most a pipe can hold without CAP_SYS_RESOURCE: 1 MiB, or less where
    /// fs.pipe-max-size is lower. Read once: F_SETPIPE_SZ still checks the current limit.
    public static let largestCapacity: Int = {
        let limit = (try? readSmallFile("/proc/sys/fs/pipe-max-size"))?.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) }
        return min(1 << 20, limit ?? 1 << 20)
    }()

    /// A pipe that already holds all of `data`, its write end closed: the read end is a
    /// child's whole stdin, ending in EOF. Written before the child starts, so nothing
    /// has to feed it later; the pipe is enlarged to fit (at most `largestCapacity`).
    public static func filled(with data: [UInt8]) throws(SpawnError) -> Int32 {
        // Root could enlarge a pipe past fs.pipe-max-size; the batch budget never asks it to.
        let capacity = largestCapacity
        guard data.count <= capacity else {
            throw SpawnError(step: .stdin, errorNumber: E2BIG,
                             description: "unable to hand \(data.count) bytes to the job's stdin: a pipe holds at most \(capacity) (fs.pipe-max-size)")
        }
        let pipe = try make(nonBlockingRead: false)
        func failure(_ text: String, _ code: Int32) -> SpawnError {
            close(pipe.readEnd)
            close(pipe.writeEnd)
            return SpawnError(step: .stdin, errorNumber: code, description: text)
        }
        let flags = fcntl(pipe.writeEnd, F_GETFL)
        // Non-blocking, so that a pipe smaller than believed fails the job instead of
        // hanging the tasks queue.
        guard flags >= 0, fcntl(pipe.writeEnd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            let code = errno
            throw failure("unable to make the stdin pipe non-blocking: \(errorText(code))", code)
        }
        if data.count > 65_536 {
            let size = fcntl(pipe.writeEnd, setSizeCommand, Int32(clamping: data.count))
            guard size >= data.count else {
                let code = size < 0 ? errno : ENOSPC
                throw failure("unable to hand \(data.count) bytes to the job's stdin: a pipe holds at most \(capacity) (fs.pipe-max-size): \(errorText(code))", code)
            }
        }
        var written = 0
        while written < data.count {
            let count = data.withUnsafeBytes { write(pipe.writeEnd, $0.baseAddress! + written, data.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                let code = count < 0 ? errno : EIO
                throw failure("unable to write the job's stdin (\(written) of \(data.count) bytes written): \(errorText(code))", code)
            }
            written += count
        }
        close(pipe.writeEnd)
        return pipe.readEnd
    }
}
