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
    /// Every occurrence replaced, scanning Unicode scalars (no Foundation here).
    func replacingAll(_ target: String, with replacement: String) -> String {
        let source = Array(unicodeScalars)
        let pattern = Array(target.unicodeScalars)
        guard !pattern.isEmpty else { return self }
        var out = String.UnicodeScalarView()
        var index = 0
        while index < source.count {
            if index + pattern.count <= source.count, Array(source[index..<index + pattern.count]) == pattern {
                out.append(contentsOf: replacement.unicodeScalars)
                index += pattern.count
            } else {
                out.append(source[index])
                index += 1
            }
        }
        return String(out)
    }
}
