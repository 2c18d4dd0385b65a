import CWatchkeeperSystem

#if canImport(Glibc)
import Glibc
#endif

/// Splits a job's output stream into lines with bounded memory: a line longer than
/// `maxLineBytes` is emitted in pieces, so a job that prints a gigabyte without a
/// newline costs the daemon `maxLineBytes`, not a gigabyte.
public struct LineSplitter: Sendable {
    public struct Line: Equatable, Sendable {
        public var bytes: [UInt8]
        /// This piece was cut at `maxLineBytes`; the line goes on in the next piece.
        public var continues: Bool
    }

    public let maxLineBytes: Int
    private var partial: [UInt8] = []

    public init(maxLineBytes: Int = 16_384) {
        self.maxLineBytes = max(1, maxLineBytes)
        partial.reserveCapacity(min(self.maxLineBytes, 4_096))
    }

    public var bufferedBytes: Int { partial.count }

    public mutating func feed(_ chunk: UnsafeRawBufferPointer, emit: (Line) -> Void) {
        var start = 0
        let bytes = chunk.bindMemory(to: UInt8.self)
        while start < bytes.count {
            let room = maxLineBytes - partial.count
            let end = min(bytes.count, start + room)
            if let newline = bytes[start..<end].firstIndex(of: UInt8(ascii: "\n")) {
                partial.append(contentsOf: bytes[start..<newline])
                emit(Line(bytes: stripCarriageReturn(partial), continues: false))
                partial.removeAll(keepingCapacity: true)
                start = newline + 1
            } else {
                partial.append(contentsOf: bytes[start..<end])
                start = end
                if partial.count >= maxLineBytes {
                    emit(Line(bytes: partial, continues: true))
                    partial.removeAll(keepingCapacity: true)
                }
            }
        }
    }

    public mutating func feed(_ bytes: [UInt8], emit: (Line) -> Void) {
        bytes.withUnsafeBytes { feed($0, emit: emit) }
    }

    /// At end of stream: the last line, if it had no newline.
    public mutating func finish(emit: (Line) -> Void) {
        if !partial.isEmpty {
            emit(Line(bytes: stripCarriageReturn(partial), continues: false))
            partial.removeAll()
        }
    }

    private func stripCarriageReturn(_ bytes: [UInt8]) -> [UInt8] {
        bytes.last == UInt8(ascii: "\r") ? Array(bytes.dropLast()) : bytes
    }

    /// sd-daemon(3) style `<N>` prefix: a job can set a line's syslog priority.
    public static func priorityPrefix(_ bytes: [UInt8]) -> (priority: Int?, message: ArraySlice<UInt8>) {
        if bytes.count >= 3, bytes[0] == UInt8(ascii: "<"), bytes[2] == UInt8(ascii: ">"),
           (UInt8(ascii: "0")...UInt8(ascii: "7")).contains(bytes[1]) {
            return (Int(bytes[1] - UInt8(ascii: "0")), bytes[3...])
        }
        return (nil, bytes[...])
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
