// A state file that cannot be used is moved aside, never deleted: whoever investigates
// gets the bytes as they were, and the daemon gets a new file instead of refusing to
// catch up for ever. What counts as damage, and the move itself, live here.

import CSQLite
#if canImport(Glibc)
import Glibc
#endif

/// A damaged state file that was moved aside and replaced by a new one; `description` is
/// the message to log, once.
public struct DamagedStateFile: Sendable, Equatable, CustomStringConvertible {
    /// Where the file was, and where it and its companions are now.
    public let path: String
    public let keptAt: String
    /// The -wal and -shm files moved with it (as "<keptAt>-wal", "<keptAt>-shm", the names
    /// under which the sqlite3 CLI finds them for the kept file).
    public let companionsKept: [String]
    /// Why it counted as damaged: SQLite's error, or what quick_check found.
    public let reason: String
    public let label: String

    public var description: String {
        "\(label) \(path) was damaged (\(reason)); it is kept at \(keptAt) and a new, empty file took its place: "
            + "task state and history start empty, and watch rules with catch_up handle the files now in their trees again"
    }

    /// Whether an error opening the file means the file is unusable as it is (rather than
    /// the directory, the disk, another process or our age). Only for a file that exists.
    static func isDamage(_ error: SQLiteError) -> Bool {
        switch error.primaryCode {
        case SQLITE_NOTADB, SQLITE_CORRUPT:
            return true
        case SQLITE_CANTOPEN where error.code == SQLiteConnection.cantOpenSymlink:
            // A link in the file's own place is moved aside before opening
            // (`unusableBeforeOpening`); SQLite says this also for a link among the state
            // directory's parents, and the file found through them is not damaged.
            return false
        case SQLITE_CANTOPEN, SQLITE_PERM:
            return [EACCES, EPERM, EISDIR].contains(error.systemErrorNumber)
        case SQLITE_READONLY:
            // Read-only to us (opened read-only, or SQLITE_READONLY from SQLite): we may
            // write the directory, or moving it aside fails and says so.
            return true
        default:
            return false
        }
    }

    /// The steps of FileLedger.open's recovery, on one path.
    struct Recovery {
        let path: String
        let label: String

        var directory: String {
            guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return "." }
            return slash == path.utf8.startIndex ? "/" : String(path[..<slash])
        }

        var exists: Bool {
            var info = stat()
            return lstat(path, &info) == 0
        }

        /// SQLITE_CANTOPEN adds the hint about a writable state directory; SQLITE_ERROR none.
        private func failure(_ action: String, _ message: String, code: Int32 = SQLITE_CANTOPEN) -> SQLiteError {
            SQLiteConnection.failure(
                path: path, directory: directory, options: SQLiteConnection.Options(label: label, directoryRole: "state directory"),
                action: action, code: code, message: message)
        }

        /// mkdir -p with mode 0750 (the unit's StateDirectoryMode): systemd creates the
        /// state directory, a daemon run by hand may find it missing.
        func createDirectoryIfMissing() throws(SQLiteError) {
            var prefix = directory.hasPrefix("/") ? "" : "."
            for component in directory.split(separator: "/") {
                prefix += "/" + component
                switch nothingOrErrno({ mkdir(prefix, 0o750) }) {
                case .success, .failure(.fileExists): continue
                case .failure(let error):
                    throw failure("create the state directory for", "mkdir \(prefix): \(error)", code: SQLITE_ERROR)
                }
            }
        }

        /// Why the file is unusable, when that shows without SQLite: something other than a
        /// regular file in its place, an empty file, or a file that does not start with
        /// SQLite's header. Checked first because SQLite, opening a file whose header is
        /// garbage or that is empty, deletes the -wal and -shm beside it on close, and those
        /// belong with the kept file. Nil when SQLite has to judge (or there is no file).
        ///
        /// A symbolic link is judged by itself (lstat), never followed: SQLite refuses to
        /// open one (SQLITE_OPEN_NOFOLLOW), and left in place it would keep the state file
        /// from opening at every start.
        func unusableBeforeOpening() -> String? {
            var info = stat()
            guard lstat(path, &info) == 0 else { return nil }
            let kind: String
            switch info.st_mode & S_IFMT {
            case S_IFREG: return contentProblem(size: Int(info.st_size))
            case S_IFLNK: kind = "a symbolic link"
            case S_IFDIR: kind = "a directory"
            case S_IFIFO: kind = "a FIFO"
            case S_IFSOCK: kind = "a socket"
            case S_IFCHR, S_IFBLK: kind = "a device node"
            default: kind = "something other than a file"
            }
            return "\(kind) is in its place"
        }

        /// An empty file is a new database to SQLite, but not one we leave behind: the open
        /// that creates the file sets WAL mode, which writes the header at once. So a file
        /// found empty lost what it held (truncated, or replaced by a tool that failed), and
        /// taking it as a new ledger would run every file's job again without a word. Any
        /// other database starts with these 16 bytes.
        private func contentProblem(size: Int) -> String? {
            guard size > 0 else { return "it is empty, 0 bytes long: whatever it recorded is lost" }
            let magic = Array("SQLite format 3".utf8) + [0]
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
            guard descriptor >= 0 else { return nil } // SQLite's open says why, with the hint
            defer { close(descriptor) }
            var header = [UInt8](repeating: 0, count: magic.count)
            let count = header.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
            guard count >= 0 else { return nil }
            return Array(header.prefix(count)) == magic ? nil : "it does not start with SQLite's header: file is not a database"
        }

        /// Moves the file, then its -wal and -shm, to "<path>.damaged-<UTC time>" (with a
        /// counter when that name is taken). The companions must go: a WAL left beside the
        /// new, empty file would be replayed into it, bringing the damage back.
        func moveAside(reason: String, now: WallTime) throws(SQLiteError) -> DamagedStateFile {
            let base = path + ".damaged-" + Self.stamp(now)
            var target = base
            var counter = 1
            while Self.exists(target) || Self.exists(target + "-wal") {
                counter += 1
                target = base + "-\(counter)"
            }
            var kept: [String] = []
            for suffix in ["-wal", "-shm"] where Self.exists(path + suffix) {
                if case .failure(let error) = nothingOrErrno({ rename(path + suffix, target + suffix) }) {
                    throw failure("move the damaged", "\(reason); then unable to move \(path + suffix) to \(target + suffix): \(error)")
                }
                kept.append(target + suffix)
            }
            if case .failure(let error) = nothingOrErrno({ rename(path, target) }) {
                throw failure("move the damaged", "\(reason); then unable to move it to \(target): \(error)")
            }
            return DamagedStateFile(path: path, keptAt: target, companionsKept: kept, reason: reason, label: label)
        }

        private static func exists(_ path: String) -> Bool {
            var info = stat()
            return lstat(path, &info) == 0
        }

        /// 20260102T030405Z: sorts by time, no characters a shell or a file name minds.
        static func stamp(_ time: WallTime) -> String {
            let p = time.utcFields
            return "\(p.year)\(p.month)\(p.day)T\(p.hour)\(p.minute)\(p.second)Z"
        }
    }
}
