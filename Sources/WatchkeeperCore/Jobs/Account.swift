#if canImport(Glibc)
import Glibc
#endif

/// A passwd entry, for HOME/USER/SHELL of the account a job runs as.
package struct Account {
    let name: String
    package let home: String
    let shell: String

    package static func lookup(uid: uid_t) -> Account? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4_096)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return Account(name: String(cString: entry.pw_name), home: String(cString: entry.pw_dir), shell: String(cString: entry.pw_shell))
    }
}
