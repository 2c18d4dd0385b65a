#if canImport(Glibc)
import Glibc
#endif

/// The `[cluster]` table: the etcd cluster this host coordinates through, and who this
/// host is in it (docs/fleet.md). Absent: nothing of the feature is loaded or started.
public struct ClusterSettings: Equatable, Sendable {
    public var endpoints: [EtcdEndpoint]
    /// This host's member name: what other hosts see as where a fire ran.
    public var name: String
    /// Every key the daemon writes starts with this (no trailing slash).
    public var prefix: String = "/watchkeeper/default"
    public var leaseTTL: Duration = .seconds(10)
    public var caFile: String?
    public var certFile: String?
    public var keyFile: String?
    public var username: String?
    public var passwordFile: String?
    /// Read from `password_file` at load: never in the dump, the logs or the metrics.
    public var password: String?

    public init(endpoints: [EtcdEndpoint], name: String) {
        self.endpoints = endpoints
        self.name = name
    }

    /// What the dump and `status` may show: everything but the password.
    public var describedFields: [DumpField] {
        var fields = [DumpField("etcd", .array(endpoints.map { .string($0.description) })), DumpField("name", .string(name)),
                      DumpField("prefix", .string(prefix)), DumpField("lease_ttl", .string(leaseTTL.compactDescription))]
        if let caFile { fields.append(DumpField("ca_file", .string(caFile))) }
        if let certFile { fields.append(DumpField("cert_file", .string(certFile))) }
        if let keyFile { fields.append(DumpField("key_file", .string(keyFile))) }
        if let username { fields.append(DumpField("username", .string(username))) }
        if let passwordFile { fields.append(DumpField("password_file", .string(passwordFile))) }
        return fields
    }

    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "localhost" : name
    }

    /// Names go into etcd keys and values and into other hosts' journals: letters, digits,
    /// '.', '_' and '-', like task names.
    static func isValidName(_ name: String) -> Bool { isValidEntryName(name) }

    static func read(_ reader: inout TableReader) -> ClusterSettings? {
        let context = reader.context
        var endpoints: [EtcdEndpoint] = []
        if let list = reader.stringArray("etcd") {
            for text in list {
                do {
                    endpoints.append(try EtcdEndpoint.parse(text))
                } catch {
                    context.error(at: reader.valuePosition("etcd"), "\(reader.dotted("etcd")): \"\(text)\": \(error)")
                }
            }
        } else if reader.table["etcd"] == nil {
            context.error(at: reader.headerPosition, "[cluster] needs etcd = [\"http://10.0.0.1:2379\", ...]: the client URLs of the etcd cluster")
        }
        var name = hostName()
        if let given = reader.string("name") {
            if isValidName(given) {
                name = given
            } else {
                context.error(at: reader.valuePosition("name"), "\(reader.dotted("name")) = \"\(given)\": use letters, digits, '.', '_' and '-', starting with a letter or digit (64 at most)")
            }
        } else if !isValidName(name) {
            context.error(at: reader.headerPosition, "the host name \"\(name)\" cannot be a member name: set [cluster] name")
        }
        var settings = ClusterSettings(endpoints: endpoints, name: name)
        if let prefix = reader.string("prefix") {
            if !prefix.hasPrefix("/") || prefix.hasSuffix("/") || prefix.contains(utf8: "//") || prefix.utf8.count > 200
                || prefix.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7f }) {
                context.error(at: reader.valuePosition("prefix"), "\(reader.dotted("prefix")) = \"\(prefix)\" must start with '/', not end with one, and hold no '//', spaces or control characters")
            } else {
                settings.prefix = prefix
            }
        }
        // etcd grants at least its own minimum (1.5 s with default timings); under 3 s a
        // renewal could not be retried before the lease expires.
        if let ttl = reader.duration("lease_ttl", range: .seconds(3) ... .seconds(3_600)) { settings.leaseTTL = ttl }
        settings.caFile = pemFile(&reader, "ca_file", holding: "CERTIFICATE")
        settings.certFile = pemFile(&reader, "cert_file", holding: "CERTIFICATE")
        settings.keyFile = pemFile(&reader, "key_file", holding: "PRIVATE KEY")
        if (reader.table["cert_file"] == nil) != (reader.table["key_file"] == nil) {
            context.error(at: reader.valuePosition(reader.table["cert_file"] == nil ? "key_file" : "cert_file"),
                          "cert_file and key_file go together: the client certificate and its private key")
        }
        let secure = endpoints.contains { $0.secure }
        if !secure && !endpoints.isEmpty, let key = ["ca_file", "cert_file", "key_file"].first(where: { reader.table[$0] != nil }) {
            context.error(at: reader.valuePosition(key), "\(reader.dotted(key)) is set but no etcd endpoint is https://: use https:// endpoints, or remove it")
        }
        settings.username = reader.string("username")
        if let path = readableFile(&reader, "password_file") {
            settings.passwordFile = path
            if let text = try? readSmallFile(path) {
                var password = text
                while password.hasSuffix("\n") || password.hasSuffix("\r") { password.removeLast() }
                if password.isEmpty {
                    context.error(at: reader.valuePosition("password_file"), "\(reader.dotted("password_file")) = \"\(path)\" is empty")
                }
                settings.password = password
            }
        }
        if (settings.username == nil) != (reader.table["password_file"] == nil) {
            context.error(at: reader.valuePosition(settings.username == nil ? "password_file" : "username"),
                          "username and password_file go together: etcd's user and the file holding its password")
        }
        return settings
    }

    /// A certificate or key file as OpenSSL will read it at the first https:// call: a
    /// regular file holding a PEM block of `label` ("CERTIFICATE", "PRIVATE KEY", which also
    /// matches "RSA PRIVATE KEY" and "EC PRIVATE KEY"). A directory, /dev/null or a DER file
    /// would pass a read check and then hold every fleet fire.
    private static func pemFile(_ reader: inout TableReader, _ key: String, holding label: String) -> String? {
        guard let path = readableFile(&reader, key) else { return nil }
        var info = stat()
        let what: String
        if stat(path, &info) != 0 || (info.st_mode & S_IFMT) != S_IFREG {
            what = (info.st_mode & S_IFMT) == S_IFDIR ? "is a directory" : "is not a regular file"
        } else if info.st_size > 1_048_576 {
            what = "is over 1 MiB"
        } else if let text = try? readSmallFile(path), text.contains(utf8: "-----BEGIN "), text.contains(utf8: label + "-----") {
            return path
        } else {
            what = info.st_size == 0 ? "is empty" : "holds no PEM \(label) (-----BEGIN ...\(label)-----)"
        }
        reader.context.error(at: reader.valuePosition(key), "\(reader.dotted(key)) = \"\(path)\" \(what): give the \(key == "key_file" ? "client's private key" : key == "ca_file" ? "CA certificate that signed etcd's" : "client certificate") in PEM form")
        return nil
    }

    private static func readableFile(_ reader: inout TableReader, _ key: String) -> String? {
        guard let path = reader.absolutePath(key) else { return nil }
        guard access(path, R_OK) == 0 else {
            reader.context.error(at: reader.valuePosition(key), "\(reader.dotted(key)) = \"\(path)\" cannot be read by the daemon")
            return nil
        }
        return path
    }
}

/// `fleet` on a `[[task]]` or `[[watch]]`: every host runs it (`each`, the default), or one
/// host of the cluster per fire or per file (`one`).
public enum FleetScope: String, Sendable, CaseIterable {
    case each
    case one
}
