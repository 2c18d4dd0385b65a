extension TimeZoneRules {
    @_spi(Fuzzing) public struct FormatError: Error, Equatable {
        public let reason: String
    }

    /// Parses a TZif file (RFC 8536, versions 1 to 4). With version 2 and later the 64-bit
    /// block and the footer are used; the 32-bit block only exists for old readers.
    @_spi(Fuzzing) public init(tzif bytes: [UInt8], identifier: String) throws(FormatError) {
        var reader = ByteReader(bytes: bytes)
        guard bytes.count >= 44, bytes[0..<4].elementsEqual("TZif".utf8) else {
            throw FormatError(reason: "is not a TZif time zone file")
        }
        var header = try reader.header()
        if header.version >= UInt8(ascii: "2") {
            try reader.skip(header.dataLength(timeSize: 4))
            header = try reader.header()
        }
        let timeSize = header.version >= UInt8(ascii: "2") ? 8 : 4
        guard header.leapCount == 0 else {
            // Such files ("right/" zones) count leap seconds in their timestamps, so their
            // instants are not POSIX time and every schedule would drift by ~27 seconds.
            throw FormatError(reason: "counts leap seconds (a \"right/\" zone), which schedules do not support")
        }
        guard header.typeCount >= 1, header.typeCount <= 256, header.characterCount >= 1,
              header.standardIndicatorCount == 0 || header.standardIndicatorCount == header.typeCount,
              header.utIndicatorCount == 0 || header.utIndicatorCount == header.typeCount
        else { throw FormatError(reason: "has an inconsistent TZif header") }

        var times: [Int64] = []
        times.reserveCapacity(header.transitionCount)
        for _ in 0..<header.transitionCount {
            let time = timeSize == 8 ? try reader.int64() : Int64(try reader.int32())
            if let previous = times.last, time <= previous {
                throw FormatError(reason: "has transitions out of order")
            }
            times.append(time)
        }
        var indices: [Int] = []
        for _ in 0..<header.transitionCount {
            let index = Int(try reader.byte())
            guard index < header.typeCount else { throw FormatError(reason: "has a transition to an undefined time type") }
            indices.append(index)
        }
        var rawTypes: [(offset: Int32, isDST: Bool, abbreviationIndex: Int)] = []
        for _ in 0..<header.typeCount {
            let offset = try reader.int32()
            let isDST = try reader.byte()
            let abbreviationIndex = Int(try reader.byte())
            guard Int64(offset).magnitude < UInt64(Self.maximumOffsetSeconds), isDST <= 1,
                  abbreviationIndex < header.characterCount
            else { throw FormatError(reason: "has an invalid time type") }
            rawTypes.append((offset, isDST == 1, abbreviationIndex))
        }
        let characters = Array(try reader.take(header.characterCount))
        let types = rawTypes.map { raw in
            let abbreviation = characters[raw.abbreviationIndex...].prefix { $0 != 0 }
            return LocalTimeType(offsetSeconds: raw.offset, isDST: raw.isDST, abbreviation: String(decoding: abbreviation, as: UTF8.self))
        }
        try reader.skip(header.standardIndicatorCount + header.utIndicatorCount)

        var footer: PosixTimeZone?
        if timeSize == 8 {
            guard try reader.byte() == UInt8(ascii: "\n") else { throw FormatError(reason: "has no footer line") }
            let line = try reader.line()
            if !line.isEmpty {
                do {
                    footer = try PosixTimeZone(parsing: line)
                } catch {
                    throw FormatError(reason: "has a footer rule \"\(line)\" that cannot be read: \(error.reason)")
                }
            }
        }
        self.init(identifier: identifier, types: types, transitionTimes: times, transitionTypeIndices: indices, footer: footer)
    }

    private struct TZifHeader {
        var version: UInt8
        var utIndicatorCount, standardIndicatorCount, leapCount, transitionCount, typeCount, characterCount: Int

        func dataLength(timeSize: Int) -> Int {
            transitionCount * timeSize + transitionCount + typeCount * 6 + characterCount
                + leapCount * (timeSize + 4) + standardIndicatorCount + utIndicatorCount
        }
    }

    private struct ByteReader {
        let bytes: [UInt8]
        var index = 0

        mutating func take(_ count: Int) throws(FormatError) -> ArraySlice<UInt8> {
            guard count >= 0, count <= bytes.count - index else { throw FormatError(reason: "is truncated") }
            defer { index += count }
            return bytes[index..<(index + count)]
        }

        mutating func skip(_ count: Int) throws(FormatError) { _ = try take(count) }

        mutating func byte() throws(FormatError) -> UInt8 { try take(1).first! }

        mutating func int32() throws(FormatError) -> Int32 {
            Int32(bitPattern: try take(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        }

        mutating func int64() throws(FormatError) -> Int64 {
            Int64(bitPattern: try take(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
        }

        mutating func line() throws(FormatError) -> String {
            guard let end = bytes[index...].firstIndex(of: UInt8(ascii: "\n")) else {
                throw FormatError(reason: "has an unterminated footer line")
            }
            defer { index = end + 1 }
            return String(decoding: bytes[index..<end], as: UTF8.self)
        }

        mutating func header() throws(FormatError) -> TZifHeader {
            guard try take(4).elementsEqual("TZif".utf8) else { throw FormatError(reason: "is not a TZif time zone file") }
            let version = try byte()
            try skip(15)
            // Counts are unsigned 32-bit; anything near that size is a corrupt file, and the
            // cap keeps the length arithmetic far from overflow.
            func count(_ value: Int32) throws(FormatError) -> Int {
                guard value >= 0, value < 1 << 20 else { throw FormatError(reason: "has an implausible TZif header") }
                return Int(value)
            }
            return TZifHeader(
                version: version,
                utIndicatorCount: try count(try int32()),
                standardIndicatorCount: try count(try int32()),
                leapCount: try count(try int32()),
                transitionCount: try count(try int32()),
                typeCount: try count(try int32()),
                characterCount: try count(try int32())
            )
        }
    }
}
