import CWatchkeeperSystem

#if canImport(Glibc)
import Glibc
#endif

/// The FAN_* bits of a mark's mask and of a decoded event, with the kernel's names.
public struct FanotifyMask: OptionSet, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64

    public init(rawValue: UInt64) {
        self.rawValue = rawValue
    }

    private init(_ bit: some BinaryInteger) {
        self.rawValue = UInt64(truncatingIfNeeded: bit)
    }

    // With FAN_REPORT_DFID_NAME, these come with the entry's directory and name.
    public static let modify = FanotifyMask(FAN_MODIFY)
    public static let attrib = FanotifyMask(FAN_ATTRIB)
    public static let closeWrite = FanotifyMask(FAN_CLOSE_WRITE)
    public static let movedFrom = FanotifyMask(FAN_MOVED_FROM)
    public static let movedTo = FanotifyMask(FAN_MOVED_TO)
    public static let create = FanotifyMask(FAN_CREATE)
    public static let delete = FanotifyMask(FAN_DELETE)
    /// A directory's own: the record names the directory itself with the name ".". A
    /// non-directory's is reported only with FAN_REPORT_FID, as an object handle alone.
    public static let deleteSelf = FanotifyMask(FAN_DELETE_SELF)
    /// As `deleteSelf`: a directory's comes with its own handle and ".".
    public static let moveSelf = FanotifyMask(FAN_MOVE_SELF)
    /// One event for both halves of a rename (Linux 5.17+): old and new directory and name.
    /// MOVED_FROM and MOVED_TO carry no cookie in fanotify, so this is the only pairing.
    public static let rename = FanotifyMask(FAN_RENAME)
    /// The subject is a directory. In a mark's mask it asks for directories' events too.
    public static let onDirectory = FanotifyMask(FAN_ONDIR)
    /// The group's queue overflowed (fs.fanotify.max_queued_events): events were lost.
    /// No record follows it.
    public static let queueOverflow = FanotifyMask(FAN_Q_OVERFLOW)

    /// What a directory-and-name watcher asks for: the counterpart of the inotify mask
    /// DirectoryWatcher uses.
    public static let treeChanges: FanotifyMask = [
        .create, .delete, .movedFrom, .movedTo, .closeWrite, .modify, .attrib, .deleteSelf, .moveSelf,
    ]

    public static let names: [(mask: FanotifyMask, name: String)] = [
        (.modify, "MODIFY"), (.attrib, "ATTRIB"), (.closeWrite, "CLOSE_WRITE"), (.movedFrom, "MOVED_FROM"),
        (.movedTo, "MOVED_TO"), (.create, "CREATE"), (.delete, "DELETE"), (.deleteSelf, "DELETE_SELF"),
        (.moveSelf, "MOVE_SELF"), (.queueOverflow, "Q_OVERFLOW"), (.rename, "RENAME"), (.onDirectory, "ONDIR"),
    ]

    /// "CREATE|ONDIR"; bits without a name here in hex; "0" for none.
    public var description: String {
        describeBits(rawValue, names: Self.names.map { ($0.mask.rawValue, $0.name) })
    }
}

/// A file handle as fanotify reports it: what `open_by_handle_at` takes, plus the file
/// system it belongs to. Handles carry the inode's generation on tmpfs, ext4, xfs and
/// btrfs, so a handle names one directory for its whole life and never a later one.
public struct FanotifyFileHandle: Hashable, Sendable, CustomStringConvertible {
    /// `__kernel_fsid_t`'s eight bytes as one number (what statfs's f_fsid holds, read the
    /// same way), to tell handles of different file systems apart.
    public let fileSystemID: UInt64
    /// `file_handle.handle_type`, which the file system chose and open_by_handle_at needs.
    public let type: Int32
    public let bytes: [UInt8]

    public init(fileSystemID: UInt64, type: Int32, bytes: [UInt8]) {
        self.fileSystemID = fileSystemID
        self.type = type
        self.bytes = bytes
    }

    public var description: String {
        let hex = bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
        return "fh \(type):\(hex)"
    }
}

/// Why a read's bytes were not all decoded. The kernel writes only well-formed events;
/// these mean a kernel newer than this decoder in a way it cannot skip, or a bug.
public enum FanotifyMalformation: Error, Hashable, Sendable {
    // The framing: decoding stops, since nothing after it can be trusted.
    /// Fewer bytes left than one event's metadata.
    case truncatedMetadata
    /// Not FANOTIFY_METADATA_VERSION: a layout this decoder does not know.
    case unsupportedVersion(UInt8)
    /// metadata_len below the struct's size or beyond event_len.
    case metadataLength(UInt16)
    /// event_len below metadata_len or past the end of the read.
    case eventLength(UInt32)
    // One event's records: that event is dropped, and decoding goes on after it.
    /// Fewer bytes left in the event than a record header.
    case truncatedRecordHeader
    /// A record shorter than its header (a zero length would never advance) or longer than
    /// what is left of its event.
    case recordLength(type: UInt8, length: UInt16)
    /// A file handle longer than its record or than MAX_HANDLE_SZ.
    case handleLength(UInt32)
    /// A name without its terminating NUL inside the record.
    case unterminatedName
    /// Two records of one kind in one event.
    case duplicateRecord(type: UInt8)
}

/// One fanotify event of a group initialised with FAN_REPORT_DFID_NAME (and optionally
/// FAN_REPORT_FID), copied out of the read buffer.
///
/// The kernel merges an event into one still queued for the same entry (same directory,
/// name and, with FAN_REPORT_FID, object; the kernel searches up to 128 queued events, not
/// only the last), so one event may carry several bits: a new file written and closed arrives
/// as CREATE|MODIFY|CLOSE_WRITE, and a name created and removed before the read as
/// CREATE|DELETE, with nothing to say which came first. Only the current state (a stat)
/// tells; that is fanotify's, not this decoder's.
///
/// The metadata's fd is not kept: a group that reports file handles never opens one
/// (it is always FAN_NOFD), so there is nothing to close.
public struct FanotifyEvent: Hashable, Sendable, CustomStringConvertible {
    public let mask: FanotifyMask
    /// The process that caused it (a thread id with FAN_REPORT_TID); 0 for an overflow.
    public let pid: Int32
    /// The directory holding the entry (DFID_NAME, DFID or, for FAN_RENAME, OLD_DFID_NAME);
    /// for an event on a directory itself, that directory, with `name` ".".
    public let directory: FanotifyFileHandle?
    /// The entry's name in `directory`, as bytes without the NUL; empty without a name.
    public let name: [UInt8]
    /// The object itself (FID record, with FAN_REPORT_FID only).
    public let object: FanotifyFileHandle?
    /// FAN_RENAME's destination (NEW_DFID_NAME); nil and empty for every other event.
    public let newDirectory: FanotifyFileHandle?
    public let newName: [UInt8]

    public init(mask: FanotifyMask, pid: Int32 = 0, directory: FanotifyFileHandle? = nil, name: [UInt8] = [],
                object: FanotifyFileHandle? = nil, newDirectory: FanotifyFileHandle? = nil, newName: [UInt8] = []) {
        self.mask = mask
        self.pid = pid
        self.directory = directory
        self.name = name
        self.object = object
        self.newDirectory = newDirectory
        self.newName = newName
    }

    public var isDirectory: Bool { mask.contains(.onDirectory) }

    /// An event on the directory `directory` names itself (DELETE_SELF, MOVE_SELF, ATTRIB
    /// of a directory), which the kernel reports as the entry "." of that directory.
    public var isOnDirectoryItself: Bool { name == [UInt8(ascii: ".")] }

    public var description: String {
        var text = "\(mask)"
        if let directory { text += " \(directory)" }
        if !name.isEmpty { text += " \"\(String(decoding: name, as: UTF8.self))\"" }
        if let newDirectory { text += " -> \(newDirectory) \"\(String(decoding: newName, as: UTF8.self))\"" }
        if let object { text += " object \(object)" }
        return text
    }

    /// What one call to `decode` did with its bytes.
    public struct Decoding: Hashable, Sendable {
        /// Bytes of whole events walked through, kept or dropped.
        public var consumedBytes = 0
        /// Events whose records were malformed, left out of the result.
        public var droppedEvents = 0
        /// The first problem met, if any.
        public var firstMalformation: FanotifyMalformation?

        public init(consumedBytes: Int = 0, droppedEvents: Int = 0, firstMalformation: FanotifyMalformation? = nil) {
            self.consumedBytes = consumedBytes
            self.droppedEvents = droppedEvents
            self.firstMalformation = firstMalformation
        }
    }

    static let metadataSize = Int(WK_FANOTIFY_METADATA_LEN)
    static let recordHeaderSize = 4
    /// Record header, fsid, handle_bytes, handle_type: the handle's bytes start here.
    static let fileIDHeaderSize = Int(WK_FANOTIFY_FID_HEADER_LEN)
    static let maximumHandleSize = Int(WK_MAX_HANDLE_SZ)

    /// Decodes the events in what one read(2) returned and appends them to `events`.
    ///
    /// A pure function of the bytes, for tests and the fuzzer: every length read from the
    /// buffer is checked against what is left before it is used. Broken framing (metadata
    /// or event length) stops decoding, since the next event's start is then unknown; a
    /// broken record inside a well-framed event drops only that event. Unknown record types
    /// (PIDFD, ERROR, a newer kernel's) are skipped by their length.
    @discardableResult
    @_spi(Fuzzing) public static func decode(_ bytes: UnsafeRawBufferPointer, into events: inout [FanotifyEvent]) -> Decoding {
        var decoding = Decoding()
        var offset = 0
        while offset < bytes.count {
            guard bytes.count - offset >= metadataSize else {
                decoding.firstMalformation = decoding.firstMalformation ?? .truncatedMetadata
                break
            }
            let eventLength = bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)
            let version = bytes[offset + 4]
            let metadataLength = bytes.loadUnaligned(fromByteOffset: offset + 6, as: UInt16.self)
            var framing: FanotifyMalformation?
            if Int32(version) != FANOTIFY_METADATA_VERSION {
                framing = .unsupportedVersion(version)
            } else if Int(metadataLength) < metadataSize || metadataLength > eventLength {
                framing = .metadataLength(metadataLength)
            } else if Int(eventLength) > bytes.count - offset {
                framing = .eventLength(eventLength)
            }
            if let framing {
                decoding.firstMalformation = decoding.firstMalformation ?? framing
                break
            }
            let event = UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + Int(eventLength))])
            switch decodeEvent(event, metadataLength: Int(metadataLength)) {
            case .success(let decoded):
                events.append(decoded)
            case .failure(let problem):
                decoding.droppedEvents += 1
                decoding.firstMalformation = decoding.firstMalformation ?? problem
            }
            offset += Int(eventLength)
            decoding.consumedBytes = offset
        }
        return decoding
    }

    /// One event whose framing is checked: `event` is exactly its event_len bytes.
    private static func decodeEvent(_ event: UnsafeRawBufferPointer, metadataLength: Int) -> Result<FanotifyEvent, FanotifyMalformation> {
        let mask = FanotifyMask(rawValue: event.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        let pid = event.loadUnaligned(fromByteOffset: 20, as: Int32.self)
        var directory: FanotifyFileHandle?
        var name: [UInt8] = []
        var object: FanotifyFileHandle?
        var newDirectory: FanotifyFileHandle?
        var newName: [UInt8] = []
        var offset = metadataLength
        while offset < event.count {
            guard event.count - offset >= recordHeaderSize else { return .failure(.truncatedRecordHeader) }
            let type = event[offset]
            let length = event.loadUnaligned(fromByteOffset: offset + 2, as: UInt16.self)
            guard Int(length) >= recordHeaderSize, Int(length) <= event.count - offset else {
                return .failure(.recordLength(type: type, length: length))
            }
            let record = UnsafeRawBufferPointer(rebasing: event[offset..<(offset + Int(length))])
            offset += Int(length)
            switch Int32(type) {
            case FAN_EVENT_INFO_TYPE_DFID_NAME, FAN_EVENT_INFO_TYPE_DFID, FAN_EVENT_INFO_TYPE_OLD_DFID_NAME:
                guard directory == nil else { return .failure(.duplicateRecord(type: type)) }
                let named = Int32(type) != FAN_EVENT_INFO_TYPE_DFID
                switch decodeFileID(record, named: named) {
                case .success(let found): (directory, name) = found
                case .failure(let problem): return .failure(problem)
                }
            case FAN_EVENT_INFO_TYPE_NEW_DFID_NAME:
                guard newDirectory == nil else { return .failure(.duplicateRecord(type: type)) }
                switch decodeFileID(record, named: true) {
                case .success(let found): (newDirectory, newName) = found
                case .failure(let problem): return .failure(problem)
                }
            case FAN_EVENT_INFO_TYPE_FID:
                guard object == nil else { return .failure(.duplicateRecord(type: type)) }
                switch decodeFileID(record, named: false) {
                case .success(let found): object = found.handle
                case .failure(let problem): return .failure(problem)
                }
            default:
                continue
            }
        }
        return .success(FanotifyEvent(mask: mask, pid: pid, directory: directory, name: name, object: object,
                                      newDirectory: newDirectory, newName: newName))
    }

    /// `struct fanotify_event_info_fid`: header, fsid, then a `struct file_handle` and, for
    /// the named kinds, a NUL-terminated name padded to the record's length.
    private static func decodeFileID(_ record: UnsafeRawBufferPointer, named: Bool) -> Result<(handle: FanotifyFileHandle, name: [UInt8]), FanotifyMalformation> {
        guard record.count >= fileIDHeaderSize else {
            return .failure(.recordLength(type: record[0], length: UInt16(record.count)))
        }
        let fileSystemID = record.loadUnaligned(fromByteOffset: 4, as: UInt64.self)
        let handleLength = record.loadUnaligned(fromByteOffset: 12, as: UInt32.self)
        let handleType = record.loadUnaligned(fromByteOffset: 16, as: Int32.self)
        guard handleLength <= maximumHandleSize, Int(handleLength) <= record.count - fileIDHeaderSize else {
            return .failure(.handleLength(handleLength))
        }
        let handleEnd = fileIDHeaderSize + Int(handleLength)
        let handle = FanotifyFileHandle(fileSystemID: fileSystemID, type: handleType,
                                        bytes: Array(record[fileIDHeaderSize..<handleEnd]))
        guard named else { return .success((handle, [])) }
        let rest = record[handleEnd...]
        guard let end = rest.firstIndex(of: 0) else { return .failure(.unterminatedName) }
        return .success((handle, Array(rest[..<end])))
    }
}
