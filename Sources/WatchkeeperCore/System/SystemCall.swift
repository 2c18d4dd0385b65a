import CWatchkeeperSystem
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

// Every syscall the daemon makes goes through one of these, so that failures are typed
// (`Errno`, the one errno error type) and EINTR is retried on purpose rather than by luck.
// The shape is swift-system's own internal `valueOrErrno(retryOnInterrupt:_:)`, which it
// does not export.
//
// Why retry by default: the daemon installs signal handlers (its signal sources block the
// signals, but a library or a test may not), and a handler without SA_RESTART makes a
// slow syscall fail with EINTR even though nothing went wrong. Callers that must see the
// interruption (a wait that should give up when a signal arrives) pass
// `retryOnInterrupt: false`.

/// Runs `call`, a C function that returns -1 and sets errno on failure, and returns its
/// value or the errno it set. With `retryOnInterrupt`, EINTR calls it again.
@inline(__always)
public func valueOrErrno<T: FixedWidthInteger>(retryOnInterrupt: Bool = true, _ call: () -> T) -> Result<T, Errno> {
    while true {
        let value = call()
        if value != -1 { return .success(value) }
        let failure = Errno(rawValue: errno)
        if retryOnInterrupt && failure == .interrupted { continue }
        return .failure(failure)
    }
}

/// `valueOrErrno` for calls whose only result is success (close, fcntl F_SETFL, ...).
@inline(__always)
public func nothingOrErrno<T: FixedWidthInteger>(retryOnInterrupt: Bool = true, _ call: () -> T) -> Result<Void, Errno> {
    valueOrErrno(retryOnInterrupt: retryOnInterrupt, call).map { _ in () }
}

/// The throwing form, for code that reads better with `try`: `Result.get()` throws the
/// typed `Errno` in Swift 6. The value may be dropped: for mkdir or rename, success is 0.
@inline(__always)
@discardableResult
public func systemCall<T: FixedWidthInteger>(retryOnInterrupt: Bool = true, _ call: () -> T) throws(Errno) -> T {
    try valueOrErrno(retryOnInterrupt: retryOnInterrupt, call).get()
}

extension Errno {
    /// The project's message form, `unable to <action> <object>: <reason>`, with the
    /// reason as strerror words and the symbolic name an operator can search for:
    /// "unable to watch /srv/in: No space left on device (ENOSPC)".
    public func unable(_ actionAndObject: String) -> String {
        "unable to \(actionAndObject): \(description) (\(symbolicName))"
    }

    /// The C name of the errno, for messages: logs are searched for "ENOSPC", not for
    /// the locale-dependent words.
    public var symbolicName: String {
        guard let name = wk_errno_name(rawValue) else { return "errno \(rawValue)" }
        return String(cString: name)
    }
}
