#if canImport(Glibc)
import Glibc
#endif

/// Why a process could not be started, or credentials could not be resolved.
public struct SpawnError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What failed. Child-side steps happen between clone/fork and execve.
    public enum Step: Sendable, Equatable {
        /// The request itself: no arguments, or a NUL byte in an argument.
        case request
        /// PATH search for a program name without a '/'.
        case search
        /// User or group lookup.
        case lookup
        case pipe, fork, pidfd, report
        case cgroup, signals, setsid, stdin, dup, closeDescriptors
        case setpriority
        case setgroups, setgid, setuid, chdir, execve
        /// The request's exec deadline had passed when the child was about to exec.
        case execDeadline
    }

    public let step: Step
    /// The errno of the failed call; 0 when no system call failed (unknown user, no arguments).
    public let errorNumber: Int32
    public let description: String

    /// The daemon ran out of something that comes back when other jobs end: descriptors
    /// (EMFILE for RLIMIT_NOFILE, ENFILE for fs.file-max) or processes (EAGAIN from
    /// clone/fork at RLIMIT_NPROC or the cgroup's pids.max). Such a job never started, so
    /// it waits instead of failing: a burst under a low LimitNOFILE= loses no file.
    public var isResourceShortage: Bool {
        errorNumber == EMFILE || errorNumber == ENFILE || (step == .fork && errorNumber == EAGAIN)
    }

}

/// strerror(3) of an errno value.
func errorText(_ code: Int32) -> String {
    String(cString: strerror(code))
}
