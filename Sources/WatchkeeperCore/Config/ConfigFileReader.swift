import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Reads the configuration file's bytes, and only from a regular file.
///
/// The shared `readFileBytes` (Diagnostics/) opens whatever the path names. For the
/// configuration that is wrong twice over: opening a FIFO for reading waits for a writer,
/// so `check-config` or a reload would hang for ever, and opening a device can act on it
/// (a watchdog device arms on open, a tape device rewinds on close).
package enum ConfigFileReader {
    /// Far above any real configuration; it bounds what a wrong path can make us read.
    static let sizeLimit = 16 << 20

    /// The bytes, or the reason they could not be read, worded to follow
    /// "unable to read the configuration: ".
    package static func read(_ path: String) -> Result<[UInt8], ReadFailure> {
        guard !path.isEmpty else { return .failure(ReadFailure(reason: "the path is empty")) }
        // stat first, so that a FIFO, socket or device is never opened at all.
        var info = stat()
        if case .failure(let error) = nothingOrErrno({ stat(path, &info) }) { return .failure(ReadFailure(error)) }
        if let kind = notRegular(info.st_mode) { return .failure(ReadFailure(reason: kind)) }

        // O_NONBLOCK (no effect on a regular file) and fstat again: the path may have been
        // replaced by a FIFO since the stat, and then the open must not wait.
        let file: OwnedFileDescriptor
        switch valueOrErrno({ open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY) }) {
        case .success(let fd): file = OwnedFileDescriptor(adopting: fd)
        case .failure(let error): return .failure(ReadFailure(error))
        }
        let fd = file.rawValue
        if case .failure(let error) = nothingOrErrno({ fstat(fd, &info) }) { return .failure(ReadFailure(error)) }
        if let kind = notRegular(info.st_mode) { return .failure(ReadFailure(reason: kind)) }
        if Int(info.st_size) > sizeLimit { return .failure(ReadFailure(.fileTooLarge)) }

        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(info.st_size))
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            switch valueOrErrno({ chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }) {
            case .failure(let error): return .failure(ReadFailure(error))
            case .success(0): return .success(bytes)
            case .success(let count): bytes.append(contentsOf: chunk[0..<count])
            }
            // The file may grow after the fstat.
            if bytes.count > sizeLimit { return .failure(ReadFailure(.fileTooLarge)) }
        }
    }

    /// Why a file of this type cannot be the configuration; nil for a regular file.
    static func notRegular(_ mode: mode_t) -> String? {
        switch mode & S_IFMT {
        case S_IFREG: return nil
        // The OS's own words, as open and read have always said it.
        case S_IFDIR: return String(cString: strerror(EISDIR))
        case S_IFIFO: return "Is a FIFO (named pipe), not a regular file"
        case S_IFSOCK: return "Is a socket, not a regular file"
        case S_IFCHR: return "Is a character device, not a regular file"
        case S_IFBLK: return "Is a block device, not a regular file"
        default: return "Is not a regular file"
        }
    }
}

package struct ReadFailure: Error, Equatable {
    package let reason: String

    init(reason: String) {
        self.reason = reason
    }

    init(_ error: Errno) {
        switch error {
        case .fileTooLarge: reason = "file is larger than \(ConfigFileReader.sizeLimit >> 20) MiB"
        // strerror's "Too many levels of symbolic links" does not say what to look for.
        case .tooManySymbolicLinkLevels: reason = "Too many levels of symbolic links (a symbolic link loop?)"
        default: reason = error.description
        }
    }
}
