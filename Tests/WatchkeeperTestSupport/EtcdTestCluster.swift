#if canImport(XCTest)
import Foundation
import WatchkeeperCore
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A real etcd cluster for a test: Debian's /usr/bin/etcd (3.4.23 in Debian 12), `memberCount`
/// members on free loopback ports, each with its own data directory and log in `directory`,
/// plain or with TLS and client certificates, optionally with users and roles. Members can be
/// killed, frozen and restarted; every member still running is killed when the cluster is
/// released, so no etcd outlives a failing test (and `setpriv --pdeathsig KILL` ends them if
/// the test runner itself dies).
///
/// Peer traffic is plain http on 127.0.0.1 even in TLS mode: only the client side is under test.
///
/// What etcd 3.4.23's JSON gateway (`--enable-grpc-gateway`, on every client URL) answers,
/// as recorded against this harness; int64 fields are JSON strings, bytes are base64, and
/// fields at their zero value are left out (a range that finds nothing has no `kvs` and no
/// `count`, a txn whose compare failed has no `succeeded`, a PUT event has no `type`):
///
///     POST /v3/kv/put      {"key":"Zm9v","value":"YmFy"}
///       {"header":{"cluster_id":"…","member_id":"…","revision":"2","raft_term":"2"}}
///     POST /v3/kv/range    {"key":"Zm9v"}     (range_end for a prefix)
///       {"header":{…},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2",
///        "version":"1","value":"YmFy"}],"count":"1"}          ("lease":"…" when it has one)
///     POST /v3/lease/grant {"TTL":10}
///       {"header":{…},"ID":"2703745380492355336","TTL":"10"}
///     POST /v3/kv/txn      {"compare":[{"target":"CREATE","key":"…","createRevision":"0"}],
///                           "success":[{"requestPut":{"key":"…","value":"…","lease":"<ID>"}}],
///                           "failure":[{"requestRange":{"key":"…"}}]}
///       {"header":{…},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"3"}}}]}
///       failed compare: {"header":{…},"responses":[{"response_range":{"header":{…},"kvs":[…],"count":"1"}}]}
///     POST /v3/lease/keepalive {"ID":"<ID>"}   (a stream: one JSON object per line)
///       {"result":{"header":{…},"ID":"…","TTL":"10"}}
///       an unknown or expired lease: HTTP 200 and {"result":{"header":{…},"ID":"…"}}, no TTL
///     POST /v3/watch {"create_request":{"key":"…","range_end":"…"}}   (a stream, one per line)
///       {"result":{"header":{…},"created":true}}
///       {"result":{"header":{…},"events":[{"kv":{…}}]}}            (a put: no "type")
///       {"result":{"header":{…},"events":[{"type":"DELETE","kv":{"key":"…","mod_revision":"6"}}]}}
///     errors: HTTP 400 {"error":"…","message":"…","code":3} (gRPC status codes); a GET is 405.
///     /v3beta/ answers too, /v3alpha/ is gone (404); /health gives {"health":"true"}.
public final class EtcdTestCluster {
    public static let etcdPath = "/usr/bin/etcd"
    public static let etcdctlPath = "/usr/bin/etcdctl"

    /// The certificates of a TLS cluster (ECDSA P-256, made with openssl, valid two days).
    public struct TLSFiles {
        public let directory: String
        /// The CA every member trusts for client certificates and signs its own with.
        public var caCertificate: String { directory + "/ca.crt" }
        /// CN=watchkeeper, signed by `caCertificate`.
        public var clientCertificate: String { directory + "/client.crt" }
        public var clientKey: String { directory + "/client.key" }
        /// A CA no member trusts, and a client certificate (CN=watchkeeper) signed by it.
        public var foreignCACertificate: String { directory + "/foreign-ca.crt" }
        public var foreignClientCertificate: String { directory + "/foreign-client.crt" }
        public var foreignClientKey: String { directory + "/foreign-client.key" }
        /// A member's server certificate: subjectAltName IP:127.0.0.1, DNS:localhost and every
        /// extra listen address; serverAuth and clientAuth (the gateway dials its own member
        /// with it).
        public func serverCertificate(member: Int) -> String { directory + "/member\(member).crt" }
        public func serverKey(member: Int) -> String { directory + "/member\(member).key" }
    }

    /// What the etcdctl and gateway helpers present to a TLS cluster.
    public enum ClientIdentity {
        /// The client certificate signed by the cluster's CA.
        case trusted
        /// The client certificate signed by the foreign CA.
        case foreign
        /// No client certificate (the server is still verified with the CA).
        case none
    }

    /// The users made by `enableAuth`.
    public struct Auth {
        public let user: String
        public let password: String
        /// The user's password alone, no newline, mode 0600.
        public let passwordFile: String
        /// The key prefix the user's role may read and write (and nothing else).
        public let prefix: String
        public let rootPassword: String
    }

    public let directory: String
    public let memberCount: Int
    public let tls: TLSFiles?
    /// Addresses every member listens on and advertises besides 127.0.0.1, with the same port
    /// (a NetworkPartition's hostAddress, for a daemon in another network namespace).
    public let extraListenAddresses: [String]
    public let heartbeatInterval: Duration
    public let electionTimeout: Duration
    public private(set) var auth: Auth?
    /// The cluster's --initial-cluster-token: unique, so that members of clusters other tests
    /// run at the same time can never join this one.
    public private(set) var token = ""
    private var clientPorts: [UInt16] = []
    private var peerPorts: [UInt16] = []
    private var pids: [pid_t?]
    private var frozen: Set<Int> = []

    /// Starts the cluster and returns once every member answers a linearizable read (etcdctl
    /// endpoint health), or throws after `startupTimeout` seconds (times testDeadlineScale).
    /// Skips the test when /usr/bin/etcd or etcdctl (or openssl, for TLS) is missing.
    ///
    /// Heartbeat 50 ms and election timeout 500 ms: a new leader ~0.7 s after the old one is
    /// killed (1.6-2.5 s with etcd's 100/1000), and no spurious election was seen with three
    /// busy loops on two cores. A slower machine may want more.
    public init(
        directory: String, members: Int = 3, tls: Bool = false, extraListenAddresses: [String] = [],
        heartbeatInterval: Duration = .milliseconds(50), electionTimeout: Duration = .milliseconds(500),
        startupTimeout: TimeInterval = 30
    ) throws {
        for tool in [Self.etcdPath, Self.etcdctlPath] + (tls ? ["/usr/bin/openssl"] : []) where access(tool, X_OK) != 0 {
            throw XCTSkip("no \(tool): apt-get install etcd-server etcd-client openssl (make deps does)")
        }
        precondition(members > 0, "a cluster has at least one member")
        self.directory = directory
        memberCount = members
        self.extraListenAddresses = extraListenAddresses
        self.heartbeatInterval = heartbeatInterval
        self.electionTimeout = electionTimeout
        self.tls = tls ? TLSFiles(directory: directory + "/tls") : nil
        pids = Array(repeating: nil, count: members)
        if let files = self.tls { try Self.makeCertificates(files, members: members, extraAddresses: extraListenAddresses) }
        try start(timeout: startupTimeout)
    }

    deinit {
        stopAll()
    }

    // MARK: Addresses

    public var scheme: String { tls == nil ? "http" : "https" }

    /// A member's client URL on `address` (127.0.0.1 unless one of extraListenAddresses).
    public func clientURL(member: Int, address: String = "127.0.0.1") -> String {
        "\(scheme)://\(address):\(clientPorts[member])"
    }

    /// Every member's client URL on 127.0.0.1, as a client would be configured with them.
    public var endpoints: [String] { endpoints(address: "127.0.0.1") }

    public func endpoints(address: String) -> [String] {
        (0..<memberCount).map { clientURL(member: $0, address: address) }
    }

    public func peerURL(member: Int) -> String { "http://127.0.0.1:\(peerPorts[member])" }
    public func name(member: Int) -> String { "member\(member)" }
    public func dataDirectory(member: Int) -> String { directory + "/member\(member).data" }
    public func logPath(member: Int) -> String { directory + "/member\(member).log" }

    /// A member's log (etcd's stderr) so far, every start of it.
    public func log(member: Int) -> String {
        (try? String(contentsOfFile: logPath(member: member), encoding: .utf8)) ?? ""
    }

    public func pid(member: Int) -> pid_t? { pids[member] }

    public func isRunning(member: Int) -> Bool {
        guard let pid = pids[member] else { return false }
        if reapIfEnded(pid) != nil {
            pids[member] = nil
            return false
        }
        return true
    }

    public var runningMembers: [Int] { (0..<memberCount).filter { isRunning(member: $0) } }

    // MARK: Faults

    /// SIGKILL, and the exit collected: what a crash or a power cut does to a member (its
    /// data directory stays; `restart` brings it back with it).
    public func kill(member: Int) {
        guard let pid = pids[member] else { return }
        Glibc.kill(pid, SIGKILL)
        Glibc.kill(pid, SIGCONT)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        pids[member] = nil
        frozen.remove(member)
    }

    /// SIGSTOP: a member that holds its connections open and answers nothing (a hung host),
    /// until `cont`.
    public func stop(member: Int) {
        guard let pid = pids[member] else { return }
        Glibc.kill(pid, SIGSTOP)
        frozen.insert(member)
    }

    public func cont(member: Int) {
        guard let pid = pids[member] else { return }
        Glibc.kill(pid, SIGCONT)
        frozen.remove(member)
    }

    /// Starts a killed member again on its data directory and ports (a running one is killed
    /// first); it rejoins the cluster from its WAL. With `waitUntilHealthy`, returns once
    /// every running member answers a linearizable read, which needs a quorum running.
    public func restart(member: Int, waitUntilHealthy: Bool = true, timeout: TimeInterval = 20) throws {
        kill(member: member)
        try launch(member: member)
        if waitUntilHealthy { try self.waitUntilHealthy(timeout: timeout) }
    }

    /// Kills every member (a frozen one too). Also on deinit.
    public func stopAll() {
        for member in 0..<memberCount { kill(member: member) }
    }

    /// The member that is leader now, as the running members report it; nil if none says so.
    public func leader(timeout: TimeInterval = 2) -> Int? {
        for member in runningMembers where !frozen.contains(member) {
            let status = etcdctl(["endpoint", "status", "-w", "simple", "--command-timeout=\(Int(timeout * 1000))ms"],
                                 timeout: timeout + 2, endpoints: [clientURL(member: member)])
            // "127.0.0.1:P, ID, version, db size, is leader, is learner, term, index, applied, errors"
            let fields = status.stdout.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            if status.succeeded, fields.count > 4, fields[4] == "true" { return member }
        }
        return nil
    }

    /// Waits until every running, unfrozen member answers `etcdctl endpoint health` (a
    /// linearizable get through raft, so a quorum must be up), or throws at the deadline
    /// with the members' last log lines.
    public func waitUntilHealthy(timeout: TimeInterval = 20) throws {
        let deadline = MonotonicInstantDeadline(seconds: timeout)
        var last = CommandResult(status: nil, stdout: "", stderr: "not asked yet")
        while true {
            for member in 0..<memberCount where pids[member] != nil && !isRunning(member: member) {
                throw HarnessError("unable to wait for etcd \(name(member: member)) to be healthy: it exited; its log ends:\n\(logTail(member: member))")
            }
            let members = runningMembers.filter { !frozen.contains($0) }
            guard !members.isEmpty else { throw HarnessError("unable to wait for etcd to be healthy: no member is running") }
            last = etcdctl(["endpoint", "health", "--dial-timeout=500ms", "--command-timeout=1s"],
                           timeout: 5, endpoints: members.map { clientURL(member: $0) })
            if last.succeeded { return }
            if deadline.hasPassed {
                throw HarnessError("unable to get a healthy etcd cluster within \(timeout) s: \(last)\n"
                    + members.map { "\(name(member: $0)) log ends:\n\(logTail(member: $0))" }.joined(separator: "\n"))
            }
            usleep(50_000)
        }
    }

    // MARK: Clients

    /// etcdctl (API v3) against `endpoints` (every member's loopback URL unless given), with
    /// the certificates of `identity` in TLS mode, and as root once auth is enabled unless
    /// `arguments` name a --user. Killed after `timeout` seconds (times testDeadlineScale); give
    /// `--command-timeout=2s` for a deadline of etcdctl's own.
    @discardableResult
    public func etcdctl(_ arguments: [String], timeout: TimeInterval = 10, endpoints: [String]? = nil,
                        identity: ClientIdentity = .trusted) -> CommandResult {
        var command = [Self.etcdctlPath, "--endpoints=" + (endpoints ?? self.endpoints).joined(separator: ",")]
        if let tls {
            command.append("--cacert=\(tls.caCertificate)")
            switch identity {
            case .trusted: command += ["--cert=\(tls.clientCertificate)", "--key=\(tls.clientKey)"]
            case .foreign: command += ["--cert=\(tls.foreignClientCertificate)", "--key=\(tls.foreignClientKey)"]
            case .none: break
            }
        }
        if let auth, !arguments.contains(where: { $0.hasPrefix("--user") }) {
            command.append("--user=root:\(auth.rootPassword)")
        }
        // Only ETCDCTL_API: an ETCDCTL_* variable of the runner's would change every call.
        return runCommand(command + arguments, environment: ["PATH": "/usr/bin:/bin", "ETCDCTL_API": "3"], timeout: timeout)
    }

    /// `key`'s value, or nil if there is none.
    public func get(_ key: String, timeout: TimeInterval = 10) throws -> String? {
        try pairs(["get", "-w", "json", "--", key], timeout: timeout).first?.value
    }

    public func put(_ key: String, _ value: String, timeout: TimeInterval = 10) throws {
        let result = etcdctl(["put", "--", key, value], timeout: timeout)
        guard result.succeeded else { throw HarnessError("unable to put \(key) in etcd: \(result)") }
    }

    /// Every key under `prefix` with its value, in key order.
    public func getPrefix(_ prefix: String, timeout: TimeInterval = 10) throws -> [(key: String, value: String)] {
        try pairs(["get", "--prefix", "-w", "json", "--", prefix], timeout: timeout)
    }

    private func pairs(_ arguments: [String], timeout: TimeInterval) throws -> [(key: String, value: String)] {
        struct Response: Decodable {
            struct Pair: Decodable {
                let key: String
                let value: String?
            }
            let kvs: [Pair]?
        }
        let result = etcdctl(arguments, timeout: timeout)
        guard result.succeeded else { throw HarnessError("unable to read \(arguments.last ?? "") from etcd: \(result)") }
        let response = try JSONDecoder().decode(Response.self, from: Data(result.stdout.utf8))
        return (response.kvs ?? []).map { pair in
            let decode = { (text: String?) in String(decoding: text.flatMap { Data(base64Encoded: $0) } ?? Data(), as: UTF8.self) }
            return (decode(pair.key), decode(pair.value))
        }
    }

    /// A POST of `json` to the JSON gateway of `member` (path such as "/v3/kv/range"), with
    /// curl: stdout is the body. Streams (/v3/watch, /v3/lease/keepalive) end at `timeout`, so
    /// their result is `timedOut` with what arrived in stdout.
    public func gateway(_ path: String, json: String, member: Int = 0, identity: ClientIdentity = .trusted,
                        timeout: TimeInterval = 5) -> CommandResult {
        var command = ["/usr/bin/curl", "-sS", "-N", "--data-binary", json]
        if let tls {
            command += ["--cacert", tls.caCertificate]
            switch identity {
            case .trusted: command += ["--cert", tls.clientCertificate, "--key", tls.clientKey]
            case .foreign: command += ["--cert", tls.foreignClientCertificate, "--key", tls.foreignClientKey]
            case .none: break
            }
        }
        return runCommand(command + [clientURL(member: member) + path], timeout: timeout)
    }

    /// Turns on etcd's authentication: a root user, and `user` with a role that may read and
    /// write keys under `prefix` only. From then on the helpers here act as root.
    ///
    /// etcdctl 3.4's `auth enable` creates the root role and grants it to root itself. In TLS
    /// mode, a client that presents a certificate but no user is taken to be the user named by
    /// its CN ("watchkeeper" here, a user this does not create).
    @discardableResult
    public func enableAuth(prefix: String, user: String = "wk", role: String = "wk") throws -> Auth {
        let made = Auth(user: user, password: Self.randomHex(12), passwordFile: directory + "/\(user).password",
                        prefix: prefix, rootPassword: Self.randomHex(12))
        let steps: [[String]] = [
            ["user", "add", "root:\(made.rootPassword)"],
            ["role", "add", role],
            ["role", "grant-permission", role, "--prefix=true", "readwrite", prefix],
            ["user", "add", "\(user):\(made.password)"],
            ["user", "grant-role", user, role],
            ["auth", "enable"],
        ]
        for step in steps {
            let result = etcdctl(step)
            guard result.succeeded else { throw HarnessError("unable to enable etcd auth at `etcdctl \(step.prefix(2).joined(separator: " "))`: \(result)") }
        }
        guard FileManager.default.createFile(atPath: made.passwordFile, contents: Data(made.password.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw HarnessError("unable to write \(made.passwordFile)")
        }
        auth = made
        return made
    }

    // MARK: Starting

    private func arguments(member: Int) -> [String] {
        let initialCluster = (0..<memberCount).map { "\(name(member: $0))=\(peerURL(member: $0))" }.joined(separator: ",")
        let clientURLs = (["127.0.0.1"] + extraListenAddresses).map { clientURL(member: member, address: $0) }.joined(separator: ",")
        var arguments = [
            Self.etcdPath,
            "--name=\(name(member: member))",
            "--data-dir=\(dataDirectory(member: member))",
            "--listen-client-urls=\(clientURLs)",
            "--advertise-client-urls=\(clientURLs)",
            "--listen-peer-urls=\(peerURL(member: member))",
            "--initial-advertise-peer-urls=\(peerURL(member: member))",
            "--initial-cluster=\(initialCluster)",
            // Ignored once the data directory has a WAL: a restarted member rejoins.
            "--initial-cluster-state=new",
            "--initial-cluster-token=\(token)",
            "--heartbeat-interval=\(heartbeatInterval.milliseconds)",
            "--election-timeout=\(electionTimeout.milliseconds)",
            // The default in 3.4, said so because the daemon's client is the gateway.
            "--enable-grpc-gateway=true",
            // A killed process loses nothing the kernel has (its page cache survives); only a
            // machine crash would, which no test makes. Saves fsync stalls on a shared disk.
            "--unsafe-no-fsync",
            // capnslog (3.4's default logger) writes to journald when it finds itself under
            // systemd; the test wants the member's log file.
            "--log-outputs=stderr",
        ]
        if let tls {
            arguments += [
                "--client-cert-auth", "--trusted-ca-file=\(tls.caCertificate)",
                "--cert-file=\(tls.serverCertificate(member: member))", "--key-file=\(tls.serverKey(member: member))",
            ]
        }
        return arguments
    }

    private func launch(member: Int) throws {
        var command = arguments(member: member)
        // If the test runner dies (a crash skips every deinit), so does the member.
        if access("/usr/bin/setpriv", X_OK) == 0 { command = ["/usr/bin/setpriv", "--pdeathsig", "KILL", "--"] + command }
        pids[member] = try spawnChild(command, environment: ["PATH": "/usr/bin:/bin"],
                                      stdout: .appending(logPath(member: member)), stderr: .appending(logPath(member: member)))
    }

    private enum LaunchOutcome { case serving, portTaken, exited, timedOut }

    /// Members one at a time, each once its peer port serves HTTP. Started all at once, each
    /// member spends 1 s per peer in its bootstrap check (GET /members to a peer that has bound
    /// its port but does not serve it yet, until etcd's 1 s bootstrap timeout): a 3-member
    /// cluster took 2.2-2.8 s to be healthy, and 0.15-0.5 s started this way.
    /// Ports come from the kernel (bind to port 0) and can be taken again by anyone before
    /// etcd binds them, so a member that fails with EADDRINUSE starts the cluster over on
    /// new ports.
    private func start(timeout: TimeInterval) throws {
        let deadline = MonotonicInstantDeadline(seconds: timeout)
        var attempts: [String] = []
        for _ in 1...5 {
            token = "watchkeeper-test-\(getpid())-\(Self.randomHex(8))"
            let ports = try Self.freeLoopbackPorts(2 * memberCount)
            clientPorts = Array(ports.prefix(memberCount))
            peerPorts = Array(ports.suffix(memberCount))
            for member in 0..<memberCount {
                try? removeTree(dataDirectory(member: member))
                unlink(logPath(member: member))
            }
            var outcome = LaunchOutcome.serving
            for member in 0..<memberCount where outcome == .serving {
                try launch(member: member)
                outcome = waitUntilPeerServes(member: member, deadline: deadline)
                if outcome != .serving { attempts.append("\(name(member: member)) \(outcome): \(logTail(member: member))") }
            }
            switch outcome {
            case .serving:
                try waitUntilHealthy(timeout: max(1, deadline.remainingSeconds / testDeadlineScale))
                return
            case .portTaken:
                stopAll()
                continue
            case .exited, .timedOut:
                stopAll()
                throw HarnessError("unable to start etcd: \(attempts.last ?? "")")
            }
        }
        throw HarnessError("unable to start etcd on free ports in 5 attempts:\n" + attempts.joined(separator: "\n"))
    }

    private func waitUntilPeerServes(member: Int, deadline: MonotonicInstantDeadline) -> LaunchOutcome {
        while true {
            if !isRunning(member: member) {
                return log(member: member).contains("address already in use") ? .portTaken : .exited
            }
            if Self.answersHTTP(port: peerPorts[member]) { return .serving }
            if deadline.hasPassed { return .timedOut }
            usleep(10_000)
        }
    }

    private func logTail(member: Int) -> String {
        log(member: member).split(separator: "\n").suffix(15).joined(separator: "\n")
    }

    /// Whether something on 127.0.0.1:`port` answers an HTTP request within 300 ms.
    private static func answersHTTP(port: UInt16) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { return false }
        defer { close(socket) }
        var limit = timeval(tv_sec: 0, tv_usec: 300_000)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { return false }
        let request = Array("GET /version HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard send(socket, request, request.count, Int32(MSG_NOSIGNAL)) == request.count else { return false }
        var answer = [UInt8](repeating: 0, count: 5)
        return recv(socket, &answer, 5, Int32(MSG_WAITALL)) == 5 && answer == Array("HTTP/".utf8)
    }

    /// `count` distinct ports the kernel gave out on 127.0.0.1, all held until all are chosen.
    private static func freeLoopbackPorts(_ count: Int) throws -> [UInt16] {
        var sockets: [Int32] = []
        defer { sockets.forEach { close($0) } }
        var ports: [UInt16] = []
        for _ in 0..<count {
            let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard socket >= 0 else { throw HarnessError("unable to create a socket: \(String(cString: strerror(errno)))") }
            sockets.append(socket)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
            }
            guard bound else { throw HarnessError("unable to bind a loopback port: \(String(cString: strerror(errno)))") }
            ports.append(UInt16(bigEndian: address.sin_port))
        }
        return ports
    }

    static func randomHex(_ bytes: Int) -> String {
        (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0 ... .max)) }.joined()
    }

    // MARK: Certificates

    private static func makeCertificates(_ files: TLSFiles, members: Int, extraAddresses: [String]) throws {
        try FileManager.default.createDirectory(atPath: files.directory, withIntermediateDirectories: true)
        let newKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
        func openssl(_ arguments: [String]) throws {
            let result = runCommand(["/usr/bin/openssl", "req", "-x509"] + newKey + arguments, timeout: 20)
            guard result.succeeded else { throw HarnessError("unable to make a test certificate with openssl: \(result)") }
        }
        func authority(_ certificate: String, _ key: String, _ name: String) throws {
            try openssl(["-keyout", key, "-out", certificate, "-subj", "/CN=\(name)",
                         "-addext", "basicConstraints=critical,CA:true", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        }
        func leaf(_ certificate: String, _ key: String, _ name: String, signedBy ca: (String, String), _ extensions: [String]) throws {
            try openssl(["-keyout", key, "-out", certificate, "-subj", "/CN=\(name)", "-CA", ca.0, "-CAkey", ca.1,
                         "-addext", "basicConstraints=critical,CA:false", "-addext", "keyUsage=critical,digitalSignature,keyEncipherment"]
                        + extensions.flatMap { ["-addext", $0] })
        }
        let ca = (files.caCertificate, files.directory + "/ca.key")
        let foreign = (files.foreignCACertificate, files.directory + "/foreign-ca.key")
        try authority(ca.0, ca.1, "watchkeeper test CA")
        try authority(foreign.0, foreign.1, "foreign test CA")
        let names = (["IP:127.0.0.1", "DNS:localhost"] + extraAddresses.map { "IP:\($0)" }).joined(separator: ",")
        for member in 0..<members {
            try leaf(files.serverCertificate(member: member), files.serverKey(member: member), "member\(member)", signedBy: ca,
                     ["subjectAltName=\(names)", "extendedKeyUsage=serverAuth,clientAuth"])
        }
        try leaf(files.clientCertificate, files.clientKey, "watchkeeper", signedBy: ca, ["extendedKeyUsage=clientAuth"])
        try leaf(files.foreignClientCertificate, files.foreignClientKey, "watchkeeper", signedBy: foreign, ["extendedKeyUsage=clientAuth"])
    }
}

/// A deadline `seconds` (times testDeadlineScale) from now on the monotonic clock.
struct MonotonicInstantDeadline {
    let instant: MonotonicInstant

    init(seconds: TimeInterval) {
        instant = MonotonicInstant.now + .seconds(seconds * testDeadlineScale)
    }

    var hasPassed: Bool { MonotonicInstant.now >= instant }
    var remainingSeconds: TimeInterval {
        let (seconds, attoseconds) = (instant - MonotonicInstant.now).components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

extension Duration {
    fileprivate var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
#endif
