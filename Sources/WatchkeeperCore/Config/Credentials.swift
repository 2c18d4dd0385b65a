import CWatchkeeperSpawn
#if canImport(Glibc)
import Glibc
#endif

// MARK: - Credentials

/// Who a job runs as: applied in the child with setgroups, setgid, setuid (in that order).
public struct Credentials: Sendable, Equatable {
    public var uid: uid_t
    public var gid: gid_t
    /// Supplementary groups, replacing the daemon's (root's) entirely.
    public var groups: [gid_t]
    /// The passwd name, when the user has one.
    public var userName: String?

    public init(uid: uid_t, gid: gid_t, groups: [gid_t], userName: String? = nil) {
        self.uid = uid
        self.gid = gid
        self.groups = groups
        self.userName = userName
    }

    /// Resolves user and/or group names or numeric ids.
    ///
    /// - The group defaults to the user's primary group; supplementary groups are the
    ///   user's memberships (getgrouplist) with the chosen group as the base.
    /// - A numeric user without a passwd entry is accepted only with a group, since there
    ///   is no primary group to take.
    /// - With only a group, the uid stays the daemon's and the supplementary groups are
    ///   just that group.
    public static func lookup(user: String?, group: String?) throws(SpawnError) -> Credentials {
        if user == nil && group == nil {
            throw lookupFailure("unable to look up credentials: neither a user nor a group was given")
        }

        var uid = getuid()
        var primaryGroup: gid_t?
        var userName: String?
        if let user {
            if let entry = try passwdEntry(for: user) {
                uid = entry.uid
                primaryGroup = entry.gid
                userName = entry.name
            } else if let number = numericID(user), group != nil {
                uid = number
            } else if numericID(user) != nil {
                throw lookupFailure("unknown user \"\(user)\" (no passwd entry, so a group must be given too)")
            } else {
                throw lookupFailure("unknown user \"\(user)\"")
            }
        }

        let gid: gid_t
        if let group {
            gid = try groupID(for: group)
        } else if let primaryGroup {
            gid = primaryGroup
        } else {
            // Unreachable: a user without an entry needs a group (checked above).
            throw lookupFailure("unable to look up credentials: no group for user \"\(user ?? "")\"")
        }

        let groups = try userName.map { name throws(SpawnError) in try groupList(user: name, base: gid) } ?? [gid]
        return Credentials(uid: uid, gid: gid, groups: groups, userName: userName)
    }

    private static func lookupFailure(_ text: String, errorNumber: Int32 = 0) -> SpawnError {
        SpawnError(step: .lookup, errorNumber: errorNumber, description: text)
    }

    private static func numericID(_ text: String) -> UInt32? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return UInt32(text)
    }

    /// Errors other than "not found" (which getpwnam_r reports as 0, ENOENT or ESRCH
    /// depending on the NSS module) are real failures: the NSS backend is unreachable.
    private static func isNotFound(_ code: Int32) -> Bool {
        code == 0 || code == ENOENT || code == ESRCH
    }

    private static func passwdEntry(for user: String) throws(SpawnError) -> (name: String, uid: uid_t, gid: gid_t)? {
        var size = 1024
        while true {
            var entry = passwd()
            var found: UnsafeMutablePointer<passwd>?
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            let code: Int32
            if let number = numericID(user) {
                code = getpwuid_r(number, &entry, buffer, size, &found)
            } else {
                code = getpwnam_r(user, &entry, buffer, size, &found)
            }
            if code == ERANGE && size < 1 << 20 {
                size *= 2
                continue
            }
            if let found {
                return (String(cString: found.pointee.pw_name), found.pointee.pw_uid, found.pointee.pw_gid)
            }
            if isNotFound(code) { return nil }
            throw lookupFailure("unable to look up user \"\(user)\": \(errorText(code))", errorNumber: code)
        }
    }

    private static func groupID(for group: String) throws(SpawnError) -> gid_t {
        if let number = numericID(group) { return number }
        var size = 1024
        while true {
            var entry = Glibc.group()
            var found: UnsafeMutablePointer<Glibc.group>?
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            let code = getgrnam_r(group, &entry, buffer, size, &found)
            if code == ERANGE && size < 1 << 20 {
                size *= 2
                continue
            }
            if let found { return found.pointee.gr_gid }
            if isNotFound(code) { throw lookupFailure("unknown group \"\(group)\"") }
            throw lookupFailure("unable to look up group \"\(group)\": \(errorText(code))", errorNumber: code)
        }
    }

    private static func groupList(user: String, base: gid_t) throws(SpawnError) -> [gid_t] {
        var count: Int32 = 32
        while true {
            var groups = [gid_t](repeating: 0, count: Int(count))
            var found = count
            if getgrouplist(user, base, &groups, &found) >= 0 {
                return Array(groups.prefix(Int(found)))
            }
            // -1 with `found` set to the number needed (glibc); guard against a libc that
            // does not update it.
            if found <= count {
                if count >= 65536 {
                    throw lookupFailure("unable to look up the groups of user \"\(user)\": more than 65536")
                }
                count *= 2
            } else {
                count = found
            }
        }
    }
}
