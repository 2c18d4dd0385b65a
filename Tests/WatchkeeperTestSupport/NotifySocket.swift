#if canImport(XCTest)
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A real sd_notify endpoint: the AF_UNIX datagram socket systemd would create,
/// bound to a path passed to the daemon as NOTIFY_SOCKET.
///
/// Like systemd, it reads every datagram as it arrives (on a thread of its own): a datagram
/// socket queues only net.unix.max_dgram_qlen (10) messages, and the daemon's sd_notify
/// blocks once that is full, so a reader that waits to be asked would stall the daemon.
public final class NotifySocket {
    public struct Message {
        public let fields: [String: String]
        public let receivedAt: Date
        public subscript(key: String) -> String? { fields[key] }
    }

    public let path: String
    public private(set) var received: [Message] = []
    private let inbox: Inbox

    /// What the reader thread shares with the socket's owner. The thread keeps it alive and
    /// closes the fd when it ends, after the owner has gone and said stop.
    private final class Inbox: @unchecked Sendable {
        let fd: Int32
        let condition = NSCondition()
        var arrived: [Message] = []
        var stopping = false

        init(fd: Int32) { self.fd = fd }

        func readUntilStopped() {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            defer { close(fd) }
            while true {
                condition.lock()
                let done = stopping
                condition.unlock()
                if done { return }
                var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 100) > 0 else { continue }
                let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                guard count > 0 else { continue }
                var fields: [String: String] = [:]
                for line in String(decoding: buffer[0..<count], as: UTF8.self).split(separator: "\n") {
                    if let equals = line.firstIndex(of: "=") {
                        fields[String(line[..<equals])] = String(line[line.index(after: equals)...])
                    }
                }
                condition.lock()
                arrived.append(Message(fields: fields, receivedAt: Date()))
                condition.broadcast()
                condition.unlock()
            }
        }
    }

    public init() throws {
        let path = "/tmp/wk-notify-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        self.path = path
        unlink(path)
        let inbox = Inbox(fd: try boundDatagramSocket(path))
        self.inbox = inbox
        Thread { inbox.readUntilStopped() }.start()
    }

    deinit {
        inbox.condition.lock()
        inbox.stopping = true
        inbox.condition.unlock()
        unlink(path)
    }

    /// The next datagram, or nil after `timeout`.
    public func next(timeout: TimeInterval) -> Message? {
        let deadline = Date().addingTimeInterval(max(0, timeout))
        inbox.condition.lock()
        defer { inbox.condition.unlock() }
        while inbox.arrived.isEmpty {
            if !inbox.condition.wait(until: deadline) && inbox.arrived.isEmpty { return nil }
        }
        let message = inbox.arrived.removeFirst()
        received.append(message)
        return message
    }

    /// Reads datagrams until one satisfies `predicate`.
    /// Up to `timeout` seconds times `testDeadlineScale`.
    public func waitFor(timeout: TimeInterval, _ predicate: (Message) -> Bool) -> Message? {
        let deadline = Date().addingTimeInterval(timeout * testDeadlineScale)
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
/// A Unix datagram socket bound at `path` (CLOEXEC): the notify socket, or a journal
/// socket a test binds and never reads.
public func boundDatagramSocket(_ path: String) throws -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw NSError(domain: "socket", code: Int(errno)) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { buffer in
        for (index, byte) in path.utf8.enumerated() { buffer[index] = byte }
    }
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard bound == 0 else {
        let code = errno
        close(fd)
        throw NSError(domain: "bind", code: Int(code))
    }
    return fd
}
#endif
