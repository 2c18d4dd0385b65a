import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Why a file could not be written: `unable to write /run/watchkeeper/state.json: <reason>`.
struct FileWriteError: Error, Equatable, CustomStringConvertible {
    /// The file that was to be written.
    let path: String
    /// What went wrong, naming the call and its object, or the directory that was refused.
    let reason: String
    /// The errno of the failed call; nil when the directory was refused.
    let errorNumber: Errno?

    var description: String { "unable to write \(path): \(reason)" }
}

/// Replaces `path` with `contents` so that a reader sees the previous file or the new one,
/// never half of one, and so that nobody else who can write to the directory can make the
/// daemon (root) write somewhere else. The file gets exactly `mode`, whatever the umask.
///
/// - The directory must belong to the effective uid and must not be writable by group or
///   others unless it has the sticky bit; otherwise the call is refused. Anyone else who
///   may write there could replace the file between two dumps, or the directory's entries
///   while this runs.
/// - The temporary file gets an unpredictable name and is created with O_EXCL and
///   O_NOFOLLOW, so a symlink planted at any name, predictable or not, is never followed:
///   creation fails with EEXIST and another name is tried.
/// - rename replaces a symlink at `path` itself rather than following it.
/// - The file and then the directory are fsynced, so after a crash the path holds the old
///   contents or the new, complete ones.
///
/// Not O_TMPFILE with linkat: linkat cannot replace an existing name, so replacing the
/// file would still take a named temporary and a rename, and some filesystems do not
/// support O_TMPFILE at all. The named O_EXCL file is the simpler one that is correct.
///
/// Relative to the directory's descriptor throughout: the directory that was checked is
/// the one written to, even if its path is renamed or replaced meanwhile.
func writeFileAtomically(_ path: String, contents: String, mode: mode_t = 0o640) throws(FileWriteError) {
    try writeFileAtomically(path, bytes: Array(contents.utf8), mode: mode)
}

/// `temporaryName` exists for tests, which plant symlinks at the names it will propose.
func writeFileAtomically(
    _ path: String, bytes: [UInt8], mode: mode_t = 0o640,
    temporaryName: (_ baseName: String) -> String = randomTemporaryName
) throws(FileWriteError) {
    func failure(_ reason: String, _ error: Errno? = nil) -> FileWriteError {
        FileWriteError(path: path, reason: error.map { "\(reason): \($0)" } ?? reason, errorNumber: error)
    }
    let (directory, baseName) = splitPath(path)
    guard !baseName.isEmpty, baseName != ".", baseName != ".." else {
        throw failure("the path does not name a file")
    }

    let directoryDescriptor: Int32
    switch valueOrErrno({ open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }) {
    case .success(let opened): directoryDescriptor = opened
    case .failure(let error): throw failure("open \(directory)", error)
    }
    defer { close(directoryDescriptor) }
    if let refusal = untrustedDirectoryReason(directoryDescriptor, directory: directory) {
        throw failure(refusal)
    }

    // 2^64 names: EEXIST again and again means something is wrong, not bad luck.
    var temporary = ""
    var opened: Result<Int32, Errno> = .failure(.fileExists)
    for _ in 0..<8 {
        temporary = temporaryName(baseName)
        opened = valueOrErrno {
            openat(directoryDescriptor, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        }
        if case .failure(.fileExists) = opened { continue }
        break
    }
    let fileDescriptor: Int32
    switch opened {
    case .success(let created): fileDescriptor = created
    case .failure(let error): throw failure("open \(directory)/\(temporary)", error)
    }
    // The mode asked for, not what the umask leaves of it: the unit's UMask=0027 would make
    // a 0644 metrics file unreadable to node_exporter, which runs as a user of its own.
    if case .failure(let error) = nothingOrErrno({ fchmod(fileDescriptor, mode) }) {
        close(fileDescriptor)
        _ = unlinkat(directoryDescriptor, temporary, 0)
        throw failure("fchmod \(directory)/\(temporary)", error)
    }

    func removeTemporary() {
        // The file is ours and unfinished; if even unlink fails, it is left as a hidden
        // name the next write does not reuse, and the error that led here says why.
        _ = unlinkat(directoryDescriptor, temporary, 0)
    }
    if let failed = writeSyncAndClose(fileDescriptor, bytes) {
        removeTemporary()
        throw failure("\(failed.call) \(directory)/\(temporary)", failed.error)
    }
    if case .failure(let error) = nothingOrErrno({ renameat(directoryDescriptor, temporary, directoryDescriptor, baseName) }) {
        removeTemporary()
        throw failure("rename \(directory)/\(temporary) to \(baseName)", error)
    }
    // The rename is durable only once the directory is; the new contents are in place
    // already, so a failure here says the write may not survive a crash.
    if case .failure(let error) = nothingOrErrno({ fsync(directoryDescriptor) }) { throw failure("fsync \(directory)", error) }
}

/// Writes all of `bytes` to `fd`, fsyncs and closes it: nil, or the call that failed and
/// why. The descriptor is closed either way.
private func writeSyncAndClose(_ fd: Int32, _ bytes: [UInt8]) -> (call: String, error: Errno)? {
    var offset = 0
    while offset < bytes.count {
        switch valueOrErrno({ bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) } }) {
        case .success(let written):
            offset += written
        case .failure(let error):
            close(fd)
            return ("write", error)
        }
    }
    if case .failure(let error) = nothingOrErrno({ fsync(fd) }) {
        close(fd)
        return ("fsync", error)
    }
    // close reports late write errors (NFS); after it the descriptor is gone either way,
    // so it is never retried, and EINTR is no failure.
    switch nothingOrErrno(retryOnInterrupt: false, { close(fd) }) {
    case .success, .failure(.interrupted): return nil
    case .failure(let error): return ("close", error)
    }
}

/// Why the daemon must not write in this directory, or nil when it may: it must be the
/// effective uid's, and not writable by others unless the sticky bit stops them from
/// renaming or removing what the daemon puts there.
func untrustedDirectoryReason(_ descriptor: Int32, directory: String) -> String? {
    var status = stat()
    if case .failure(let error) = nothingOrErrno({ fstat(descriptor, &status) }) {
        return "fstat \(directory): \(error)"
    }
    let owner = geteuid()
    if status.st_uid != owner {
        return "\(directory) is owned by uid \(status.st_uid), not uid \(owner)"
    }
    let permissions = status.st_mode & 0o7777
    if permissions & (S_IWGRP | S_IWOTH) != 0 && permissions & S_ISVTX == 0 {
        return "\(directory) is writable by group or others (mode 0\(String(permissions, radix: 8))) and has no sticky bit"
    }
    return nil
}

/// ".state.json.<16 hex digits>.tmp": hidden, recognisably ours, and not guessable, from
/// the system's random generator (getrandom).
func randomTemporaryName(_ baseName: String) -> String {
    let hex = String(UInt64.random(in: .min ... .max), radix: 16)
    return ".\(baseName).\(String(repeating: "0", count: 16 - hex.count) + hex).tmp"
}

/// "/run/wk/state.json" → ("/run/wk", "state.json"); "state.json" → (".", "state.json");
/// "/state.json" → ("/", "state.json").
private func splitPath(_ path: String) -> (directory: String, baseName: String) {
    guard let slash = path.lastIndex(of: "/") else { return (".", path) }
    let directory = String(path[..<slash])
    return (directory.isEmpty ? "/" : directory, String(path[path.index(after: slash)...]))
}
