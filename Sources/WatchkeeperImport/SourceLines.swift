// A table's text as line-oriented daemons read it: lines end at "\n" only. Swift's
// Characters join "\r\n" into one, so splitting a String at "\n" read a file saved on
// Windows as a single line; here the text is split on its Unicode scalars, and what
// Windows editors add is told apart: a byte-order mark and a CR before each newline.

import WatchkeeperCore

struct SourceLines {
    struct Line {
        /// 1-based, as `file:line` shows it.
        let number: Int
        /// Without its "\n", and without the "\r" before it.
        let text: String
        /// The line ended in "\r\n" (the CR is what cron and incron keep).
        let hadCR: Bool
        /// The text as the daemon reads it: the CR kept, and on the first line the
        /// byte-order mark before it.
        let raw: String
    }

    let lines: [Line]
    /// The file starts with U+FEFF (EF BB BF), which is not in `text` of the first line.
    let hasByteOrderMark: Bool
    /// How many lines ended in "\r\n".
    let crlfCount: Int
    /// The last line has no "\n" after it.
    let lastLineUnterminated: Bool

    init(_ text: String) {
        let scalars = Substring(text).unicodeScalars
        hasByteOrderMark = scalars.first == "\u{FEFF}"
        let pieces = scalars.split(separator: "\n", omittingEmptySubsequences: false)
        lastLineUnterminated = !(pieces.last?.isEmpty ?? true)
        var lines: [Line] = []
        var crlf = 0
        for (index, piece) in pieces.enumerated() where index < pieces.count - 1 || !piece.isEmpty {
            var body = piece
            let hadCR = body.last == "\r"
            if hadCR { body = body.dropLast(); crlf += 1 }
            if index == 0 && hasByteOrderMark { body = body.dropFirst() }
            lines.append(Line(number: index + 1, text: String(Substring(body)), hadCR: hadCR, raw: String(Substring(piece))))
        }
        self.lines = lines
        crlfCount = crlf
    }

    /// A note for the header when the file was saved the Windows way, naming what `reader`
    /// (cron, incrond) does with the CR it keeps.
    func windowsNote(file: String, reader: String, effect: String) -> String? {
        guard crlfCount > 0 else { return nil }
        return "\(file) has Windows line ends (CR LF) on \(crlfCount) line(s): \(reader) keeps the CR as the last character of each line, \(effect)."
    }
}
