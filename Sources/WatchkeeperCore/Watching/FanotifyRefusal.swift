import SystemPackage

/// Why fanotify cannot take a tree, or cannot be had at all, in words an administrator can
/// act on: which capability, system call filter, kernel or file system stands in the way,
/// and where the unit's side is explained.
enum FanotifyRefusal {
    /// Where the unit's side of fanotify is explained.
    static let fanotifyDropIn = "the fanotify drop-in: docs/operations.md, \"Huge trees: fanotify\""

    /// Why fanotify cannot take a tree, in words an administrator can act on: an EPERM is
    /// told apart by step, and by whether the capability is missing or a system call filter
    /// refused the call (systemd's SystemCallErrorNumber=EPERM gives the same errno).
    static func tree(_ failure: FanotifyBackend.StartFailure, fileSystem: String, privileges: ProcessPrivileges) -> String {
        switch (failure.step, failure.error) {
        case (.mark, .notPermitted), (.mark, .permissionDenied):
            if privileges.has(ProcessPrivileges.sysAdmin) == false {
                return "a fanotify mark on a whole file system needs CAP_SYS_ADMIN, which this process does not have (the unit's CapabilityBoundingSet leaves it out unless \(fanotifyDropIn) adds it)"
            }
            if privileges.seccompFiltered {
                return "the system call filter refuses fanotify_mark (the unit's SystemCallFilter= allows it with \(fanotifyDropIn))"
            }
        case (.resolveRoot, .notPermitted), (.resolveRoot, .permissionDenied):
            if privileges.has(ProcessPrivileges.dacReadSearch) == false {
                // The mark comes next: with neither capability, both are named at once.
                if privileges.has(ProcessPrivileges.sysAdmin) == false {
                    return "open_by_handle_at needs CAP_DAC_READ_SEARCH and a fanotify mark on a whole file system CAP_SYS_ADMIN, neither of which this process has (the shipped unit's CapabilityBoundingSet has the first; \(fanotifyDropIn) adds the second)"
                }
                return "open_by_handle_at needs CAP_DAC_READ_SEARCH, which this process does not have (the shipped unit's CapabilityBoundingSet has it)"
            }
            if privileges.seccompFiltered {
                return "the system call filter refuses open_by_handle_at (the unit's SystemCallFilter= allows it with \(fanotifyDropIn))"
            }
        case (_, .improperLink):
            return "its file system (\(fileSystem)) has no fsid, or it is inside a btrfs subvolume: fanotify cannot mark it as a whole"
        case (.rootHandle, .notSupported), (.mark, .notSupported), (.mark, .operationNotSupportedByDevice):
            return "its file system (\(fileSystem)) cannot encode file handles"
        case (.mark, .invalidArgument):
            return "fanotify_mark refused the events (FAN_RENAME needs Linux 5.17 or later)"
        case (.mark, .noSpace):
            return "the fanotify mark limit (fs.fanotify.max_user_marks=\(FanotifyBackend.sysctl("max_user_marks") ?? "?")) is reached"
        case (.resolveRoot, .staleNFSFileHandle):
            return "the root's file handle does not lead back to it on \(fileSystem)"
        default:
            break
        }
        return "\(failure.step.rawValue): \(failure.error) (\(failure.error.symbolicName))"
    }

    /// Why the fanotify group cannot be made. fanotify_init with directory handles needs no
    /// capability since Linux 5.13, so an EPERM there is a system call filter's, or an older
    /// kernel's demand for CAP_SYS_ADMIN.
    static func group(_ error: Errno, privileges: ProcessPrivileges) -> String {
        switch error {
        case .notPermitted where privileges.seccompFiltered:
            let alsoCapability = privileges.has(ProcessPrivileges.sysAdmin) == false ? " and adds CAP_SYS_ADMIN, which the file system mark needs" : ""
            return "the system call filter refuses fanotify_init (the unit's SystemCallFilter= allows it with \(fanotifyDropIn), which also allows fanotify_mark and open_by_handle_at\(alsoCapability))"
        case .notPermitted:
            return "fanotify_init needs CAP_SYS_ADMIN on this kernel (before Linux 5.13), which this process does not have (the unit's CapabilityBoundingSet leaves it out unless \(fanotifyDropIn) adds it)"
        case .invalidArgument:
            return "this kernel cannot report directory handles and names to fanotify (Linux 5.17 or later is needed)"
        case .tooManyOpenFiles:
            return "fanotify_init: \(error) (fs.fanotify.max_user_groups=\(FanotifyBackend.sysctl("max_user_groups") ?? "?") reached?)"
        default:
            return "fanotify_init: \(error) (\(error.symbolicName))"
        }
    }
}
