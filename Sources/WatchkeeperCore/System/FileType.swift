#if canImport(Glibc)
import Glibc
#endif

/// What a path or a directory entry is: from readdir's d_type or a stat's mode.
public enum FileType: Int, Sendable, CaseIterable {
    case regular, directory, symlink, fifo, socket, blockDevice, characterDevice, unknown

    /// From readdir's d_type; nil for DT_UNKNOWN, which some file systems (and overlays
    /// of them) report for everything, and which only an lstat can resolve.
    init?(directoryEntryType type: UInt8) {
        switch Int(type) {
        case Int(DT_REG): self = .regular
        case Int(DT_DIR): self = .directory
        case Int(DT_LNK): self = .symlink
        case Int(DT_FIFO): self = .fifo
        case Int(DT_SOCK): self = .socket
        case Int(DT_BLK): self = .blockDevice
        case Int(DT_CHR): self = .characterDevice
        case Int(DT_UNKNOWN): return nil
        default: self = .unknown
        }
    }

    init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFREG: self = .regular
        case S_IFDIR: self = .directory
        case S_IFLNK: self = .symlink
        case S_IFIFO: self = .fifo
        case S_IFSOCK: self = .socket
        case S_IFBLK: self = .blockDevice
        case S_IFCHR: self = .characterDevice
        default: self = .unknown
        }
    }

    /// The name in the dump.
    public var name: String {
        switch self {
        case .regular: "regular_files"
        case .directory: "directories"
        case .symlink: "symlinks"
        case .fifo: "fifos"
        case .socket: "sockets"
        case .blockDevice: "block_devices"
        case .characterDevice: "character_devices"
        case .unknown: "unknown"
        }
    }
}

/// `path` (any bytes but NUL) as the C string a system call takes.
func withPathCString<Result>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) -> Result) -> Result {
    (path + [0]).withUnsafeBufferPointer { bytes in
        body(UnsafeRawPointer(bytes.baseAddress!).assumingMemoryBound(to: CChar.self))
    }
}
