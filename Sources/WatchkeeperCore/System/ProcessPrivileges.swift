/// What this process may do, as /proc/self/status says: its effective capabilities and
/// whether a seccomp filter is on. An EPERM means either a missing capability or a
/// filter's refusal (systemd's SystemCallErrorNumber=EPERM), and an administrator fixes
/// the two in different lines of the unit: messages name the one that holds.
struct ProcessPrivileges: Equatable, Sendable {
    /// CapEff's bits; nil if it could not be read.
    var effectiveCapabilities: UInt64?
    /// Seccomp mode 2: a filter decides which system calls this process may make.
    var seccompFiltered: Bool

    static let sysAdmin = 21
    static let dacReadSearch = 2

    static func current() -> ProcessPrivileges {
        parse((try? readSmallFile("/proc/self/status")) ?? "")
    }

    /// From the text of /proc/PID/status ("CapEff:\t00000000a80425fb", "Seccomp:\t2").
    static func parse(_ status: String) -> ProcessPrivileges {
        var privileges = ProcessPrivileges(effectiveCapabilities: nil, seccompFiltered: false)
        for line in status.split(separator: "\n") {
            let field = line.split(separator: ":", maxSplits: 1)
            guard field.count == 2, let value = field[1].split(whereSeparator: { $0 == " " || $0 == "\t" }).first else { continue }
            switch field[0] {
            case "CapEff": privileges.effectiveCapabilities = UInt64(value, radix: 16)
            case "Seccomp": privileges.seccompFiltered = value == "2"
            default: break
            }
        }
        return privileges
    }

    /// Whether the capability is effective; nil when unknown.
    func has(_ capability: Int) -> Bool? {
        effectiveCapabilities.map { $0 & (1 << UInt64(capability)) != 0 }
    }
}
