// The cron a table is moved from: what it does with CRON_TZ, a bad line, HOME, SHELL and
// PATH differs between Debian's and cronie, so `watchkeeper import cron` models one of them
// (docs/import.md says which rules differ). Read from their sources: Debian's cron
// 3.0pl1-162 (user.c's load_user, entry.c's load_entry, env.c's load_env, database.c,
// do_command.c), checked against it running in a private namespace; cronie 1.7 (the same
// files, and cron.c's find_jobs for CRON_TZ).

#if canImport(Glibc)
import WatchkeeperCore
import Glibc
#endif

public enum CronFlavor: String, Sendable, CaseIterable {
    /// Vixie cron 3.0pl1 with Debian's patches: Debian, Ubuntu and their derivatives.
    case debian
    /// cronie: RHEL, CentOS, Fedora, Arch, openSUSE.
    case cronie

    /// As the output names it.
    public var title: String {
        switch self {
        case .debian: return "Debian's cron (Vixie cron 3.0pl1)"
        case .cronie: return "cronie"
        }
    }

    /// The PATH a job gets when the table sets none: Debian's _PATH_DEFPATH; cronie's
    /// _PATH_STDPATH (crond without -P).
    var defaultPath: String {
        switch self {
        case .debian: return "/usr/bin:/bin"
        case .cronie: return "/usr/bin:/bin:/usr/sbin:/sbin"
        }
    }

    /// Debian's cron has no CRON_TZ: it is a variable like another, and every entry is
    /// read in the machine's zone. cronie reads each entry with CRON_TZ in that zone.
    var honoursCronTZ: Bool { self == .cronie }

    /// One line Debian's cron cannot read, or a last line without its newline, and it
    /// ignores the whole file; cronie skips that line only.
    var ignoresWholeFileOnBadLine: Bool { self == .debian }

    /// `NAME=` with nothing after it: cronie sets NAME to ""; Debian's load_env does not
    /// take it as an assignment, and the line is then a bad entry.
    var acceptsEmptyAssignment: Bool { self == .cronie }

    /// `5/10` (a step after a single value): cronie reads it as `5-59/10`; Debian's
    /// get_range refuses it.
    var acceptsStepAfterSingleValue: Bool { self == .cronie }

    /// Where each keeps users' tables, named after their owners.
    var spoolDirectory: String {
        switch self {
        case .debian: return "/var/spool/cron/crontabs/"
        case .cronie: return "/var/spool/cron/"
        }
    }

    // MARK: Which cron is installed

    /// The cron installed on the machine rooted at `root` (dpkg's status, then the
    /// daemon's binary), else the one of its distribution; with the reason, for the
    /// output's header. Nil: neither can be told.
    public static func installed(root: String = "") -> (flavor: CronFlavor, reason: String)? {
        if let status = readText(root + "/var/lib/dpkg/status") {
            for flavor in [CronFlavor.debian, .cronie] where dpkgHasInstalled(flavor == .debian ? "cron" : "cronie", in: status) {
                return (flavor, "the package \(flavor == .debian ? "cron" : "cronie") is installed here")
            }
        }
        if access(root + "/usr/sbin/crond", X_OK) == 0 { return (.cronie, "/usr/sbin/crond (cronie's daemon) is installed here") }
        if access(root + "/usr/sbin/cron", X_OK) == 0 { return (.debian, "/usr/sbin/cron (Debian's daemon) is installed here") }
        if access(root + "/etc/debian_version", F_OK) == 0 { return (.debian, "no cron is installed here, and this is a Debian system") }
        for release in ["redhat-release", "fedora-release", "arch-release", "SuSE-release", "SUSE-brand"] where access(root + "/etc/" + release, F_OK) == 0 {
            return (.cronie, "no cron is installed here, and /etc/\(release) names a distribution that ships cronie")
        }
        return nil
    }

    private static func dpkgHasInstalled(_ package: String, in status: String) -> Bool {
        for stanza in status.split(utf8Separator: "\n\n") {
            let lines = stanza.split(separator: "\n")
            guard lines.contains("Package: \(package)") else { continue }
            return lines.contains { $0.hasPrefix("Status: ") && $0.hasSuffix(" installed") && $0.contains(utf8: "install ok") }
        }
        return false
    }

    private static func readText(_ path: String) -> String? {
        guard case .success(let bytes) = ConfigFileReader.read(path) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: Files it does not read at all

    /// Why this cron reads nothing of the file at `path` (its name in /etc/cron.d, its
    /// owner and mode where it reads it), or nil. `facts`: the file's stat, when it is at
    /// a path this cron reads.
    func refusesFile(at path: String, facts: CronFileFacts?, owner: (uid: UInt32, name: String)?) -> String? {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        if path.hasPrefix("/etc/cron.d/"), let why = refusesName(name) { return why }
        guard let facts else { return nil }
        let isSystem = path == "/etc/crontab" || path.hasPrefix("/etc/cron.d/")
        guard facts.isRegular else { return "it is not a regular file" }
        switch self {
        case .debian:
            if isSystem {
                if facts.uid != 0 { return "it is not owned by root" }
                if facts.mode & 0o022 != 0 { return "it is writable by its group or others (mode \(octal(facts.mode)))" }
            } else {
                if facts.mode & 0o7777 != 0o600 { return "its mode is \(octal(facts.mode)), not 0600" }
                if facts.uid != 0 && facts.uid != owner?.uid { return "it is owned by neither root nor its user" }
            }
            if facts.links != 1 { return "it has \(facts.links) hard links" }
        case .cronie:
            if facts.mode & 0o7533 != 0o400 { return "its mode \(octal(facts.mode)) is not one cronie takes (readable by its owner, writable by nobody else, executable by nobody)" }
            if facts.uid != 0 && facts.uid != owner?.uid { return "it is owned by neither root nor its user" }
            if !isSystem && facts.links != 1 { return "it has \(facts.links) hard links" }
        }
        return nil
    }

    /// Debian's cron reads only names of letters, digits, `_` and `-` in /etc/cron.d (as
    /// run-parts); cronie skips hidden files, backups (`~`, `#...`) and package leftovers.
    private func refusesName(_ name: String) -> String? {
        switch self {
        case .debian:
            let valid = !name.isEmpty && name.unicodeScalars.allSatisfy {
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_" || $0 == "-")
            }
            return valid ? nil : "its name has a character other than letters, digits, _ and - (cron.d files are named like run-parts scripts)"
        case .cronie:
            if name.hasPrefix(".") || name.hasPrefix("#") || name.hasSuffix("~")
                || [".rpmsave", ".rpmorig", ".rpmnew"].contains(where: { name.hasSuffix($0) }) {
                return "cronie skips hidden files, backups and package leftovers by their name"
            }
            return nil
        }
    }

    private func octal(_ mode: UInt32) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}

/// What cron looks at in a table's stat before it reads it.
public struct CronFileFacts: Sendable, Equatable {
    public var mode: UInt32
    public var uid: UInt32
    public var links: UInt64
    public var isRegular: Bool

    public init(mode: UInt32, uid: UInt32, links: UInt64, isRegular: Bool) {
        self.mode = mode
        self.uid = uid
        self.links = links
        self.isRegular = isRegular
    }

    /// The stat of `path`, or nil when it cannot be had.
    public static func of(_ path: String) -> CronFileFacts? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return CronFileFacts(mode: UInt32(info.st_mode), uid: info.st_uid, links: UInt64(info.st_nlink), isRegular: info.st_mode & S_IFMT == S_IFREG)
    }
}
