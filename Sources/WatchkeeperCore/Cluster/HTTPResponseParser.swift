/// An HTTP/1.1 response read incrementally, as etcd's gateway sends it: a status line,
/// headers, then a body framed by Content-Length or chunked. Bytes go in as they arrive;
/// what they complete comes out. Bounded: a head over 16 KiB or a body over `maxBody` is an
/// error, so a confused or hostile endpoint cannot grow the daemon.
struct HTTPResponseParser {
    enum Event: Equatable {
        case head(status: Int)
        case body([UInt8])
        case end
    }

    struct ParseError: Error, Equatable, CustomStringConvertible {
        let description: String
    }

    private enum Phase {
        case head
        case fixed(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case untilClose
        case done
    }

    static let maxHead = 16 * 1024
    let maxBody: Int
    private var phase: Phase = .head
    private var buffer: [UInt8] = []
    private(set) var status = 0
    private(set) var keepAlive = true
    private var bodyBytes = 0

    init(maxBody: Int) {
        self.maxBody = maxBody
    }

    /// Feeds bytes; returns the events they complete, in order.
    mutating func feed(_ bytes: some Collection<UInt8>) throws(ParseError) -> [Event] {
        buffer.append(contentsOf: bytes)
        var events: [Event] = []
        var index = 0
        defer { buffer.removeFirst(index) }
        while index < buffer.count {
            switch phase {
            case .head:
                guard let end = ByteSearch.firstOffset(of: [13, 10, 13, 10], in: buffer, from: index) else {
                    if buffer.count - index > Self.maxHead { throw ParseError(description: "response head over \(Self.maxHead) bytes") }
                    return events
                }
                try parseHead(buffer[index..<end])
                index = end + 4
                events.append(.head(status: status))
                if case .done = phase { events.append(.end) }
            case .fixed(let remaining):
                let take = min(remaining, buffer.count - index)
                try countBody(take)
                events.append(.body(Array(buffer[index..<index + take])))
                index += take
                phase = remaining - take == 0 ? .done : .fixed(remaining: remaining - take)
                if case .done = phase { events.append(.end) }
            case .chunkSize:
                guard let end = ByteSearch.firstOffset(of: [13, 10], in: buffer, from: index) else {
                    if buffer.count - index > 1024 { throw ParseError(description: "chunk size line over 1024 bytes") }
                    return events
                }
                let line = buffer[index..<end].prefix { $0 != UInt8(ascii: ";") }
                guard let size = Int(String(decoding: line, as: UTF8.self).trimmingSpaces(), radix: 16), size >= 0 else {
                    throw ParseError(description: "bad chunk size")
                }
                index = end + 2
                phase = size == 0 ? .trailers : .chunkData(remaining: size)
            case .chunkData(let remaining):
                let take = min(remaining, buffer.count - index)
                try countBody(take)
                events.append(.body(Array(buffer[index..<index + take])))
                index += take
                phase = remaining - take == 0 ? .chunkDataEnd : .chunkData(remaining: remaining - take)
            case .chunkDataEnd:
                guard buffer.count - index >= 2 else { return events }
                guard buffer[index] == 13, buffer[index + 1] == 10 else { throw ParseError(description: "chunk not followed by CRLF") }
                index += 2
                phase = .chunkSize
            case .trailers:
                guard let end = ByteSearch.firstOffset(of: [13, 10], in: buffer, from: index) else { return events }
                let empty = end == index
                index = end + 2
                if empty {
                    phase = .done
                    events.append(.end)
                }
            case .untilClose:
                let take = buffer.count - index
                try countBody(take)
                events.append(.body(Array(buffer[index...])))
                index = buffer.count
            case .done:
                throw ParseError(description: "data after the end of the response")
            }
        }
        return events
    }

    /// The connection closed: the end of a body framed by the close, or an error.
    mutating func closed() -> Event? {
        switch phase {
        case .untilClose:
            phase = .done
            return .end
        case .done: return nil
        default: return nil
        }
    }

    private mutating func countBody(_ count: Int) throws(ParseError) {
        bodyBytes += count
        if bodyBytes > maxBody { throw ParseError(description: "response body over \(maxBody) bytes") }
    }

    private mutating func parseHead(_ head: ArraySlice<UInt8>) throws(ParseError) {
        let lines = head.split(separator: 10, omittingEmptySubsequences: false).map { line -> String in
            String(decoding: line.last == 13 ? line.dropLast() : line, as: UTF8.self)
        }
        guard let statusLine = lines.first, statusLine.hasPrefix("HTTP/1.") else {
            throw ParseError(description: "not an HTTP/1.x response")
        }
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, let code = Int(parts[1]), (100...599).contains(code) else {
            throw ParseError(description: "bad status line")
        }
        status = code
        keepAlive = !statusLine.hasPrefix("HTTP/1.0")
        var length: Int?
        var chunked = false
        for line in lines.dropFirst() where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw ParseError(description: "bad header line") }
            let name = line[..<colon].lowercased()
            let value = String(line[line.index(after: colon)...]).trimmingSpaces()
            switch name {
            case "content-length":
                guard let parsed = Int(value), parsed >= 0 else { throw ParseError(description: "bad Content-Length") }
                length = parsed
            case "transfer-encoding":
                chunked = value.lowercased().contains(utf8: "chunked")
            case "connection":
                if value.lowercased().contains(utf8: "close") { keepAlive = false }
                if value.lowercased().contains(utf8: "keep-alive") { keepAlive = true }
            default: break
            }
        }
        if chunked {
            phase = .chunkSize
        } else if let length {
            if length > maxBody { throw ParseError(description: "response body over \(maxBody) bytes") }
            phase = length == 0 ? .done : .fixed(remaining: length)
        } else if code == 204 || code == 304 || code < 200 {
            phase = .done
        } else {
            keepAlive = false
            phase = .untilClose
        }
    }
}

extension String {
    func trimmingSpaces() -> String {
        var view = Substring(self)
        while let first = view.first, first == " " || first == "\t" { view = view.dropFirst() }
        while let last = view.last, last == " " || last == "\t" { view = view.dropLast() }
        return String(view)
    }
}

/// Splits a stream of concatenated JSON objects (the gateway's streaming responses: one
/// object per message, with or without newlines between) into whole objects.
struct JSONObjectSplitter {
    private var pending: [UInt8] = []
    private var depth = 0
    private var inString = false
    private var escaped = false
    private var scanned = 0
    let maxObject: Int

    init(maxObject: Int) {
        self.maxObject = maxObject
    }

    mutating func feed(_ bytes: [UInt8]) -> (objects: [[UInt8]], tooLarge: Bool) {
        pending.append(contentsOf: bytes)
        var objects: [[UInt8]] = []
        var start = 0
        var index = scanned
        while index < pending.count {
            let byte = pending[index]
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
            } else if byte == UInt8(ascii: "\"") {
                inString = true
            } else if byte == UInt8(ascii: "{") {
                if depth == 0 { start = index }
                depth += 1
            } else if byte == UInt8(ascii: "}") {
                depth -= 1
                if depth == 0 { objects.append(Array(pending[start...index])) ; start = index + 1 }
                if depth < 0 { depth = 0 }
            } else if depth == 0 {
                start = index + 1
            }
            index += 1
        }
        if depth == 0 {
            pending.removeAll(keepingCapacity: true)
            scanned = 0
        } else {
            pending.removeFirst(start)
            scanned = pending.count
        }
        return (objects, pending.count > maxObject)
    }
}
