#if canImport(XCTest)
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A private tmpfs for a test: fanotify marks whole file systems, and one of the test's own
/// keeps the rest of the machine's events out. Mounting needs root (CAP_SYS_ADMIN); without
/// it the test is skipped, not failed.
public struct ScratchTmpfs {
    /// The mount point as the kernel spells it (realpath).
    public let path: String

    /// Mounts a tmpfs on `target` (an existing directory, or made here).
    public init(at target: String) throws {
        try XCTSkipUnless(geteuid() == 0, "mounting a tmpfs and marking a file system need root")
        if mkdir(target, 0o755) != 0 && errno != EEXIST {
            throw XCTSkip("unable to make \(target): \(String(cString: strerror(errno)))")
        }
        if mount("watchkeeper-test", target, "tmpfs", 0, nil) != 0 {
            let error = errno
            if error == EPERM { throw XCTSkip("unable to mount a tmpfs on \(target): no CAP_SYS_ADMIN here") }
            throw Failure(description: "unable to mount a tmpfs on \(target): \(String(cString: strerror(error)))")
        }
        guard let real = realpath(target, nil) else { throw Failure(description: "unable to resolve \(target)") }
        defer { free(real) }
        path = String(cString: real)
    }

    /// Unmounts it, lazily: a process that still holds a descriptor on it (a daemon that
    /// did not stop) cannot keep the test's directory from being removed.
    public func unmount() {
        _ = umount2(path, Int32(MNT_DETACH))
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }
}
#endif
