import WatchkeeperTestSupport
import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// NOTIFY_SOCKET and WATCHDOG_USEC read as sd_notify(3) and sd_watchdog_enabled(3) read
/// them: a message reaches a socket named by a path or an abstract name.
final class SystemdNotifierTests: XCTestCase {
    private func datagramSocket(bindingTo address: [UInt8]) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var socketAddress = sockaddr_un()
        socketAddress.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &socketAddress.sun_path) { $0.copyBytes(from: address) }
        let length = socklen_t(MemoryLayout.offset(of: \sockaddr_un.sun_path)! + address.count)
        let bound = withUnsafePointer(to: &socketAddress) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        XCTAssertEqual(bound, 0)
        return fd
    }

    private func receive(_ fd: Int32) -> String? {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 10_000) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4_096)
        let count = recv(fd, &buffer, buffer.count, 0)
        return count < 0 ? nil : String(decoding: buffer.prefix(count), as: UTF8.self)
    }

    func testAMessage_reachesASocketNamedByAPath() throws {
        let path = try makeScratchDirectory() + "/notify"
        let fd = datagramSocket(bindingTo: Array(path.utf8) + [0])
        defer { close(fd) }
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": path])
        XCTAssertTrue(notifier.send([("READY", "1"), ("STATUS", "watching 3 directories")]))
        XCTAssertEqual(receive(fd), "READY=1\nSTATUS=watching 3 directories")
    }

    func testAMessage_reachesAnAbstractSocket_namedWithAnAt() throws {
        let name = "wk-notify-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        // No NUL after an abstract name: the address length ends it, as systemd binds it.
        let fd = datagramSocket(bindingTo: [0] + Array(name.utf8))
        defer { close(fd) }
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": "@" + name])
        XCTAssertTrue(notifier.send([("WATCHDOG", "1")]))
        XCTAssertEqual(receive(fd), "WATCHDOG=1")
    }

    func testWithoutASocket_orWithARelativeOne_nothingIsSent_butTheStatusIsKept() throws {
        let none = SystemdNotifier(environment: [:])
        XCTAssertFalse(none.isConnected)
        XCTAssertFalse(none.send([("STATUS", "idle")]))
        XCTAssertEqual(none.status, "idle")
        XCTAssertFalse(SystemdNotifier(environment: ["NOTIFY_SOCKET": "relative/notify"]).send([("READY", "1")]))
    }

    func testWatchdogInterval_isWatchdogUsec_forThisProcessOnly() {
        let me = getpid()
        XCTAssertEqual(SystemdNotifier.watchdogInterval(microseconds: "20000000", pid: nil, ownPID: me), .seconds(20))
        XCTAssertEqual(SystemdNotifier.watchdogInterval(microseconds: "500000", pid: "\(me)", ownPID: me), .milliseconds(500))
        XCTAssertNil(SystemdNotifier.watchdogInterval(microseconds: "500000", pid: "\(me + 1)", ownPID: me), "another process's watchdog")
        XCTAssertNil(SystemdNotifier.watchdogInterval(microseconds: "500000", pid: "not a pid", ownPID: me))
        XCTAssertNil(SystemdNotifier.watchdogInterval(microseconds: nil, pid: "\(me)", ownPID: me))
        XCTAssertNil(SystemdNotifier.watchdogInterval(microseconds: "0", pid: nil, ownPID: me))
        XCTAssertNil(SystemdNotifier.watchdogInterval(microseconds: "\(UInt64.max)", pid: nil, ownPID: me), "infinity")
        XCTAssertNil(SystemdNotifier.watchdogInterval(microseconds: "20s", pid: nil, ownPID: me))
    }
}
