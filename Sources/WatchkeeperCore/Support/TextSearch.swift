/// Substring search by UTF-8 bytes. The standard library's `contains(_:)` of one string in
/// another, `ranges(of:)`, `firstRange(of:)` and `split(separator:)` with a many-character
/// separator are _StringProcessing's, and one call links its regex engine and _RegexParser
/// into the daemon: 1 MiB of code and its metadata (docs/measurements/idle-memory.md,
/// "FoundationEssentials and the regex runtime out"). `make release` fails if one comes back.
/// Bytes, not characters: "e" is found in "e\u{301}", which the needles here never meet.
enum ByteSearch {
    /// Where `needle` first starts in `haystack` at or after `from`. An empty needle is found
    /// nowhere.
    static func firstOffset(of needle: [UInt8], in haystack: [UInt8], from: Int = 0) -> Int? {
        guard let first = needle.first, needle.count <= haystack.count else { return nil }
        var index = max(from, 0)
        while index <= haystack.count - needle.count {
            if haystack[index] == first && haystack[index..<index + needle.count].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }

    /// Every place `needle` starts, left to right, none overlapping.
    static func offsets(of needle: [UInt8], in haystack: [UInt8]) -> [Int] {
        var found: [Int] = []
        while let offset = firstOffset(of: needle, in: haystack, from: found.last.map { $0 + needle.count } ?? 0) {
            found.append(offset)
        }
        return found
    }
}

extension StringProtocol {
    /// Whether `needle`'s bytes appear in this string's (an empty needle does, as in the
    /// standard library).
    public func contains(utf8 needle: some StringProtocol) -> Bool {
        needle.utf8.isEmpty || ByteSearch.firstOffset(of: Array(needle.utf8), in: Array(utf8)) != nil
    }

    /// Every occurrence of `needle`, left to right, none overlapping.
    public func ranges(utf8 needle: some StringProtocol) -> [Range<Index>] {
        let length = needle.utf8.count
        return ByteSearch.offsets(of: Array(needle.utf8), in: Array(utf8)).map { offset in
            let lower = utf8.index(utf8.startIndex, offsetBy: offset)
            return lower..<utf8.index(lower, offsetBy: length)
        }
    }

    /// The parts between occurrences of `separator`, empty parts left out (as
    /// `split(separator:)` does by default).
    public func split(utf8Separator separator: some StringProtocol) -> [SubSequence] {
        var parts: [SubSequence] = []
        var from = startIndex
        for range in ranges(utf8: separator) {
            if from < range.lowerBound { parts.append(self[from..<range.lowerBound]) }
            from = range.upperBound
        }
        if from < endIndex { parts.append(self[from...]) }
        return parts
    }
}
