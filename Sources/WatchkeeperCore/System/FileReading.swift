import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

// Whole small files read and directories made, for every layer: the system layer's own
// error, `SystemCallError`, names the call and what it was called on.

extension Substring {
    var trimmingSpaces: String {
        String(self.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}

/// A failed call and what it was called on ("open /proc/self/status"), for messages that
/// name the call: "read /proc/self/status: Permission denied".
struct SystemCallError: Error, CustomStringConvertible {
    let call: String
    let errno: Errno
    var description: String { "\(call): \(errno)" }
}

/// The whole file, read until EOF (/proc files report size 0), or the errno that stopped
/// it; `limit` guards against a path that leads somewhere unexpectedly large (EFBIG).
func readFileBytes(_ path: String, limit: Int = 16 << 20) -> Result<[UInt8], SystemCallError> {
    let file: OwnedFileDescriptor
    switch valueOrErrno({ open(path, O_RDONLY | O_CLOEXEC) }) {
    case .success(let fd): file = OwnedFileDescriptor(adopting: fd)
    case .failure(let error): return .failure(SystemCallError(call: "open \(path)", errno: error))
    }
    let fd = file.rawValue
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16_384)
    while true {
        switch valueOrErrno({ chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }) {
        case .failure(let error): return .failure(SystemCallError(call: "read \(path)", errno: error))
        case .success(0): return .success(bytes)
        case .success(let count): bytes.append(contentsOf: chunk[0..<count])
        }
        if bytes.count > limit { return .failure(SystemCallError(call: "read \(path)", errno: .fileTooLarge)) }
    }
}

func readSmallFile(_ path: String) throws -> String {
    String(decoding: try readFileBytes(path).get(), as: UTF8.self)
}

/// `mkdir -p` with the mode for the directories we create.
func makeDirectories(_ path: String, mode: mode_t = 0o750) throws {
    var current = ""
    for component in path.split(separator: "/") {
        current += "/" + component
        switch nothingOrErrno({ mkdir(current, mode) }) {
        case .success, .failure(.fileExists): continue
        case .failure(let error): throw SystemCallError(call: "mkdir \(current)", errno: error)
        }
    }
}
