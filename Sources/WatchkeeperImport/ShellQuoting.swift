// Text for /bin/sh built by the importers: a word quoted so the shell reads it back as
// exactly those bytes, and argument elements kept literal under placeholder substitution.

import WatchkeeperCore

enum ShellQuoting {
    /// `'...'`, a `'` inside written as `'\''`; bare when the word is made only of
    /// characters no shell treats specially.
    static func quote(_ word: String) -> String {
        if !word.isEmpty && word.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "@%+=:,./_-".unicodeScalars.contains($0)) }) {
            return word
        }
        return "'" + word.replacingAll("'", with: "'\\''") + "'"
    }

    /// An argument element whose braces stay literal: `{` and `}` are placeholders in
    /// watchkeeper's argument arrays, written `{{` and `}}` for themselves.
    static func literalArgument(_ text: String) -> String {
        text.replacingAll("{", with: "{{").replacingAll("}", with: "}}")
    }
}

extension String {
    /// Every occurrence replaced, left to right (no Foundation here; the search is the core's
    /// `ranges(utf8:)`, which finds in valid UTF-8 exactly what a scalar-by-scalar search does).
    func replacingAll(_ target: String, with replacement: String) -> String {
        // By scalars, not Characters: a match may end inside a character ("{" of "{\u{301}").
        var out = String.UnicodeScalarView()
        var from = startIndex
        for range in ranges(utf8: target) {
            out.append(contentsOf: unicodeScalars[from..<range.lowerBound])
            out.append(contentsOf: replacement.unicodeScalars)
            from = range.upperBound
        }
        out.append(contentsOf: unicodeScalars[from...])
        return String(out)
    }
}
