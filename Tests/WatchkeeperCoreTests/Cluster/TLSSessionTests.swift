import Foundation
import WatchkeeperTestSupport
import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// TLS against a real server: `openssl s_server` with certificates made by `openssl` for
/// each test (a CA, a server certificate for IP:127.0.0.1 and DNS:localhost, a client
/// certificate, and the same from a second CA nobody trusts). The client side is the one
/// the etcd client uses: a non-blocking socket, driven by readiness (poll here, dispatch
/// sources there), every wait bounded by a deadline.
final class TLSSessionTests: ScratchDirectoryTestCase {
    private var server: Process?
    private var sockets: [Int32] = []

    override func tearDownWithError() throws {
        if let server, server.isRunning {
            server.terminate()
            server.waitUntilExit()
        }
        sockets.forEach { close($0) }
        try super.tearDownWithError()
    }

    // MARK: exchanges

    func testAnExchangeWithAClientCertificateSucceeds() throws {
        try makeCertificates()
        let port = try startServer(requiringClientCertificate: true)
        let context = try TLSContext.make(caFile: path("ca.pem"), certFile: path("client.pem"), keyFile: path("client.key"))
        let response = try exchange(context: context, port: port, serverName: "127.0.0.1")
        XCTAssertTrue(response.hasPrefix("HTTP/1.0 200 ok"), response)
    }

    func testAHostNameIsSentAndMatchedAgainstTheCertificatesDNSName() throws {
        try makeCertificates()
        let port = try startServer(requiringClientCertificate: false, extra: ["-servername", "localhost", "-servername_fatal", "-cert2", path("server.pem"), "-key2", path("server.key")])
        let context = try TLSContext.make(caFile: path("ca.pem"), certFile: nil, keyFile: nil)
        let response = try exchange(context: context, port: port, serverName: "localhost")
        XCTAssertTrue(response.hasPrefix("HTTP/1.0 200 ok"), response)
    }

    func testAServerCertificateFromAnotherCAFailsVerification() throws {
        try makeCertificates()
        let port = try startServer(requiringClientCertificate: false, certificate: "other-server")
        let context = try TLSContext.make(caFile: path("ca.pem"), certFile: path("client.pem"), keyFile: path("client.key"))
        let error = try failure(context: context, port: port, serverName: "127.0.0.1")
        XCTAssertEqual(error.description, """
            unable to complete the TLS handshake with 127.0.0.1: certificate verify failed: \
            unable to get local issuer certificate
            """)
    }

    func testAHostNameTheCertificateDoesNotNameFailsVerification() throws {
        try makeCertificates()
        let port = try startServer(requiringClientCertificate: false)
        let context = try TLSContext.make(caFile: path("ca.pem"), certFile: nil, keyFile: nil)
        let error = try failure(context: context, port: port, serverName: "etcd.example")
        XCTAssertEqual(error.description, """
            unable to complete the TLS handshake with etcd.example: certificate verify failed: \
            hostname mismatch (the certificate does not name the server)
            """)
    }

    func testAnAddressTheCertificateDoesNotNameFailsVerification() throws {
        try makeCertificates()
        let port = try startServer(requiringClientCertificate: false)
        let context = try TLSContext.make(caFile: path("ca.pem"), certFile: nil, keyFile: nil)
        let error = try failure(context: context, port: port, serverName: "10.0.0.5")
        XCTAssertEqual(error.description, """
            unable to complete the TLS handshake with 10.0.0.5: certificate verify failed: \
            IP address mismatch (the certificate does not name the server)
            """)
    }

    /// Under TLS 1.3 our handshake completes before the server has judged our (missing)
    /// certificate: its alert is what the first read finds.
    func testAServerRequiringAClientCertificateRefusesNoneWithItsAlert() throws {
        try makeCertificates()
        let port = try startServer(requiringClientCertificate: true)
        let context = try TLSContext.make(caFile: path("ca.pem"), certFile: nil, keyFile: nil)
        let error = try failure(context: context, port: port, serverName: "127.0.0.1")
        XCTAssertEqual(error.description, "unable to read from 127.0.0.1: tlsv13 alert certificate required")
    }

    func testAServerRefusesAClientCertificateFromAnotherCAWithItsAlert() throws {
        try makeCertificates()
        let port = try startServer(requiringClientCertificate: true)
        let context = try TLSContext.make(caFile: path("ca.pem"), certFile: path("other-client.pem"), keyFile: path("other-client.key"))
        let error = try failure(context: context, port: port, serverName: "127.0.0.1")
        XCTAssertEqual(error.description, "unable to read from 127.0.0.1: tlsv1 alert unknown ca")
    }

    /// When the server's refusal and its close arrive before our first write, a write
    /// fails at the socket (ECONNRESET, then EPIPE); the alert waiting unread is the reason.
    /// SIGPIPE is at its default here, death: the write that meets the closed socket
    /// raises it, and the session must take it back (the daemon ignores SIGPIPE, but the
    /// session does not count on that).
    func testAWriteAfterTheServerRefusedUsGivesItsAlert() throws {
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }
        try makeCertificates()
        let port = try startServer(requiringClientCertificate: true)
        let context = try TLSContext.make(caFile: path("ca.pem"), certFile: nil, keyFile: nil)
        deadline = MonotonicInstant.now + .seconds(10 * testDeadlineScale)
        let fd = try connectedSocket(port: port)
        let session = try TLSSession(context: context, fd: fd, serverName: "127.0.0.1")
        XCTAssertEqual(try drive(fd) { () throws(TLSError) in try session.handshake() }, .done(0))
        // POLLRDHUP: the server's FIN, after its alert. s_server only half-closes; once it
        // has exited, the socket is closed as etcd's would be, and our data meets a reset.
        try wait(fd, for: Int16(0x2000))
        server?.terminate()
        server?.waitUntilExit()
        let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 4096)
        var refusal: TLSError?
        while refusal == nil {
            do {
                _ = try chunk.withUnsafeBytes { bytes in try drive(fd) { () throws(TLSError) in try session.write(bytes) } }
            } catch let error as TLSError {
                refusal = error
            }
        }
        XCTAssertEqual(refusal?.description, "unable to write to 127.0.0.1: tlsv13 alert certificate required")
    }

    /// Under TLS 1.2 the server refuses within the handshake.
    func testATLS12ServerRefusesAMissingClientCertificateWithinTheHandshake() throws {
        try makeCertificates()
        let port = try startServer(requiringClientCertificate: true, extra: ["-tls1_2"])
        let context = try TLSContext.make(caFile: path("ca.pem"), certFile: nil, keyFile: nil)
        let error = try failure(context: context, port: port, serverName: "127.0.0.1")
        XCTAssertEqual(error.description, "unable to complete the TLS handshake with 127.0.0.1: sslv3 alert handshake failure")
    }

    // MARK: contexts

    func testAMissingFileIsNamedWithTheReason() throws {
        try makeCertificates()
        let missing = path("missing.pem")
        XCTAssertEqual(contextError(caFile: missing, certFile: nil, keyFile: nil),
                       "unable to load CA certificates \(missing): No such file or directory")
        XCTAssertEqual(contextError(caFile: path("ca.pem"), certFile: missing, keyFile: path("client.key")),
                       "unable to load client certificate \(missing): No such file or directory")
        XCTAssertEqual(contextError(caFile: path("ca.pem"), certFile: path("client.pem"), keyFile: missing),
                       "unable to load client key \(missing): No such file or directory")
    }

    /// The tests run as root, for whom no mode makes a file unreadable: a directory and a
    /// file that is not PEM stand in.
    func testAnUnreadableFileIsNamedWithTheReason() throws {
        try makeCertificates()
        let garbage = path("garbage.pem")
        try "not a certificate\n".write(toFile: garbage, atomically: true, encoding: .utf8)
        XCTAssertEqual(contextError(caFile: garbage, certFile: nil, keyFile: nil),
                       "unable to load CA certificates \(garbage): no certificate or crl found")
        XCTAssertEqual(contextError(caFile: path("ca.pem"), certFile: garbage, keyFile: path("client.key")),
                       "unable to load client certificate \(garbage): no start line")
        XCTAssertEqual(contextError(caFile: path("ca.pem"), certFile: path("client.pem"), keyFile: garbage),
                       "unable to load client key \(garbage): unsupported (No supported data to decode. Input type: PEM)")
        XCTAssertEqual(contextError(caFile: directory, certFile: nil, keyFile: nil),
                       "unable to load CA certificates \(directory): Is a directory")
    }

    func testAKeyThatIsNotTheCertificatesIsRefusedNamingBoth() throws {
        try makeCertificates()
        XCTAssertEqual(contextError(caFile: path("ca.pem"), certFile: path("client.pem"), keyFile: path("server.key")),
                       "unable to use client key \(path("server.key")) with client certificate \(path("client.pem")): key values mismatch")
    }

    func testACertificateWithoutAKeyIsRefused() {
        XCTAssertEqual(contextError(caFile: nil, certFile: path("client.pem"), keyFile: nil),
                       "unable to use a client certificate: a certificate is given without its key")
    }

    func testTheSystemsCAsAreUsedWithoutACAFile() throws {
        try makeCertificates()
        let port = try startServer(requiringClientCertificate: false)
        let context = try TLSContext.make(caFile: nil, certFile: nil, keyFile: nil)
        let error = try failure(context: context, port: port, serverName: "127.0.0.1")
        XCTAssertTrue(error.description.contains("certificate verify failed"), error.description)
    }

    // MARK: certificates and the server

    private func path(_ name: String) -> String { directory + "/" + name }

    private func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let log = path("openssl.log")
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        defer { try? output.close() }
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw SetupFailure("openssl \(arguments.joined(separator: " ")) failed:\n\(text)")
        }
    }

    private static let ecKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    private func makeAuthority(_ name: String) throws {
        try openssl(["req", "-x509"] + Self.ecKey + ["-keyout", "\(name).key", "-out", "\(name).pem", "-subj", "/CN=\(name)", "-days", "2"])
    }

    private func makeCertificate(_ name: String, signedBy authority: String, extensions: String) throws {
        try openssl(["req", "-new"] + Self.ecKey + ["-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=\(name)"])
        try extensions.write(toFile: path("\(name).ext"), atomically: true, encoding: .utf8)
        try openssl(["x509", "-req", "-in", "\(name).csr", "-CA", "\(authority).pem", "-CAkey", "\(authority).key",
                     "-CAcreateserial", "-out", "\(name).pem", "-days", "2", "-extfile", "\(name).ext"])
    }

    private func makeCertificates() throws {
        let server = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
        let client = "extendedKeyUsage=clientAuth\n"
        for (authority, prefix) in [("ca", ""), ("other-ca", "other-")] {
            try makeAuthority(authority)
            try makeCertificate(prefix + "server", signedBy: authority, extensions: server)
            try makeCertificate(prefix + "client", signedBy: authority, extensions: client)
        }
    }

    /// A port nobody listens on now; s_server takes it a moment later.
    private func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(fd) }
        var address = loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw SetupFailure("unable to find a free port: \(String(cString: strerror(errno)))") }
        return UInt16(bigEndian: address.sin_port)
    }

    private func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    /// s_server answering `GET /` with its status page (-www); `-Verify 1` makes a client
    /// certificate required, `-verify 1` only asks for one, and `-verify_return_error` makes
    /// it refuse one that does not verify (without it s_server only logs the failure).
    private func startServer(requiringClientCertificate: Bool, certificate: String = "server", extra: [String] = []) throws -> UInt16 {
        let port = try freePort()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = ["s_server", "-accept", "127.0.0.1:\(port)", "-www", "-naccept", "1",
                             requiringClientCertificate ? "-Verify" : "-verify", "1", "-verify_return_error", "-CAfile", path("ca.pem"),
                             "-cert", path("\(certificate).pem"), "-key", path("\(certificate).key")] + extra
        let log = path("s_server.log")
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        defer { try? output.close() }
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        server = process
        let listening = waitFor(10) { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("ACCEPT") }
        guard listening else {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw SetupFailure("s_server did not start listening on port \(port):\n\(text)")
        }
        return port
    }

    // MARK: the client side

    private var deadline = MonotonicInstant.now

    /// A non-blocking socket connected to 127.0.0.1:`port`.
    private func connectedSocket(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SetupFailure("unable to create a socket: \(String(cString: strerror(errno)))") }
        sockets.append(fd)
        var address = loopback(port: port)
        let started = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if started != 0 && errno != EINPROGRESS {
            throw SetupFailure("unable to connect to port \(port): \(String(cString: strerror(errno)))")
        }
        try wait(fd, for: Int16(POLLOUT))
        var failure: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &length)
        guard failure == 0 else { throw SetupFailure("unable to connect to port \(port): \(String(cString: strerror(failure)))") }
        return fd
    }

    /// Until `fd` is ready for `events` or the test's deadline passes (then it throws).
    private func wait(_ fd: Int32, for events: Int16) throws {
        while true {
            let now = MonotonicInstant.now
            guard now < deadline else { throw SetupFailure("the deadline passed waiting for the socket") }
            var entry = pollfd(fd: fd, events: events, revents: 0)
            let milliseconds = Int32(clamping: (deadline.nanoseconds - now.nanoseconds) / 1_000_000 + 1)
            if poll(&entry, 1, milliseconds) > 0 { return }
        }
    }

    /// Calls `step` until it neither wants to read nor to write.
    private func drive(_ fd: Int32, _ step: () throws(TLSError) -> TLSSession.Progress) throws -> TLSSession.Progress {
        while true {
            switch try step() {
            case .wantRead: try wait(fd, for: Int16(POLLIN))
            case .wantWrite: try wait(fd, for: Int16(POLLOUT))
            case let progress: return progress
            }
        }
    }

    /// Handshake, `GET /`, and everything the server sends until it closes the session.
    private func exchange(context: TLSContext, port: UInt16, serverName: String) throws -> String {
        deadline = MonotonicInstant.now + .seconds(10 * testDeadlineScale)
        let fd = try connectedSocket(port: port)
        let session = try TLSSession(context: context, fd: fd, serverName: serverName)
        let handshake = try drive(fd) { () throws(TLSError) in try session.handshake() }
        XCTAssertEqual(handshake, .done(0))
        let request = Array("GET / HTTP/1.0\r\n\r\n".utf8)
        var sent = 0
        while sent < request.count {
            let progress = try request.withUnsafeBytes { bytes in
                try drive(fd) { () throws(TLSError) in try session.write(UnsafeRawBufferPointer(rebasing: bytes[sent...])) }
            }
            guard case .done(let count) = progress else { throw SetupFailure("write ended with \(progress)") }
            sent += count
        }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let progress = try buffer.withUnsafeMutableBytes { bytes in
                try drive(fd) { () throws(TLSError) in try session.read(into: bytes) }
            }
            guard case .done(let count) = progress else { break }
            response += buffer[..<count]
        }
        return String(decoding: response, as: UTF8.self)
    }

    /// The TLSError an exchange ends with; a failure if it succeeds.
    private func failure(context: TLSContext, port: UInt16, serverName: String,
                         file: StaticString = #filePath, line: UInt = #line) throws -> TLSError {
        do {
            let response = try exchange(context: context, port: port, serverName: serverName)
            XCTFail("the exchange succeeded: \(response.prefix(100))", file: file, line: line)
            return TLSError("")
        } catch let error as TLSError {
            return error
        }
    }

    private func contextError(caFile: String?, certFile: String?, keyFile: String?) -> String? {
        do {
            _ = try TLSContext.make(caFile: caFile, certFile: certFile, keyFile: keyFile)
            return nil
        } catch {
            return error.description
        }
    }
}

/// What kept a test from reaching the behaviour it tests: a tool, the server, the deadline.
private struct SetupFailure: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}
