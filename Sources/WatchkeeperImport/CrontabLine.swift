// One crontab line as cron reads it (load_env, then load_entry), before any translation:
// an assignment, an entry, nothing (blank or comment), or a line cron cannot read. What
// cron does with the last kind differs: Debian's ignores the whole file, cronie the line.

import WatchkeeperCore

enum CrontabLine: Equatable {
    /// Empty, blanks, or a comment.
    case nothing
    case assignment(name: String, value: String)
    case entry(CrontabEntryText)
    /// Why cron cannot read it.
    case bad(String)

    /// `text` as cron sees it: a CR at the end and a byte-order mark at the start kept.
    static func read(_ text: String, systemFormat: Bool, flavor: CronFlavor) -> CrontabLine {
        let blanks: Set<Character> = [" ", "\t"]
        let trimmed = Substring(text).drop { blanks.contains($0) }
        if trimmed.isEmpty || trimmed.hasPrefix("#") { return .nothing }
        if let (name, value) = assignment(trimmed, flavor: flavor) { return .assignment(name: name, value: value) }
        return entry(trimmed, systemFormat: systemFormat, flavor: flavor)
    }

    // MARK: load_env

    private enum EnvState: Int { case nameStart, name, equals1, equals2, valueStart, value, finished, error }

    /// env.c's load_env, character for character: a name (quoted, or up to a blank or
    /// `=`), blanks, `=`, blanks, a value (quoted, or the rest with trailing blanks
    /// dropped); then one pair of matching quotes around the value goes. Debian's takes
    /// `NAME=` with nothing after it for no assignment at all; cronie for an empty value.
    static func assignment(_ line: Substring, flavor: CronFlavor) -> (String, String)? {
        var state = EnvState.nameStart
        var quote: Character? = nil
        var name = "", value = ""
        var index = line.startIndex
        func isSpace(_ c: Character) -> Bool { c == " " || c == "\t" || c == "\r" || c == "\u{0B}" || c == "\u{0C}" }
        while state != .error, index < line.endIndex {
            let c = line[index]
            switch state {
            case .nameStart, .valueStart:
                if c == "\"" || c == "'" {
                    quote = c
                    index = line.index(after: index)
                }
                state = EnvState(rawValue: state.rawValue + 1)!
            case .name, .value:
                if let quote {
                    if c == quote {
                        state = EnvState(rawValue: state.rawValue + 1)!
                        index = line.index(after: index)
                        continue
                    }
                    if state == .name && c == "=" {
                        state = .error
                        continue
                    }
                } else if state == .name {
                    if isSpace(c) {
                        state = .equals1
                        index = line.index(after: index)
                        continue
                    }
                    if c == "=" {
                        state = .equals1
                        continue
                    }
                }
                if state == .name { name.append(c) } else { value.append(c) }
                index = line.index(after: index)
            case .equals1:
                if c == "=" {
                    state = .equals2
                    quote = nil
                } else if !isSpace(c) {
                    state = .error
                }
                index = line.index(after: index)
            case .equals2, .finished:
                if isSpace(c) { index = line.index(after: index) } else { state = EnvState(rawValue: state.rawValue + 1)! }
            case .error:
                break
            }
        }
        let complete = state == .finished || (state == .value && quote == nil) || (state == .equals2 && flavor.acceptsEmptyAssignment)
        guard complete else { return nil }
        if state == .value {
            while let last = value.last, isSpace(last) { value.removeLast() }
        }
        // Debian's load_env then drops trailing blanks even of a quoted value (strdtb), and
        // quotes still around the value; cronie's does neither.
        if flavor == .debian {
            while let last = value.last, isSpace(last) { value.removeLast() }
            if value.count >= 2, let first = value.first, first == "\"" || first == "'", value.last == first {
                value = String(value.dropFirst().dropLast())
            }
        }
        return (name, value)
    }

    // MARK: load_entry

    private static func entry(_ line: Substring, systemFormat: Bool, flavor: CronFlavor) -> CrontabLine {
        var rest = line
        // cronie: a leading '-' keeps the run out of the log.
        if flavor == .cronie, rest.hasPrefix("-") { rest = rest.dropFirst() }
        func nextField() -> String? {
            rest = rest.drop { $0 == " " || $0 == "\t" }
            guard !rest.isEmpty else { return nil }
            let end = rest.firstIndex { $0 == " " || $0 == "\t" } ?? rest.endIndex
            defer { rest = rest[end...] }
            return String(rest[..<end])
        }
        // A line that is no entry at all fails on its first field, as in cron: minutes have no names.
        guard let first = nextField(), let lead = first.unicodeScalars.first,
              lead == "*" || lead == "@" || ("0"..."9").contains(lead)
        else { return .bad("neither an entry nor an assignment") }
        var fields = [first]
        if !first.hasPrefix("@") {
            for _ in 0..<4 {
                guard let field = nextField() else { return .bad("fewer than five time fields") }
                fields.append(field)
            }
        }
        if first != "@reboot" {
            do {
                _ = try VixieCronSchedule(parsing: fields.joined(separator: " "), stepAfterSingleValue: flavor.acceptsStepAfterSingleValue)
            } catch {
                return .bad(error.reason)
            }
        }
        var user: String?
        if systemFormat {
            guard let column = nextField(), !column.allSatisfy({ $0 == "\r" }) else { return .bad("no user and command after the time fields") }
            if column.hasPrefix("*") { return .bad("the user column starts with '*': six time fields?") }
            user = column
        }
        let command = String(rest.drop { $0 == " " || $0 == "\t" })
        if command.hasPrefix("*") { return .bad("the command starts with '*': six time fields?") }
        if command.isEmpty || command == "\r" {
            // Debian's cron runs an empty command from a user's table; cronie refuses it.
            if systemFormat || flavor == .cronie { return .bad("no command after the time fields") }
        }
        return .entry(CrontabEntryText(schedule: fields.joined(separator: " "), user: user, command: command))
    }
}

/// An entry's parts as written: the five fields (or an @-word) joined by one blank, the
/// user column of a system table, and the command (from its first non-blank on, with a
/// trailing CR if the file has one).
struct CrontabEntryText: Equatable {
    var schedule: String
    var user: String?
    var command: String
}
