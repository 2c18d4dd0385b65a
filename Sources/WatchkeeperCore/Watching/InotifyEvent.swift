import CWatchkeeperSystem

#if canImport(Glibc)
import Glibc
#endif

/// What `inotify_add_watch` returned: the kernel's name for one watched inode within one
/// inotify instance. Two paths to the same directory (or two rules watching it) get the
/// same descriptor; a descriptor is not reused soon after removal (the kernel allocates
/// them cyclically), but it may be after a wrap-around.
public struct WatchDescriptor: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: Int32

    public init(rawValue: Int32) {
        self.rawValue = rawValue
    }

    /// The descriptor of IN_Q_OVERFLOW, which belongs to no watch.
    public static let none = WatchDescriptor(rawValue: -1)

    public static func < (lhs: WatchDescriptor, rhs: WatchDescriptor) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String { "wd \(rawValue)" }
}

/// Every IN_* bit, for watch masks and for decoded events, with the kernel's names.
public struct InotifyMask: OptionSet, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32

    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    private init(_ bit: Int32) {
        self.rawValue = UInt32(bitPattern: bit)
    }

    // Events a watch asks for, reported on the watch's entries (with a name) or itself.
    public static let access = InotifyMask(IN_ACCESS)
    public static let modify = InotifyMask(IN_MODIFY)
    public static let attrib = InotifyMask(IN_ATTRIB)
    public static let closeWrite = InotifyMask(IN_CLOSE_WRITE)
    public static let closeNoWrite = InotifyMask(IN_CLOSE_NOWRITE)
    public static let open = InotifyMask(IN_OPEN)
    public static let movedFrom = InotifyMask(IN_MOVED_FROM)
    public static let movedTo = InotifyMask(IN_MOVED_TO)
    public static let create = InotifyMask(IN_CREATE)
    public static let delete = InotifyMask(IN_DELETE)
    /// The watched inode itself was deleted; IN_IGNORED follows.
    public static let deleteSelf = InotifyMask(IN_DELETE_SELF)
    /// The watched inode itself was renamed; the watch follows the inode, not the path.
    public static let moveSelf = InotifyMask(IN_MOVE_SELF)

    // Reported whether asked for or not.
    /// The file system holding the watched inode was unmounted; IN_IGNORED follows.
    public static let unmount = InotifyMask(IN_UNMOUNT)
    /// The instance's queue overflowed (fs.inotify.max_queued_events): events were lost.
    public static let queueOverflow = InotifyMask(IN_Q_OVERFLOW)
    /// The watch is gone (removed, or its inode deleted or unmounted); the descriptor is dead.
    public static let ignored = InotifyMask(IN_IGNORED)
    /// The event's subject is a directory.
    public static let isDirectory = InotifyMask(IN_ISDIR)

    // Options for inotify_add_watch, never reported.
    public static let onlyDirectory = InotifyMask(IN_ONLYDIR)
    public static let dontFollow = InotifyMask(IN_DONT_FOLLOW)
    /// No events for entries after they were unlinked (a file still open elsewhere).
    public static let excludeUnlinked = InotifyMask(IN_EXCL_UNLINK)
    /// Set by `InotifyWatcher.addWatch` from its `existing` argument, never by callers.
    public static let maskCreate = InotifyMask(IN_MASK_CREATE)
    /// Set by `InotifyWatcher.addWatch` from its `existing` argument, never by callers.
    public static let maskAdd = InotifyMask(IN_MASK_ADD)
    public static let oneShot = InotifyMask(rawValue: IN_ONESHOT)

    public static let close: InotifyMask = [.closeWrite, .closeNoWrite]
    public static let move: InotifyMask = [.movedFrom, .movedTo]
    /// IN_ALL_EVENTS: every event a watch can ask for.
    public static let allEvents = InotifyMask(rawValue: UInt32(WK_IN_ALL_EVENTS))
    /// What `addWatch` decides itself.
    static let existingWatchBits: InotifyMask = [.maskAdd, .maskCreate]

    /// Kernel names in bit order, as inotifywait and the kernel documentation write them.
    public static let names: [(mask: InotifyMask, name: String)] = [
        (.access, "ACCESS"), (.modify, "MODIFY"), (.attrib, "ATTRIB"), (.closeWrite, "CLOSE_WRITE"),
        (.closeNoWrite, "CLOSE_NOWRITE"), (.open, "OPEN"), (.movedFrom, "MOVED_FROM"), (.movedTo, "MOVED_TO"),
        (.create, "CREATE"), (.delete, "DELETE"), (.deleteSelf, "DELETE_SELF"), (.moveSelf, "MOVE_SELF"),
        (.unmount, "UNMOUNT"), (.queueOverflow, "Q_OVERFLOW"), (.ignored, "IGNORED"), (.onlyDirectory, "ONLYDIR"),
        (.dontFollow, "DONT_FOLLOW"), (.excludeUnlinked, "EXCL_UNLINK"), (.maskCreate, "MASK_CREATE"),
        (.maskAdd, "MASK_ADD"), (.isDirectory, "ISDIR"), (.oneShot, "ONESHOT"),
    ]

    /// "CLOSE_WRITE|ISDIR", for the dump and logs; bits without a name (a newer kernel's)
    /// are shown in hex rather than dropped; "0" for no bits.
    public var description: String {
        describeBits(rawValue, names: Self.names.map { ($0.mask.rawValue, $0.name) })
    }
}

/// "CLOSE_WRITE|ISDIR": the named bits of `rawValue`, in the order of `names`, then any
/// left without a name in hex; "0" for none. For inotify's and fanotify's masks.
func describeBits<Bits: FixedWidthInteger>(_ rawValue: Bits, names: [(Bits, String)]) -> String {
    var parts: [String] = []
    var rest = rawValue
    for (bits, name) in names where rawValue & bits == bits {
        parts.append(name)
        rest &= ~bits
    }
    if rest != 0 { parts.append("0x" + String(rest, radix: 16)) }
    return parts.isEmpty ? "0" : parts.joined(separator: "|")
}

/// One `struct inotify_event` as read from the inotify fd, copied out of the read buffer.
public struct InotifyEvent: Hashable, Sendable, CustomStringConvertible {
    public let wd: WatchDescriptor
    public let mask: InotifyMask
    /// Pairs an IN_MOVED_FROM with its IN_MOVED_TO (same rename); 0 for other events.
    public let cookie: UInt32
    /// The entry's name within the watched directory, as bytes (file names are bytes on
    /// Linux, not necessarily UTF-8); empty for events on the watched inode itself.
    public let name: [UInt8]

    public init(wd: WatchDescriptor, mask: InotifyMask, cookie: UInt32, name: [UInt8]) {
        self.wd = wd
        self.mask = mask
        self.cookie = cookie
        self.name = name
    }

    public var isDirectory: Bool { mask.contains(.isDirectory) }

    public var description: String {
        let shownName = name.isEmpty ? "" : " \"\(String(decoding: name, as: UTF8.self))\""
        return "\(wd) \(mask)\(cookie == 0 ? "" : " cookie \(cookie)")\(shownName)"
    }

    /// The fixed part of `struct inotify_event`: wd, mask, cookie, len.
    static let headerSize = MemoryLayout<inotify_event>.size

    /// Decodes whole records from what one read(2) returned and appends them to `events`.
    /// The kernel only returns whole records; a truncated one (which would mean a kernel
    /// bug or a buffer we got wrong) ends decoding instead of reading past the data.
    /// Returns the number of bytes decoded.
    @discardableResult
    @_spi(Fuzzing) public static func decode(_ bytes: UnsafeRawBufferPointer, into events: inout [InotifyEvent]) -> Int {
        var offset = 0
        while bytes.count - offset >= headerSize {
            let wd = bytes.loadUnaligned(fromByteOffset: offset, as: Int32.self)
            let mask = bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
            let cookie = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self)
            let length = Int(bytes.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
            guard bytes.count - offset - headerSize >= length else { break }
            // The name is NUL-padded to an alignment boundary inside `len`.
            let nameBytes = UnsafeRawBufferPointer(rebasing: bytes[(offset + headerSize)..<(offset + headerSize + length)])
            let nameLength = nameBytes.firstIndex(of: 0) ?? length
            events.append(InotifyEvent(wd: WatchDescriptor(rawValue: wd), mask: InotifyMask(rawValue: mask), cookie: cookie,
                                       name: Array(nameBytes[0..<nameLength])))
            offset += headerSize + length
        }
        return offset
    }
}
