import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Debian's prometheus-node-exporter (`make deps` installs it), started by the test on a free
/// loopback port with the textfile collector alone, on one directory: the way a fleet
/// reads watchkeeper's metrics, scraped over loopback as Prometheus would.
final class NodeExporter {
    static let binary = "/usr/bin/prometheus-node-exporter"

    let port: UInt16
    private let process = Process()

    init(textfileDirectory: String, log: String) throws {
        guard access(Self.binary, X_OK) == 0 else {
            XCTFail("no \(Self.binary): install prometheus-node-exporter (make deps does)")
            throw XCTSkip("prometheus-node-exporter is not installed")
        }
        port = try Self.freeLoopbackPort()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = [
            "--collector.disable-defaults", "--collector.textfile",
            "--collector.textfile.directory=\(textfileDirectory)",
            "--web.listen-address=127.0.0.1:\(port)",
        ]
        FileManager.default.createFile(atPath: log, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        process.standardOutput = output
        process.standardError = output
        try process.run()
    }

    deinit {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }

    /// The /metrics body once node_exporter answers, within `timeout` seconds.
    func scrape(timeout: TimeInterval) -> String? {
        waitForValue(timeout, every: .milliseconds(50)) { Self.get("/metrics", port: port) }
    }

    /// A port the kernel just gave out and took back: free unless something takes it in the
    /// moment before node_exporter binds it.
    private static func freeLoopbackPort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(fd, address, length) == 0 && getsockname(fd, address, &length) == 0
            }
        }
        guard bound else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        return UInt16(bigEndian: address.sin_port)
    }

    /// HTTP/1.0 GET over a plain socket (no curl on the machine is assumed): the body of a
    /// 200 answer, nil otherwise.
    static func get(_ path: String, port: UInt16) -> String? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { return nil }
        let request = Array("GET \(path) HTTP/1.0\r\nHost: 127.0.0.1:\(port)\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == request.count else { return nil }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            response += buffer[0..<count]
        }
        let text = String(decoding: response, as: UTF8.self)
        guard text.hasPrefix("HTTP/1.") && text.split(separator: " ", maxSplits: 2).dropFirst().first == "200",
              let headerEnd = text.range(of: "\r\n\r\n") else { return nil }
        return String(text[headerEnd.upperBound...])
    }
}
