import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// `unable to load time zone "Europe/Berln": no such zone in /usr/share/zoneinfo (is tzdata installed?)`
public struct TimeZoneLoadError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What the message says was being loaded: `"Europe/Berlin"` (quoted) or `from /etc/localtime`.
    public let subject: String
    public let reason: String

    public var description: String { "unable to load time zone \(subject): \(reason)" }
}

extension TimeZoneRules {
    public static let zoneDirectory = "/usr/share/zoneinfo"
    public static let localTimePath = "/etc/localtime"

    /// The zone `/usr/share/zoneinfo/<identifier>`, parsed once per process (see
    /// `discardCachedZones()`).
    public static func load(identifier: String) throws(TimeZoneLoadError) -> TimeZoneRules {
        try load(identifier: identifier, directory: zoneDirectory)
    }

    static func load(identifier: String, directory: String) throws(TimeZoneLoadError) -> TimeZoneRules {
        let subject = "\"\(identifier)\""
        if let problem = identifierProblem(identifier) {
            throw TimeZoneLoadError(subject: subject, reason: problem)
        }
        let path = directory + "/" + identifier
        if let cached = TimeZoneCache.shared.rules(forKey: path) { return cached }
        let bytes: [UInt8]
        switch readZoneFile(path) {
        case .success(let contents):
            bytes = contents
        case .failure(.noSuchFileOrDirectory), .failure(.notDirectory):
            throw TimeZoneLoadError(subject: subject, reason: missingZoneReason(identifier, directory: directory))
        case .failure(.isDirectory):
            throw TimeZoneLoadError(
                subject: subject,
                reason: "\(path) is a directory of zones; name a zone inside it, like \"Europe/Berlin\""
            )
        case .failure(let failure):
            throw TimeZoneLoadError(subject: subject, reason: "\(path): \(failure)")
        }
        let rules: TimeZoneRules
        do {
            rules = try TimeZoneRules(tzif: bytes, identifier: identifier)
        } catch {
            var reason = "\(path) \(error.reason)"
            if identifier.hasPrefix("right/") { reason += "; use \"\(identifier.dropFirst(6))\" instead" }
            throw TimeZoneLoadError(subject: subject, reason: reason)
        }
        TimeZoneCache.shared.store(rules, forKey: path)
        return rules
    }

    /// The machine's zone, /etc/localtime, as glibc and systemd use it. The TZ environment
    /// variable is deliberately not consulted: the daemon's schedule should follow the
    /// machine's setting (`timedatectl set-timezone`), not whatever its unit inherited.
    public static func local() throws(TimeZoneLoadError) -> TimeZoneRules {
        try local(path: localTimePath)
    }

    /// A schedule's zone: the one its `timezone` names, else the machine's.
    public static func named(_ identifier: String?) throws(TimeZoneLoadError) -> TimeZoneRules {
        if let identifier { return try load(identifier: identifier) }
        return try local()
    }

    static func local(path: String) throws(TimeZoneLoadError) -> TimeZoneRules {
        let subject = "from \(path)"
        if let cached = TimeZoneCache.shared.rules(forKey: path) { return cached }
        let linkTarget = symbolicLinkTarget(path)
        var identifier = "localtime"
        if let linkTarget, let range = linkTarget.ranges(utf8: "zoneinfo/").last {
            identifier = String(linkTarget[range.upperBound...])
        }
        let bytes: [UInt8]
        switch readZoneFile(path) {
        case .success(let contents):
            bytes = contents
        case .failure(.noSuchFileOrDirectory) where linkTarget == nil:
            // No /etc/localtime at all (common in containers): glibc, and so `date`, use UTC.
            return .utc
        case .failure(.noSuchFileOrDirectory):
            throw TimeZoneLoadError(
                subject: subject,
                reason: "it links to \(linkTarget ?? "?"), which does not exist (is tzdata installed? `timedatectl set-timezone ZONE` repairs the link)"
            )
        case .failure(let failure):
            throw TimeZoneLoadError(subject: subject, reason: failure.description)
        }
        let rules: TimeZoneRules
        do {
            rules = try TimeZoneRules(tzif: bytes, identifier: identifier)
        } catch {
            throw TimeZoneLoadError(subject: subject, reason: "\(path) \(error.reason)")
        }
        TimeZoneCache.shared.store(rules, forKey: path)
        return rules
    }

    /// Zones are cached for the life of the process; a configuration reload calls this so
    /// that a tzdata update (or `timedatectl set-timezone`) takes effect without a restart.
    public static func discardCachedZones() {
        TimeZoneCache.shared.removeAll()
    }

    /// Zone names are paths below the zone directory; anything that could climb out of it
    /// is refused before the file system is touched.
    static func identifierProblem(_ identifier: String) -> String? {
        let components = identifier.split(separator: "/", omittingEmptySubsequences: false)
        let escapes = identifier.hasPrefix("/") || components.contains { $0 == ".." || $0 == "." || $0.isEmpty }
        let allowed = identifier.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "/_-+.".unicodeScalars.contains(scalar))
        }
        if identifier.isEmpty {
            return "the name is empty; zone names look like \"Europe/Berlin\" (see /usr/share/zoneinfo/zone1970.tab)"
        }
        if escapes || !allowed {
            return "a zone name is a path below /usr/share/zoneinfo like \"Europe/Berlin\", without \"..\", a leading \"/\" or unusual characters"
        }
        return nil
    }

    private static func missingZoneReason(_ identifier: String, directory: String) -> String {
        var status = stat()
        guard stat(directory, &status) == 0 else {
            return "\(directory) does not exist (is tzdata installed?)"
        }
        if let suggestion = closestZoneName(to: identifier, directory: directory) {
            return "no such zone in \(directory); did you mean \"\(suggestion)\"?"
        }
        return "no such zone in \(directory) (is tzdata installed?)"
    }

    /// Walks the name component by component, replacing each missing one with the entry
    /// of that directory closest to it (at most two edits, ignoring case), so that
    /// "Europe/Berln" and "europe/berlin" both lead to "Europe/Berlin".
    static func closestZoneName(to identifier: String, directory: String) -> String? {
        var resolved: [String] = []
        for component in identifier.split(separator: "/") {
            let folder = ([directory] + resolved).joined(separator: "/")
            let entries = directoryEntries(folder)
            if entries.contains(String(component)) {
                resolved.append(String(component))
                continue
            }
            let wanted = Array(component.lowercased().unicodeScalars)
            let scored = entries.map { ($0, editDistance(wanted, Array($0.lowercased().unicodeScalars))) }
            // Short names need a closer match: "Mars" is not a misspelt "MST".
            let allowed = min(2, (wanted.count - 1) / 2)
            guard let best = scored.filter({ $0.1 <= allowed }).min(by: { $0.1 < $1.1 }) else { return nil }
            resolved.append(best.0)
        }
        let candidate = resolved.joined(separator: "/")
        guard candidate != identifier, !candidate.isEmpty else { return nil }
        var status = stat()
        guard stat(directory + "/" + candidate, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { return nil }
        return candidate
    }

    private static func directoryEntries(_ path: String) -> [String] {
        guard let stream = opendir(path) else { return [] }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if !name.hasPrefix(".") { names.append(name) }
        }
        return names.sorted()
    }

    private static func editDistance(_ a: [Unicode.Scalar], _ b: [Unicode.Scalar]) -> Int {
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }

    private static func symbolicLinkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4_096)
        let length = readlink(path, &buffer, buffer.count - 1)
        guard length > 0 else { return nil }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The whole file, or the errno that stopped it. Zone files are a few kilobytes; the
    /// cap only guards against a name that leads somewhere unexpected.
    private static func readZoneFile(_ path: String) -> Result<[UInt8], Errno> {
        readFileBytes(path, limit: 1 << 20).mapError(\.errno)
    }
}
