/// One etcd client URL from `[cluster] etcd`: `http://host:port` or `https://host:port`
/// (the port defaults to 2379, etcd's). Paths, users and queries are refused: the gateway
/// is always at the root.
public struct EtcdEndpoint: Sendable, Hashable, CustomStringConvertible {
    public let secure: Bool
    /// A host name, or an IPv4 or IPv6 literal (without brackets).
    public let host: String
    public let port: UInt16

    public init(secure: Bool, host: String, port: UInt16) {
        self.secure = secure
        self.host = host
        self.port = port
    }

    public var description: String {
        let shown = host.contains(":") ? "[\(host)]" : host
        return "\(secure ? "https" : "http")://\(shown):\(port)"
    }

    /// What the Host header carries.
    var hostHeader: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    public enum ParseError: Error, Equatable, CustomStringConvertible {
        case scheme, host, port, path

        public var description: String {
            switch self {
            case .scheme: return "an etcd endpoint starts with http:// or https://"
            case .host: return "the endpoint has no host"
            case .port: return "the endpoint's port is not a number from 1 to 65535"
            case .path: return "an etcd endpoint is a scheme, a host and a port, with no path, user or query"
            }
        }
    }

    public static func parse(_ text: String) throws(ParseError) -> EtcdEndpoint {
        let secure: Bool
        var rest: Substring
        if text.hasPrefix("https://") {
            secure = true
            rest = text.dropFirst(8)
        } else if text.hasPrefix("http://") {
            secure = false
            rest = text.dropFirst(7)
        } else {
            throw .scheme
        }
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.contains(where: { "/?#@".contains($0) }) else { throw .path }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw .host }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw .port }
                portText = after.dropFirst()
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty, !host.contains(where: { $0 == " " || $0 == "[" || $0 == "]" }) else { throw .host }
        var port: UInt16 = 2379
        if let portText {
            guard let value = UInt16(portText), value > 0 else { throw .port }
            port = value
        }
        return EtcdEndpoint(secure: secure, host: String(host), port: port)
    }
}
