#if canImport(Glibc)
import Glibc
#endif

public enum ProcessEnvironment {
    /// The environment as a dictionary, read from `environ` (no Foundation needed).
    public static func current() -> [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return result
    }
}

/// sysexits(3) codes, as documented in docs/operations.md.
public enum ExitCode {
    public static let success: Int32 = 0
    public static let usage: Int32 = 64
    public static let software: Int32 = 70
    public static let osError: Int32 = 71
    /// Another watchkeeper holds the state directory (EX_TEMPFAIL).
    public static let alreadyRunning: Int32 = 75
    public static let configuration: Int32 = 78
    // The control commands (status, trigger, ...), sysexits.h like the rest.
    /// The daemon answered, but refused: no such task or run, a run not started.
    public static let refused: Int32 = 1
    /// The daemon is not running, or not listening where the command looked (EX_UNAVAILABLE).
    public static let unavailable: Int32 = 69
    /// The conversation with the daemon failed: timeout, a reply that is not Varlink (EX_PROTOCOL).
    public static let protocolError: Int32 = 76
    /// The control socket refused this user (EX_NOPERM).
    public static let permission: Int32 = 77
    /// `watchkeeper logs`: the journal has no files to read (EX_NOINPUT).
    public static let noInput: Int32 = 66
}
