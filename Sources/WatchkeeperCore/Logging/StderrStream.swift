import CWatchkeeperSystem

#if canImport(Glibc)
import Glibc
#endif

/// Job output's way to the daemon's stderr without ever blocking the jobs queue. A
/// blocking write(2) to a pipe whose reader is slow (a log collector, a terminal held
/// with Ctrl-S) held the queue every job's timers share: expiry came seconds late under
/// an output flood. Writes here never wait; what does not fit waits in the job's
/// writer, whose channel stops reading the job's pipe (backpressure, as for journald).
///
/// fd 2's own file description is shared with whoever started us (a shell's terminal),
/// so it must not be made non-blocking. A pipe, FIFO or terminal is opened again through
/// /proc/self/fd/2, which gives a description of our own to make non-blocking; a socket
/// takes MSG_DONTWAIT per call. A regular file or /dev/null never holds a writer long and
/// is written as it is (opening a regular file again would also lose its offset).
///
/// Lines go out whole: each write ends at a newline and is at most PIPE_BUF bytes, which
/// the kernel writes to a pipe all at once or not at all, so the daemon's own log lines
/// (written on fd 2 by other threads) never land inside a job's line, and a job's text
/// never starts a line that lacks its prefix.
public final class StderrStream: Sendable {
    enum Mode: Equatable {
        /// Regular file, /dev/null, or a reopen that failed: plain blocking writes.
        case direct
        /// A description of our own with O_NONBLOCK, `fd`, closed with the stream.
        case nonBlocking
        case socket
    }

    /// The longest line a job's output may make on stderr, newline included: PIPE_BUF.
    static let maxLineBytes = Int(PIPE_BUF)
    let mode: Mode
    let fd: Int32

    public static let shared = StderrStream(fd: 2)

    init(fd: Int32) {
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            (mode, self.fd) = (.direct, fd)
            return
        }
        let type = info.st_mode & S_IFMT
        if type == S_IFSOCK {
            (mode, self.fd) = (.socket, fd)
        } else if type == S_IFIFO || (type == S_IFCHR && isatty(fd) == 1) {
            let own = open("/proc/self/fd/\(fd)", O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
            (mode, self.fd) = own >= 0 ? (.nonBlocking, own) : (.direct, fd)
        } else {
            (mode, self.fd) = (.direct, fd)
        }
    }

    deinit {
        if mode == .nonBlocking { close(fd) }
    }

    /// Writes whole lines from `bytes[offset...]` (which holds only whole lines of at most
    /// `maxLineBytes`) until done or the reader is behind. Returns the new offset;
    /// `behind` when the rest must wait (the caller retries later). An error (the reader went
    /// away) counts the rest as written: there is nowhere else to show it.
    func write(_ bytes: UnsafeBufferPointer<UInt8>, from offset: Int) -> (offset: Int, behind: Bool) {
        guard let base = bytes.baseAddress else { return (offset, false) }
        if mode == .direct {
            StandardError.write(bytes: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[offset...])), fd: fd)
            return (bytes.count, false)
        }
        var offset = offset
        while offset < bytes.count {
            let length = Self.wholeLines(base + offset, count: bytes.count - offset)
            let result = valueOrErrno {
                mode == .socket
                    ? send(fd, base + offset, length, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                    : Glibc.write(fd, base + offset, length)
            }
            switch result {
            case .success(let written) where written > 0:
                offset += written
            case .failure(.resourceTemporarilyUnavailable):
                return (offset, true)
            case .success, .failure:
                return (bytes.count, false)
            }
        }
        return (offset, false)
    }

    /// Up to PIPE_BUF bytes ending at a newline; a longer piece only if a line is longer
    /// than that (which `JobOutputWriter` does not make).
    static func wholeLines(_ start: UnsafePointer<UInt8>, count: Int) -> Int {
        if count <= maxLineBytes { return count }
        if let newline = memrchr(start, Int32(UInt8(ascii: "\n")), maxLineBytes) {
            return start.distance(to: newline.assumingMemoryBound(to: UInt8.self)) + 1
        }
        return count
    }
}
