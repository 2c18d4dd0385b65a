import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

// The calls whose return value cannot say "failed" with -1: some return a pointer (NULL
// and errno on failure), and two return a value in which every bit pattern is a valid
// answer, so only errno, zeroed before the call, tells a failure apart. Like
// `valueOrErrno`, these are the only places errno is read.

/// Runs `call`, a C function that returns NULL and sets errno on failure (realpath,
/// opendir, fdopendir), and returns its pointer or the errno it set. With
/// `retryOnInterrupt`, EINTR calls it again.
@inline(__always)
public func pointerOrErrno<T>(retryOnInterrupt: Bool = true, _ call: () -> T?) -> Result<T, Errno> {
    while true {
        if let value = call() { return .success(value) }
        let failure = Errno(rawValue: errno)
        if retryOnInterrupt && failure == .interrupted { continue }
        return .failure(failure)
    }
}

/// The next entry of a directory stream, nil at its end, or why it could not be read.
/// readdir returns NULL both at the end and on an error; only errno, zeroed before the
/// call, tells them apart. The corresponding C function is `readdir`.
public func nextDirectoryEntry(_ stream: OpaquePointer) -> Result<UnsafeMutablePointer<dirent>?, Errno> {
    errno = 0
    if let entry = readdir(stream) { return .success(entry) }
    return errno == 0 ? .success(nil) : .failure(Errno(rawValue: errno))
}

/// The calling thread's nice value (on Linux it is per thread). getpriority returns the
/// value itself, so -1 is a valid answer; only errno, zeroed before the call, tells a
/// failure apart. The corresponding C function is `getpriority(PRIO_PROCESS, 0)`.
public func niceValueOfThisThread() -> Result<Int32, Errno> {
    errno = 0
    let value = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
    return errno == 0 ? .success(value) : .failure(Errno(rawValue: errno))
}
