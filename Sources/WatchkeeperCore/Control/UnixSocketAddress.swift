import CWatchkeeperSystem
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// bind(2) or connect(2) `fd` to the socket at `path`.
func socketCall(_ fd: Int32, path: String, connecting: Bool) throws(Errno) {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count <= Int(WK_SUN_PATH_MAX) else { throw Errno.fileNameTooLong }
    withUnsafeMutableBytes(of: &address.sun_path) { buffer in
        buffer.copyBytes(from: bytes)
        buffer[bytes.count] = 0
    }
    let length = socklen_t(MemoryLayout.offset(of: \sockaddr_un.sun_path)! + bytes.count + 1)
    let result = withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
            valueOrErrno { connecting ? connect(fd, address, length) : bind(fd, address, length) }
        }
    }
    _ = try result.get()
}
