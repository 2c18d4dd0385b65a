import CWatchkeeperSystem

#if canImport(Glibc)
import Glibc
#endif

/// Splits a job's output stream into lines with bounded memory: a line longer than
/// `maxLineBytes` is emitted in pieces, so a job that prints a gigabyte without a
/// newline costs the daemon `maxLineBytes`, not a gigabyte.
///
/// Lines are lent, not copied: a line that lies whole in the chunk is handed out as a
/// pointer into it, and only a line that spans chunks is gathered in `partial`. Output
/// is the daemon's hottest path (a job can write a gigabyte), so no line allocates.
public struct LineSplitter: Sendable {
    public let maxLineBytes: Int
    private var partial: [UInt8] = []

    public init(maxLineBytes: Int = 16_384) {
        self.maxLineBytes = max(1, maxLineBytes)
    }

    public var bufferedBytes: Int { partial.count }
    /// Memory held for a line that spans reads: none until one does. Reserved at the start,
    /// it cost every job 8 KiB allocated and freed for its two streams, which most jobs
    /// never write a split line to (1.2 % of the daemon's CPU in a 20,000-file burst).
    var reservedBytes: Int { partial.capacity }

    /// `emit(line, continues)`: the line without its newline (and without a CR before it);
    /// `continues` when it was cut at `maxLineBytes` and goes on in the next piece. The
    /// pointer is valid only during the call.
    public mutating func feed(_ chunk: UnsafeRawBufferPointer, emit: (UnsafeBufferPointer<UInt8>, _ continues: Bool) -> Void) {
        let bytes = chunk.bindMemory(to: UInt8.self)
        guard let base = bytes.baseAddress else { return }
        var start = 0
        while start < bytes.count {
            let room = maxLineBytes - partial.count
            let end = min(bytes.count, start + room)
            if let found = memchr(base + start, Int32(UInt8(ascii: "\n")), end - start) {
                let newline = base.distance(to: found.assumingMemoryBound(to: UInt8.self))
                if partial.isEmpty {
                    emit(Self.strippingCarriageReturn(UnsafeBufferPointer(start: base + start, count: newline - start)), false)
                } else {
                    partial.append(contentsOf: UnsafeBufferPointer(start: base + start, count: newline - start))
                    partial.withUnsafeBufferPointer { emit(Self.strippingCarriageReturn($0), false) }
                    partial.removeAll(keepingCapacity: true)
                }
                start = newline + 1
            } else if partial.isEmpty && end - start == maxLineBytes {
                emit(UnsafeBufferPointer(start: base + start, count: maxLineBytes), true)
                start = end
            } else {
                if partial.capacity == 0 { partial.reserveCapacity(min(maxLineBytes, 4_096)) }
                partial.append(contentsOf: UnsafeBufferPointer(start: base + start, count: end - start))
                start = end
                if partial.count >= maxLineBytes {
                    partial.withUnsafeBufferPointer { emit($0, true) }
                    partial.removeAll(keepingCapacity: true)
                }
            }
        }
    }

    /// At end of stream: the last line, if it had no newline.
    public mutating func finish(emit: (UnsafeBufferPointer<UInt8>, _ continues: Bool) -> Void) {
        if !partial.isEmpty {
            partial.withUnsafeBufferPointer { emit(Self.strippingCarriageReturn($0), false) }
            partial.removeAll()
        }
    }

    private static func strippingCarriageReturn(_ line: UnsafeBufferPointer<UInt8>) -> UnsafeBufferPointer<UInt8> {
        line.last == UInt8(ascii: "\r") ? UnsafeBufferPointer(rebasing: line.dropLast()) : line
    }

    /// sd-daemon(3) style `<N>` prefix: a job can set a line's syslog priority. Returns
    /// the priority and where the message starts.
    public static func priorityPrefix(_ bytes: UnsafeBufferPointer<UInt8>) -> (priority: Int?, messageStart: Int) {
        if bytes.count >= 3, bytes[0] == UInt8(ascii: "<"), bytes[2] == UInt8(ascii: ">"),
           (UInt8(ascii: "0")...UInt8(ascii: "7")).contains(bytes[1]) {
            return (Int(bytes[1] - UInt8(ascii: "0")), 3)
        }
        return (nil, 0)
    }
}

/// The progress channel: a job writes `PROGRESS=42` or `STATUS=importing batch 7`
/// lines to WATCHKEEPER_PROGRESS_FD. Only the latest value of each matters, so a chunk
/// is scanned backwards for its last complete lines; a job sending 100,000 updates a
/// second costs one scan per read, not one parse per update.
public struct ProgressParser: Sendable {
    public private(set) var progress: Double?
    public private(set) var status: String?
    public private(set) var updates: UInt64 = 0
    private var partial: [UInt8] = []
    static let maxLine = 4_096
    static let progressKey = Array("PROGRESS=".utf8)
    static let statusKey = Array("STATUS=".utf8)

    static let statusNeedle = Array("\nSTATUS=".utf8)

    static func hasPrefix(_ bytes: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int, _ key: [UInt8]) -> Bool {
        guard end - start >= key.count else { return false }
        for offset in 0..<key.count where bytes[start + offset] != key[offset] { return false }
        return true
    }

    public init() {}

    /// Returns true when the progress or status changed.
    @discardableResult
    public mutating func feed(_ chunk: UnsafeRawBufferPointer) -> Bool {
        let bytes = chunk.bindMemory(to: UInt8.self)
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return false }
        guard let lastNewlinePointer = wk_memrchr(base, Int32(UInt8(ascii: "\n")), bytes.count) else {
            if partial.count + bytes.count <= Self.maxLine { partial.append(contentsOf: bytes) } else { partial.removeAll() }
            return false
        }
        let lastNewline = base.distance(to: lastNewlinePointer.assumingMemoryBound(to: UInt8.self))
        // The chunk's first line began in the previous chunk: complete it once.
        let firstNewline = base.distance(to: memchr(base, Int32(UInt8(ascii: "\n")), bytes.count)!.assumingMemoryBound(to: UInt8.self))
        let head = partial + Array(bytes[..<firstNewline])
        let body = UnsafeBufferPointer(rebasing: bytes[(firstNewline + 1)..<(lastNewline + 1)])

        var changed = false
        // Latest PROGRESS=: walk lines back from the end (it is usually the last one).
        var progressLine: ArraySlice<UInt8>?
        var end = body.count - 1 // index of a line's newline
        while end >= 0, progressLine == nil {
            let startPointer = end > 0 ? wk_memrchr(body.baseAddress!, Int32(UInt8(ascii: "\n")), end) : nil
            let start = startPointer.map { body.baseAddress!.distance(to: $0.assumingMemoryBound(to: UInt8.self)) + 1 } ?? 0
            if Self.hasPrefix(body, start, end, Self.progressKey) { progressLine = ArraySlice(body[start..<end]) }
            end = start - 1
        }
        if progressLine == nil, head.starts(with: Self.progressKey) { progressLine = head[...] }
        // Latest STATUS=: rare, so found with memmem at SIMD speed rather than line by line.
        var statusLine: ArraySlice<UInt8>?
        var searchFrom = 0
        while searchFrom < body.count,
              let hit = wk_memmem(body.baseAddress! + searchFrom, body.count - searchFrom, Self.statusNeedle, Self.statusNeedle.count) {
            let at = body.baseAddress!.distance(to: hit.assumingMemoryBound(to: UInt8.self)) + 1 // after the newline
            let lineEnd = body.baseAddress!.distance(to: memchr(body.baseAddress! + at, Int32(UInt8(ascii: "\n")), body.count - at)!.assumingMemoryBound(to: UInt8.self))
            statusLine = ArraySlice(body[at..<lineEnd])
            searchFrom = lineEnd
        }
        if statusLine == nil {
            if Self.hasPrefix(body, 0, body.count, Self.statusKey) {
                let lineEnd = body.firstIndex(of: UInt8(ascii: "\n")) ?? body.count
                statusLine = ArraySlice(body[0..<lineEnd])
            } else if head.starts(with: Self.statusKey) {
                statusLine = head[...]
            }
        }
        if var line = progressLine {
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            let text = String(decoding: line.dropFirst(Self.progressKey.count), as: UTF8.self).trimmingCharacters(in: "% ")
            if let value = Double(text), value.isFinite {
                let clamped = min(100, max(0, value))
                if clamped != progress { progress = clamped; changed = true }
            }
        }
        if var line = statusLine {
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            let text = String(decoding: line.dropFirst(Self.statusKey.count).prefix(512), as: UTF8.self)
            if text != status { status = text; changed = true }
        }
        updates += 1 + Self.countNewlines(body)
        let tail = bytes[(lastNewline + 1)...]
        partial = tail.count <= Self.maxLine ? Array(tail) : []
        return changed
    }
}

extension ProgressParser {
    /// Branch-free so the optimiser vectorises it: counting is most of the cost of a flood.
    static func countNewlines(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var count: UInt64 = 0
        for byte in bytes {
            count &+= byte == UInt8(ascii: "\n") ? 1 : 0
        }
        return count
    }
}

extension String {
    func trimmingCharacters(in set: String) -> String {
        let characters = Set(set)
        return String(self.drop { characters.contains($0) }.reversed().drop { characters.contains($0) }.reversed())
    }
}
