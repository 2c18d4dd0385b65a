// incrontab(5) to watch rules: `path mask command`, the mask IN_* names (or a number) and
// options separated by commas, the command run by incrond through `sh -c` with $@ $# $% $&
// $$ replaced in its text.

#if canImport(Glibc)
import WatchkeeperCore
import Glibc
#endif

public struct IncrontabImporter: Sendable {
    public init() {}

    /// inotify's numbers (linux/inotify.h), for masks written as numbers and for `$&`.
    static let eventBits: [(name: String, bit: UInt32)] = [
        ("IN_ACCESS", 0x1), ("IN_MODIFY", 0x2), ("IN_ATTRIB", 0x4), ("IN_CLOSE_WRITE", 0x8),
        ("IN_CLOSE_NOWRITE", 0x10), ("IN_OPEN", 0x20), ("IN_MOVED_FROM", 0x40), ("IN_MOVED_TO", 0x80),
        ("IN_CREATE", 0x100), ("IN_DELETE", 0x200), ("IN_DELETE_SELF", 0x400), ("IN_MOVE_SELF", 0x800),
    ]

    /// The watchkeeper event for each inotify event it has, and why the others have none.
    static let mapping: [String: WatchEvent] = [
        "IN_MODIFY": .modified, "IN_ATTRIB": .attrib, "IN_CLOSE_WRITE": .closedWrite, "IN_MOVED_FROM": .movedOut,
        "IN_MOVED_TO": .movedIn, "IN_CREATE": .created, "IN_DELETE": .deleted,
    ]
    static let unmapped: [String: String] = [
        "IN_ACCESS": "watchkeeper does not react to reads",
        "IN_OPEN": "watchkeeper does not react to opens",
        "IN_CLOSE_NOWRITE": "watchkeeper does not react to a file closed without writing",
        "IN_DELETE_SELF": "watchkeeper does not run jobs for its watched directory itself being deleted (it waits for it to come back)",
        "IN_MOVE_SELF": "watchkeeper does not run jobs for its watched directory itself being moved",
        "IN_ONESHOT": "watchkeeper has no one-shot watch: the rule would fire on every event",
    ]

    public func importFile(path: String, text: String, into config: inout ImportedConfig) {
        let owner = Self.spoolOwner(path)
        let lines = SourceLines(text)
        if let note = lines.windowsNote(file: path, reader: "incrond (incrontab.cpp strips only the newline)",
                                        effect: "so each command ends in CR there and usually fails; translated without it") {
            config.notes.append(note)
        }
        if lines.hasByteOrderMark {
            config.notes.append("\(path) starts with a byte-order mark (U+FEFF, the bytes EF BB BF a Windows editor writes): incrond reads it as part of the first line's path, which then is not absolute; translated without it.")
        }
        for sourceLine in lines.lines {
            let source = ImportSource(file: path, line: sourceLine.number)
            let line = Substring(sourceLine.text)
            let trimmed = line.drop { $0 == " " || $0 == "\t" }
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            switch entry(trimmed, source: source, owner: owner, config: &config) {
            case .success(var entry):
                entry.original = String(trimmed)
                config.entries.append(entry)
            case .failure(let refusal):
                config.untranslated.append(UntranslatedLine(source: source, text: String(line), reason: refusal.text))
            }
        }
    }

    /// A user's incrontab is named after its owner (`/var/spool/incron/USER`).
    static func spoolOwner(_ path: String) -> String? {
        let spool = "/var/spool/incron/"
        guard path.hasPrefix(spool) else { return nil }
        let name = String(path.dropFirst(spool.count))
        return name.isEmpty || name.contains("/") ? nil : name
    }

    struct Refusal: Error { let text: String }

    private func entry(_ line: Substring, source: ImportSource, owner: String?, config: inout ImportedConfig) -> Result<ImportedEntry, Refusal> {
        let (watchedPath, maskText, command) = Self.fields(line)
        guard watchedPath.hasPrefix("/") else { return .failure(Refusal(text: "the path must be absolute")) }
        guard !maskText.isEmpty, !command.isEmpty else { return .failure(Refusal(text: "expected `path mask command`")) }
        var mask: Mask
        switch Mask.read(maskText) {
        case .success(let read): mask = read
        case .failure(let refusal): return .failure(refusal)
        }
        guard !mask.events.isEmpty else {
            let reasons = Set(mask.dropped).sorted().map { "\($0): \(Self.unmapped[$0] ?? "no equivalent")" }
            return .failure(Refusal(text: "no event watchkeeper can react to (" + reasons.joined(separator: "; ") + ")"))
        }
        for name in Set(mask.dropped).sorted() {
            config.untranslated.append(UntranslatedLine(source: source, text: name, reason: "dropped from this rule's events: \(Self.unmapped[name] ?? "no equivalent")"))
        }
        let (directory, include) = Self.watched(watchedPath, mask: &mask)
        var entry = ImportedEntry(kind: .watch, name: config.uniqueName(from: Self.nameStem(directory), line: source.line), source: source, original: "")
        entry["path"] = .string(directory)
        entry["recursive"] = .bool(mask.recursive)
        if mask.recursive { mask.notes.append("incron 0.5.12 watches subdirectories unless recursive=false; so does this rule (recursive = true).") }
        entry["events"] = .strings(mask.events.map(\.rawValue))
        if !include.isEmpty { entry["include"] = .strings(include) }
        // incron handles only what happens while it runs.
        entry["catch_up"] = .bool(false)
        if let owner {
            do {
                _ = try Credentials.lookup(user: owner, group: nil)
            } catch {
                return .failure(Refusal(text: "\(error) (the incrontab's owner, whom the job would run as)"))
            }
            entry["user"] = .string(owner)
        }
        if case .failure(let refusal) = Self.runLikeIncrond(command, owner: owner, into: &entry, notes: &mask.notes) { return .failure(refusal) }
        entry["budget"] = .string("7d")
        if !mask.loopable {
            mask.notes.append("incron 0.5.12 has no-loop as its default (IN_NO_LOOP; loopable=true turns it off) but builds without the code that pauses the watch (LOOPER), so it keeps watching while the command runs, as watchkeeper does: a command that writes into the watched directory starts jobs for its own files.")
        }
        if mask.recursive && !mask.dotDirectories {
            mask.notes.append("incron does not descend into directories whose names start with a dot (dotdirs=false, its default); watchkeeper does, so events in them start jobs here.")
        }
        entry.notes = mask.notes
        return .success(entry)
    }

    /// `path mask command`: the path up to the first blank not escaped by a backslash
    /// (incron's `\ `), the mask up to the next blank, the rest.
    private static func fields(_ line: Substring) -> (path: String, mask: String, command: String) {
        var watchedPath = ""
        var rest = line[...]
        var escaped = false
        while let character = rest.first {
            if escaped {
                watchedPath.append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == " " || character == "\t" {
                break
            } else {
                watchedPath.append(character)
            }
            rest = rest.dropFirst()
        }
        rest = rest.drop { $0 == " " || $0 == "\t" }
        let maskEnd = rest.firstIndex { $0 == " " || $0 == "\t" } ?? rest.endIndex
        return (watchedPath, String(rest[..<maskEnd]), String(rest[maskEnd...].drop { $0 == " " || $0 == "\t" }))
    }

    /// A mask's events and options, and the events it names that watchkeeper has not.
    struct Mask {
        var events: [WatchEvent] = []
        var notes: [String] = []
        var dropped: [String] = []
        var recursive = true
        var loopable = false
        var dotDirectories = false

        static func read(_ text: String) -> Result<Mask, Refusal> {
            var mask = Mask()
            for item in text.split(separator: ",").map(String.init) {
                if mask.option(item) { continue }
                if let event = mapping[item] {
                    mask.add([event])
                } else if unmapped[item] != nil {
                    mask.dropped.append(item)
                } else if let number = UInt32(item) ?? (item.hasPrefix("0x") ? UInt32(item.dropFirst(2), radix: 16) : nil) {
                    for (name, bit) in eventBits where number & bit != 0 {
                        if let event = mapping[name] { mask.add([event]) } else { mask.dropped.append(name) }
                    }
                } else {
                    return .failure(Refusal(text: "unknown mask item \"\(item)\""))
                }
            }
            return .success(mask)
        }

        private mutating func add(_ new: [WatchEvent]) {
            for event in new where !events.contains(event) { events.append(event) }
        }

        /// The items that are no single event: groups of events and options.
        private mutating func option(_ item: String) -> Bool {
            switch item {
            case "IN_ALL_EVENTS":
                add([.created, .closedWrite, .movedIn, .movedOut, .deleted, .modified, .attrib])
                dropped += ["IN_ACCESS", "IN_OPEN", "IN_CLOSE_NOWRITE", "IN_DELETE_SELF", "IN_MOVE_SELF"]
            case "IN_MOVE": add([.movedIn, .movedOut])
            case "IN_CLOSE":
                add([.closedWrite])
                dropped.append("IN_CLOSE_NOWRITE")
            case "IN_ONLYDIR": notes.append("IN_ONLYDIR: watchkeeper only ever watches directories.")
            case "IN_DONT_FOLLOW":
                notes.append("IN_DONT_FOLLOW: watchkeeper resolves a watched path that is a symbolic link and watches the real directory (follow_symlinks = false still keeps links inside the tree unfollowed).")
            case "loopable=true": loopable = true
            case "recursive=true": recursive = true
            case "recursive=false": recursive = false
            case "dotdirs=true": dotDirectories = true
            case "IN_NO_LOOP", "loopable=false", "IN_MASK_ADD", "dotdirs=false": break
            default: return false
            }
            return true
        }
    }

    /// incron watches a directory, a file, or files a `*` pattern names in one directory.
    private static func watched(_ watchedPath: String, mask: inout Mask) -> (directory: String, include: [String]) {
        var directory = watchedPath
        var include: [String] = []
        var info = stat()
        let lastSlash = watchedPath.lastIndex(of: "/")!
        let baseName = String(watchedPath[watchedPath.index(after: lastSlash)...])
        let parent = watchedPath[..<lastSlash].isEmpty ? "/" : String(watchedPath[..<lastSlash])
        if baseName.contains("*") || baseName.contains("?") {
            directory = parent
            include = [baseName]
            mask.recursive = false
        } else if stat(watchedPath, &info) == 0, info.st_mode & S_IFMT != S_IFDIR {
            directory = parent
            include = [baseName]
            mask.recursive = false
            mask.notes.append("\(watchedPath) is a file here: its directory is watched for events on that name; $# was empty for incron and is the file's name here.")
        } else if stat(watchedPath, &info) != 0 {
            mask.notes.append("\(watchedPath) does not exist on the machine that ran this import; it is taken to be a directory.")
        }
        while directory.count > 1 && directory.hasSuffix("/") { directory.removeLast() }
        return (directory, include)
    }

    /// The command as incrond runs it: an argument array when no shell is needed; else a
    /// user table's through /bin/bash -c, a system table's through system(3), /bin/sh -c
    /// (usertable.cpp); a non-root user's with incrond's own PATH.
    private static func runLikeIncrond(_ command: String, owner: String?, into entry: inout ImportedEntry, notes: inout [String]) -> Result<Void, Refusal> {
        switch translateCommand(command) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let translated):
            if let arguments = translated.arguments {
                entry["command"] = .strings(arguments)
            } else if owner != nil {
                entry["command"] = .strings(["/bin/bash", "-c", ShellQuoting.literalArgument(translated.script)])
                notes.append("A user table's command ran as /bin/bash -c; so it does here.")
            } else {
                entry["shell"] = .bool(true)
                entry["command"] = .string(translated.script)
            }
            notes += translated.notes
        }
        if let owner, owner != "root" {
            // incrond clears a non-root user's environment and sets this PATH.
            entry["environment"] = .table([("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/X11R6/bin")])
        }
        return .success(())
    }

    static func nameStem(_ directory: String) -> String {
        directory.split(separator: "/").last.map(String.init) ?? "root"
    }

    struct TranslatedCommand {
        /// An argument array when the command needs no shell.
        var arguments: [String]?
        var script: String
        var notes: [String]
    }

    /// The command with incron's wildcards as watchkeeper's: `$@` the watched directory,
    /// `$#` the file's name, `$%` the event's name, `$&` its number, `$$` a `$`. Words with
    /// nothing the shell interprets become an argument array with `{dir}` `{name}`
    /// `{event}` (exact bytes, no word splitting); otherwise the script keeps the shell and
    /// reads "$WATCHKEEPER_DIR" and friends.
    static func translateCommand(_ command: String) -> Result<TranslatedCommand, Refusal> {
        var notes: [String] = []
        var usesEvent = false
        let special = "|&;<>()`\\\"'*?[]#~=%!\n\t"
        let words = command.split(separator: " ").map(String.init)
        let plain = !words.isEmpty && words.allSatisfy { word in
            // `$$` hands a `$` to incron's shell, which expands what follows: it needs the shell.
            let rest = word.replacingAll("$@", with: "").replacingAll("$#", with: "").replacingAll("$%", with: "")
            return !rest.contains { special.contains($0) || $0 == "$" }
        }
        if plain && !command.contains(utf8: "$&") {
            var arguments: [String] = []
            for word in words {
                var out = ""
                var scalars = Array(word)[...]
                while let character = scalars.first {
                    scalars = scalars.dropFirst()
                    if character == "$", let next = scalars.first {
                        switch next {
                        case "@": out += "{dir}"; scalars = scalars.dropFirst(); continue
                        case "#": out += "{name}"; scalars = scalars.dropFirst(); continue
                        case "%": out += "{event}"; usesEvent = true; scalars = scalars.dropFirst(); continue
                        default: break
                        }
                    }
                    out += character == "{" ? "{{" : character == "}" ? "}}" : String(character)
                }
                arguments.append(out)
            }
            notes.append("The command has nothing a shell interprets, so it runs without one: each word is one argument, and a file name with blanks stays one argument (incron's sh -c would have split it).")
            if usesEvent { notes.append("$% is {event}: watchkeeper's event names (closed_write, moved_in, ...), not incron's (IN_CLOSE_WRITE, IN_MOVED_TO, ...).") }
            return .success(TranslatedCommand(arguments: arguments, script: "", notes: notes))
        }
        // incron pastes its values into the text before the shell reads it, wherever they
        // are; the variables must be expanded by the shell, so each is written to suit the
        // quoting it lands in.
        enum Quoting { case none, single, double }
        var quoting = Quoting.none
        var script = ""
        var characters = Array(command)[...]
        func insert(_ expansion: String) {
            switch quoting {
            case .none: script += "\"" + expansion + "\""
            case .double: script += expansion
            case .single: script += "'\"" + expansion + "\"'"
            }
        }
        while let character = characters.first {
            characters = characters.dropFirst()
            if character == "$", let next = characters.first, "@#%&$".contains(next) {
                characters = characters.dropFirst()
                switch next {
                case "@": insert("$WATCHKEEPER_DIR")
                case "#": insert("$WATCHKEEPER_NAME")
                case "%": insert("$WATCHKEEPER_EVENT"); usesEvent = true
                case "&":
                    insert("$(" + eventNumberCase + ")")
                    notes.append("$& becomes the inotify number of watchkeeper's event, computed in the shell from $WATCHKEEPER_EVENT.")
                default: script += "$"  // what incron's shell saw
                }
                continue
            }
            switch (character, quoting) {
            case ("'", .none): quoting = .single
            case ("'", .single): quoting = .none
            case ("\"", .none): quoting = .double
            case ("\"", .double): quoting = .none
            case ("\\", .none), ("\\", .double):
                script.append(character)
                if let escaped = characters.first { script.append(escaped); characters = characters.dropFirst() }
                continue
            default: break
            }
            script.append(character)
        }
        notes.append("The command keeps incron's sh -c; $@, $# and $% are \"$WATCHKEEPER_DIR\", \"$WATCHKEEPER_NAME\" and \"$WATCHKEEPER_EVENT\", double-quoted, so a file name with blanks or shell characters stays one word (incron pasted it into the text with only blanks and backslashes escaped, which also left a literal backslash inside quotes).")
        if usesEvent { notes.append("$% is watchkeeper's event name (closed_write, moved_in, ...), not incron's (IN_CLOSE_WRITE, IN_MOVED_TO, ...).") }
        return .success(TranslatedCommand(arguments: nil, script: script, notes: notes))
    }

    /// Shell text printing inotify's number for $WATCHKEEPER_EVENT.
    static let eventNumberCase: String = {
        let pairs = mapping.sorted { $0.key < $1.key }.map { name, event in
            "\(event.rawValue)) echo \(eventBits.first { $0.name == name }!.bit);;"
        }
        return "case $WATCHKEEPER_EVENT in " + pairs.joined(separator: " ") + " esac"
    }()
}
