import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// What one read of a non-blocking descriptor found. Every event handler that drains a
/// pipe, socket or timerfd asks the same four questions of the same -1/errno answer; this
/// asks them once, with EINTR retried (`valueOrErrno`), so a handler switches over the
/// outcome instead of reading errno.
public enum NonBlockingRead: Equatable, Sendable {
    /// This many bytes, at least one, are in the buffer.
    case bytes(Int)
    /// EAGAIN: nothing more now; the read source fires again when there is.
    case wouldBlock
    /// 0 bytes: the other end is closed (and never 0 for an empty buffer: do not pass one).
    case endOfFile
    /// Any other errno (ECONNRESET from a client, ECANCELED from a cancelled timerfd).
    case failed(Errno)

    /// Runs `call`, a read-like C call (read, recv with MSG_DONTWAIT) that returns a byte
    /// count or -1 with errno, and sorts its answer.
    @inline(__always)
    public init(_ call: () -> Int) {
        switch valueOrErrno(call) {
        case .success(0): self = .endOfFile
        case .success(let count): self = .bytes(count)
        case .failure(.resourceTemporarilyUnavailable): self = .wouldBlock
        case .failure(let error): self = .failed(error)
        }
    }

    /// One read(2) of `descriptor` into `buffer`. The corresponding C function is `read`.
    @inline(__always)
    public static func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer) -> NonBlockingRead {
        NonBlockingRead { Glibc.read(descriptor, buffer.baseAddress, buffer.count) }
    }
}
