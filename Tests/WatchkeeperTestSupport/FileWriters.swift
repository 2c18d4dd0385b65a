#if canImport(XCTest)
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A writer that is not done: `chunks` appends of ten bytes to `path`, `interval` apart, on a
/// thread of its own (started). What a file still being written looks like to a watcher.
@discardableResult
public func startAppending(to path: String, chunks: Int, interval: useconds_t = 100_000) -> Thread {
    let thread = Thread {
        for _ in 0..<chunks {
            let fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            _ = Array("0123456789".utf8).withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            close(fd)
            usleep(interval)
        }
    }
    thread.start()
    return thread
}

/// A socket file at `path`, as a server leaves behind (bound, then closed): true if made.
public func makeSocketFile(_ path: String) -> Bool {
    let socket = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(socket) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: Array(path.utf8).prefix(raw.count - 1)) }
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    } == 0
}
#endif
