@_spi(Fuzzing) import WatchkeeperCore

/// The parsers that read what the daemon does not control: the configuration file, cron
/// expressions and globs inside it, what read(2) returns from the inotify and fanotify fds, requests on
/// the control socket, and TZif files. Each run takes one input and checks more than "no
/// crash": a property every answer must have, so a wrong answer fails like a crash does.
/// A failed check is a `fatalError` naming the property, which libFuzzer reports with the
/// input that caused it.
enum FuzzTarget: String, CaseIterable {
    case config, cron, calendar, glob, inotify, fanotify, varlink, tzif

    func run(_ input: UnsafeRawBufferPointer) {
        switch self {
        case .config: Self.config(Array(input))
        case .cron: Self.cron(String(decoding: input, as: UTF8.self))
        case .calendar: Self.calendar(String(decoding: input, as: UTF8.self))
        case .glob: Self.glob(Array(input))
        case .inotify: Self.inotify(input)
        case .fanotify: Self.fanotify(input)
        case .varlink: Self.varlink(Array(input))
        case .tzif: Self.tzif(Array(input))
        }
    }

    /// Every problem is one line with a position inside the file (or none), so a file can
    /// neither forge a second diagnostic nor point the reader somewhere that does not exist.
    private static func config(_ bytes: [UInt8]) {
        let lineCount = bytes.count(where: { $0 == UInt8(ascii: "\n") }) + 1
        switch ConfigLoader.parse(bytes: bytes, path: "/etc/watchkeeper/watchkeeper.toml", environment: [:]) {
        case .success(let configuration):
            // A configuration that loads also describes itself without trapping.
            _ = configuration.tasks.map(\.name).count + configuration.watches.count
        case .failure(let errors):
            check(!errors.diagnostics.isEmpty, "a refused configuration has at least one diagnostic")
            for diagnostic in errors.diagnostics {
                check(!diagnostic.description.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }),
                      "a diagnostic is one line without control characters: \(diagnostic.description.debugDescription)")
                if let position = diagnostic.position {
                    check(position.line >= 1 && position.line <= lineCount && position.column >= 1,
                          "a diagnostic points inside the file: \(position) of \(lineCount) lines")
                }
            }
        }
    }

    /// An expression that parses reads back the same from its own description, and one
    /// that can fire names, from any instant, a later minute that it matches.
    private static func cron(_ text: String) {
        guard let expression = try? CronExpression(parsing: text) else { return }
        let again = try? CronExpression(parsing: expression.description)
        check(again == expression, "\(text.debugDescription) reads back from its description \(expression.description.debugDescription)")
        let start: Int64 = 1_780_000_000  // 2026-05-28, a Thursday
        guard let fire = expression.nextFire(after: start, in: .utc) else {
            check(expression.neverFires, "\(expression) fires somewhere, so the search finds a time")
            return
        }
        check(fire > start && fire % 60 == 0, "\(expression): the next fire is a later whole minute")
        check(expression.matches(TimeZoneRules.utc.localTime(utcSeconds: fire)), "\(expression) matches its own next fire")
    }

    /// An event that parses reads back the same from its normal form (as systemd's does),
    /// and its next elapse is later than the start and elapses again from just before it.
    private static func calendar(_ text: String) {
        guard let event = try? CalendarEvent(parsing: text) else { return }
        let again = try? CalendarEvent(parsing: event.normalized)
        check(again?.normalized == event.normalized, "\(text.debugDescription) reads back from its normal form \(event.normalized.debugDescription)")
        let start: Int64 = 1_780_000_000  // 2026-05-28
        guard let fire = event.nextFire(after: start, in: .utc) else { return }
        check(fire > start, "\(event): the next elapse is later than the start")
        check(event.nextFire(after: fire - 1, in: .utc) == fire, "\(event): from a second before its elapse it elapses there")
    }

    /// The first line is the pattern, the rest the path. A valid pattern matches in bounded
    /// work (libFuzzer's -timeout catches a blow-up), and a pattern without wildcards matches
    /// exactly the path it spells.
    private static func glob(_ bytes: [UInt8]) {
        let newline = bytes.firstIndex(of: UInt8(ascii: "\n")) ?? bytes.endIndex
        let patternText = String(decoding: bytes[..<newline], as: UTF8.self)
        let path = Array(bytes[min(newline + 1, bytes.endIndex)...])
        guard let pattern = try? GlobPattern(patternText) else { return }
        let matched = pattern.matches(path)
        let filter = PathFilter(include: [pattern], exclude: [])
        check(filter.selects(path) == matched, "an include-only filter selects what its pattern matches")
        if !patternText.unicodeScalars.contains(where: { "*?[\\".unicodeScalars.contains($0) }), !patternText.isEmpty {
            check(pattern.matches(Array(patternText.utf8)), "a literal pattern \(patternText.debugDescription) matches itself")
        }
    }

    /// Any bytes: the decoder reads only whole records inside the buffer (ASan would see a
    /// read past it), and stops early only at a record whose name runs past the end.
    private static func inotify(_ input: UnsafeRawBufferPointer) {
        let header = 16  // wd, mask, cookie, len: four 32-bit fields
        var events: [InotifyEvent] = []
        let used = InotifyEvent.decode(input, into: &events)
        check(used >= 0 && used <= input.count, "decode used \(used) of \(input.count) bytes")
        check(events.count * header <= used, "each event used at least a header")
        if input.count - used >= header {
            let length = Int(input.loadUnaligned(fromByteOffset: used + 12, as: UInt32.self))
            check(length > input.count - used - header, "decoding stopped at a whole record")
        }
    }

    /// Any bytes: the decoder reads only inside the buffer (ASan would see a read past it),
    /// walks whole events only, stops early only with a reason, and every handle it keeps
    /// fits open_by_handle_at.
    private static func fanotify(_ input: UnsafeRawBufferPointer) {
        let metadata = 24  // event_len, vers, reserved, metadata_len, mask, fd, pid
        var events: [FanotifyEvent] = []
        let decoding = FanotifyEvent.decode(input, into: &events)
        check(decoding.consumedBytes >= 0 && decoding.consumedBytes <= input.count,
              "decode walked \(decoding.consumedBytes) of \(input.count) bytes")
        check((events.count + decoding.droppedEvents) * metadata <= decoding.consumedBytes, "each event used at least its metadata")
        check(decoding.consumedBytes == input.count || decoding.firstMalformation != nil, "decoding stopped early only with a reason")
        check(decoding.droppedEvents == 0 || decoding.firstMalformation != nil, "a dropped event has a reason")
        for event in events {
            for handle in [event.directory, event.object, event.newDirectory].compactMap({ $0 }) {
                check(handle.bytes.count <= 128, "a handle of \(handle.bytes.count) bytes is longer than MAX_HANDLE_SZ")
            }
            check(!event.name.contains(0) && !event.newName.contains(0), "a name stops at its NUL")
        }
    }

    /// A request that decodes re-encodes to one that decodes to the same call.
    private static func varlink(_ bytes: [UInt8]) {
        guard case .success(let call) = VarlinkCall.decode(bytes) else { return }
        let encoded = call.encoded
        check(encoded.last == 0 && encoded.dropLast().allSatisfy({ $0 != 0 }), "an encoded call is one message ended by its NUL")
        guard case .success(let again) = VarlinkCall.decode(encoded.dropLast()) else {
            fatalError("the encoding of a decoded call decodes: \(String(decoding: encoded.dropLast(), as: UTF8.self).debugDescription)")
        }
        check(again == call, "a call survives encoding: \(String(decoding: encoded.dropLast(), as: UTF8.self).debugDescription)")
    }

    /// A TZif file that parses answers for any instant, and its local time resolves back.
    private static func tzif(_ bytes: [UInt8]) {
        guard let zone = try? TimeZoneRules(tzif: bytes, identifier: "Fuzz/Zone") else { return }
        for instant: Int64 in [-2_000_000_000, 0, 1_780_000_000, 4_000_000_000] {
            let offset = zone.offset(at: instant).offsetSeconds
            check(abs(Int(offset)) <= 25 * 3_600, "an offset within a day: \(offset)")
            _ = zone.localTime(utcSeconds: instant)
        }
        if let fire = dailyAtHalfPastTwo.nextFire(after: 1_780_000_000, in: zone) {
            check(fire > 1_780_000_000, "the next fire in the zone comes after the start")
        }
    }

    /// A wall time inside many zones' spring-forward gap.
    private static let dailyAtHalfPastTwo = try! CronExpression(parsing: "30 2 * * *")

    private static func check(_ condition: Bool, _ property: @autoclosure () -> String) {
        if !condition { fatalError("property failed: \(property())") }
    }
}
