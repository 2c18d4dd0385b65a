#if canImport(Glibc)
import Glibc
#endif

/// The network jobs inherit from the daemon. The shipped unit gives them none
/// (PrivateNetwork=yes leaves only loopback; RestrictAddressFamilies=AF_UNIX refuses
/// Internet sockets): an administrator whose job uploads what arrives should learn that
/// from the daemon at start and in the dump, not from the job's first failure.
public struct JobNetwork: Sendable, Equatable {
    /// Interfaces of the daemon's network namespace other than loopback.
    public let interfaces: [String]
    public let internetSockets: Bool
    /// Why /proc/self/net/dev could not be read: the interfaces are then unknown, not absent.
    public let unreadable: String?

    public var reachable: Bool { unreadable == nil && !interfaces.isEmpty && internetSockets }

    /// Both read now: /proc/self/net/dev shows the namespace the daemon is in (ProtectProc
    /// does not hide it), and an AF_INET socket is refused with EAFNOSUPPORT under
    /// RestrictAddressFamilies.
    public static func probe() -> JobNetwork {
        var listing = ""
        var unreadable: String?
        do {
            listing = try readSmallFile("/proc/self/net/dev")
        } catch {
            unreadable = "\(error)"
        }
        let refused: Bool
        switch valueOrErrno({ socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }) {
        case .success(let socketFD):
            close(socketFD)
            refused = false
        case .failure(let error):
            refused = error == .addressFamilyNotSupported || error == .notPermitted
        }
        return JobNetwork(interfaces: interfaces(procNetDev: listing), internetSockets: !refused, unreadable: unreadable)
    }

    public init(interfaces: [String], internetSockets: Bool, unreadable: String? = nil) {
        self.interfaces = interfaces
        self.internetSockets = internetSockets
        self.unreadable = unreadable
    }

    /// /proc/net/dev: two header lines, then "  NAME: counters" per interface.
    static func interfaces(procNetDev: String) -> [String] {
        procNetDev.split(separator: "\n").dropFirst(2).compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let name = String(line[..<colon]).trimmingCharacters(in: " ")
            return name.isEmpty || name == "lo" ? nil : name
        }
    }

    /// For the dump and the start-up line.
    public var description: String {
        if reachable { return "the host's (\(interfaces.joined(separator: ", ")))" }
        var causes: [String] = []
        if let unreadable {
            causes.append("unknown: unable to read /proc/self/net/dev (\(unreadable))")
        } else if interfaces.isEmpty { causes.append("only loopback is present (PrivateNetwork=yes in the unit)") }
        if !internetSockets { causes.append("Internet sockets are refused (RestrictAddressFamilies= in the unit)") }
        return unreadable == nil ? "none: " + causes.joined(separator: " and ") : causes.joined(separator: "; ")
    }
}
