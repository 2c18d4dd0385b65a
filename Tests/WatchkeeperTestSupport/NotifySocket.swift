#if canImport(XCTest)
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A real sd_notify endpoint: the AF_UNIX datagram socket systemd would create,
/// bound to a path passed to the daemon as NOTIFY_SOCKET.
public final class NotifySocket {
    public struct Message {
        public let fields: [String: String]
        public let receivedAt: Date
        public subscript(key: String) -> String? { fields[key] }
    }

    public let path: String
    private let fd: Int32
    public private(set) var received: [Message] = []

    public init() throws {
        path = "/tmp/wk-notify-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        unlink(path)
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw NSError(domain: "socket", code: Int(errno)) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in path.utf8.enumerated() { buffer[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw NSError(domain: "bind", code: Int(errno)) }
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// The next datagram, or nil after `timeout`.
    public func next(timeout: TimeInterval) -> Message? {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&poller, 1, Int32(max(0, timeout * 1000)))
        guard ready > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let count = recv(fd, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        var fields: [String: String] = [:]
        for line in String(decoding: buffer[0..<count], as: UTF8.self).split(separator: "\n") {
            if let equals = line.firstIndex(of: "=") {
                fields[String(line[..<equals])] = String(line[line.index(after: equals)...])
            }
        }
        let message = Message(fields: fields, receivedAt: Date())
        received.append(message)
        return message
    }

    /// Reads datagrams until one satisfies `predicate`.
    public func waitFor(timeout: TimeInterval, _ predicate: (Message) -> Bool) -> Message? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let message = next(timeout: deadline.timeIntervalSinceNow), predicate(message) {
                return message
            }
        }
        return nil
    }

    public func waitFor(_ key: String, _ value: String, timeout: TimeInterval = 5) -> Message? {
        waitFor(timeout: timeout) { $0[key] == value }
    }

    /// Everything that arrives during `duration`.
    public func collect(for duration: TimeInterval) -> [Message] {
        let deadline = Date().addingTimeInterval(duration)
        var messages: [Message] = []
        while Date() < deadline {
            if let message = next(timeout: deadline.timeIntervalSinceNow) { messages.append(message) }
        }
        return messages
    }
}
#endif
