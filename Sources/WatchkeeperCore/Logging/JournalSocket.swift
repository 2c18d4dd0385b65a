import CWatchkeeperSystem
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// journald's native protocol on one datagram socket connected once, for the volume a
/// job's output makes: sd_journal_sendv resolves the socket's path at every call (it
/// sends to an address, unconnected), takes one syscall per entry and blocks while
/// journald is behind; this sends up to 64 entries per sendmmsg and never blocks, so a
/// slow journald holds back the job whose output waits, not the queue all jobs share.
/// Measured: 99 s of daemon CPU per GiB of 80-byte lines through sd_journal_sendv
/// (docs/measurements/performance.md). The daemon's own messages stay on sd_journal_sendv,
/// on the log queue (`LogOutbox`): they are few, and it handles entries of any size.
final class JournalSocket: Sendable {
    static let defaultPath = "/run/systemd/journal/socket"
    private let path: String
    /// The connected socket, -1 before the first send and after a failure.
    private let descriptor = Mutex<Int32>(-1)

    init(path: String = JournalSocket.defaultPath) {
        self.path = path
    }

    /// Sends the batch's entries from `start` without waiting: `sent` is how many of the
    /// batch are out now. `behind`: journald's queue is full and the rest must wait (the
    /// caller tries again later); otherwise fewer than all sent means the journal is not there
    /// (the caller shows the rest on stderr). A journald that restarted (ECONNREFUSED on
    /// the old socket) is reconnected once.
    func send(_ batch: JournalBatch, from start: Int = 0) -> (sent: Int, behind: Bool) {
        descriptor.withLock { fd -> (Int, Bool) in
            var sent = start
            for _ in 0..<2 {
                if fd < 0 { fd = connectSocket() }
                guard fd >= 0 else { return (sent, false) }
                while sent < batch.count {
                    let result = batch.arena.withUnsafeBufferPointer { arena in
                        batch.spans.withUnsafeBufferPointer { spans in
                            wk_send_datagrams(fd, arena.baseAddress, spans.baseAddress! + 2 * sent, batch.count - sent, Int32(MSG_DONTWAIT))
                        }
                    }
                    if result > 0 {
                        sent += result
                    } else if result == -Int(EAGAIN) {
                        return (sent, true)
                    } else {
                        break
                    }
                }
                if sent == batch.count { return (sent, false) }
                // The socket is stale or journald is gone: a new one, once.
                close(fd)
                fd = -1
            }
            return (sent, false)
        }
    }

    private func connectSocket() -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { return -1 }
        do {
            try socketCall(fd, path: path, connecting: true)
        } catch {
            close(fd)
            return -1
        }
        // As libsystemd does: room for many entries in flight, so a burst does not block
        // on every datagram while journald catches up (FORCE needs CAP_NET_ADMIN).
        var size: Int32 = 8 << 20
        if setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, socklen_t(MemoryLayout<Int32>.size)) != 0 {
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        return fd
    }
}

/// Journal entries in the native protocol, back to back in one buffer: `FIELD=value\n`
/// per field, or for a value holding a newline `FIELD\n`, its length as 64-bit little
/// endian, the value, `\n` (systemd's JOURNAL_NATIVE_PROTOCOL.md).
struct JournalBatch {
    private(set) var arena: [UInt8] = []
    /// Start and length of each entry, flattened for the C sender.
    private(set) var spans: [Int] = []
    var count: Int { spans.count / 2 }
    var bytes: Int { arena.count }

    mutating func beginEntry() {
        spans.append(arena.count)
    }

    mutating func append(_ encodedFields: [UInt8]) {
        arena += encodedFields
    }

    /// One field whose value is known to hold no newline.
    mutating func appendField(prefix: [UInt8], value: UnsafeBufferPointer<UInt8>, suffix: [UInt8] = []) {
        arena += prefix
        arena.append(contentsOf: value)
        arena += suffix
        arena.append(UInt8(ascii: "\n"))
    }

    mutating func endEntry() {
        spans.append(arena.count - spans[spans.count - 1])
    }

    /// The entry `index`'s bytes.
    func entry(_ index: Int) -> ArraySlice<UInt8> {
        arena[spans[2 * index]..<(spans[2 * index] + spans[2 * index + 1])]
    }

    mutating func removeAll() {
        arena.removeAll(keepingCapacity: arena.capacity <= 1 << 20)
        spans.removeAll(keepingCapacity: true)
    }

    /// Fields in the native encoding, for what every entry of a stream shares.
    static func encode(_ fields: [(name: String, value: [UInt8])]) -> [UInt8] {
        var bytes: [UInt8] = []
        for (name, value) in fields {
            bytes += Array(name.utf8)
            if value.contains(UInt8(ascii: "\n")) {
                bytes.append(UInt8(ascii: "\n"))
                withUnsafeBytes(of: UInt64(value.count).littleEndian) { bytes += $0 }
            } else {
                bytes.append(UInt8(ascii: "="))
            }
            bytes += value
            bytes.append(UInt8(ascii: "\n"))
        }
        return bytes
    }
}
