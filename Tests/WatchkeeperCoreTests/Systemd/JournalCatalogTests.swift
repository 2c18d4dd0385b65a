import Foundation
import XCTest

@testable import WatchkeeperCore

/// catalog/watchkeeper.catalog, what `journalctl -x` shows under each entry, against the
/// MESSAGE_IDs the daemon emits: one entry each, no entry for an ID it does not emit, and
/// each with the headers journalctl lists and text to read. That journalctl really reads
/// it once installed is the end-to-end test's part.
final class JournalCatalogTests: XCTestCase {
    private struct Entry {
        var id: String
        var headers: [String: String] = [:]
        var body: [String] = []
    }

    /// Tests/WatchkeeperCoreTests/Systemd/ → the repository.
    private static let catalogPath = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("catalog/watchkeeper.catalog").path

    /// The catalog format of systemd's catalog.c: "-- ID" opens an entry, "Key: value"
    /// lines up to the first blank one are its headers, the rest is its text; "#" lines
    /// before the first entry are comments.
    private func entries() throws -> [Entry] {
        let text = try String(contentsOfFile: Self.catalogPath, encoding: .utf8)
        var entries: [Entry] = []
        var inHeaders = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("-- ") {
                entries.append(Entry(id: String(line.dropFirst(3))))
                inHeaders = true
            } else if entries.isEmpty {
                XCTAssertTrue(line.isEmpty || line.hasPrefix("#"), "text before the first entry: \(line)")
            } else if inHeaders, !line.isEmpty, let colon = line.firstIndex(of: ":") {
                entries[entries.count - 1].headers[String(line[..<colon])] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            } else {
                inHeaders = false
                if !line.isEmpty { entries[entries.count - 1].body.append(line) }
            }
        }
        return entries
    }

    func testEveryMessageIDTheDaemonEmits_hasExactlyOneEntry_andNoEntryIsForAnotherID() throws {
        let ids = try entries().map(\.id)
        XCTAssertEqual(ids.count, Set(ids).count, "an ID with two entries: \(ids)")
        XCTAssertEqual(Set(ids), Set(MessageID.allCases.map(\.rawValue)),
                       "missing: \(Set(MessageID.allCases.map(\.rawValue)).subtracting(ids)), not emitted: \(Set(ids).subtracting(MessageID.allCases.map(\.rawValue)))")
    }

    func testEveryEntry_hasASubject_isDefinedByWatchkeeper_andSaysWhatHappenedAndWhatToDo() throws {
        for entry in try entries() {
            XCTAssertEqual(entry.id.count, 32, entry.id)
            XCTAssertTrue(entry.id.allSatisfy { $0.isHexDigit && !$0.isUppercase }, "IDs are 32 lower-case hex digits: \(entry.id)")
            XCTAssertFalse(entry.headers["Subject", default: ""].isEmpty, "\(entry.id) has no Subject")
            XCTAssertEqual(entry.headers["Defined-By"], "watchkeeper", entry.id)
            XCTAssertTrue(entry.headers["Documentation", default: ""].hasPrefix("man:"), "\(entry.id): \(entry.headers)")
            XCTAssertGreaterThanOrEqual(entry.body.count, 2, "\(entry.id) explains nothing")
        }
    }

    /// `@FIELD@` is filled in from the entry; a field the daemon never sets would show as
    /// an empty gap. Every one the catalog uses must be one the daemon writes.
    func testFieldsTheTextUses_areFieldsTheDaemonWrites() throws {
        let written: Set<String> = [
            // metadata keys of the messages with an ID, as JournalFields names them
            "config", "ready_ms", "generation", "errors", "signal", "queue", "stuck_ms", "run_id", "expiry", "task", "scheduled_at",
            "outcome", "dump_sequence", "peer_uid", "cause",
        ]
        let names = Set(written.map { JournalFields.fieldName(forMetadataKey: $0) })
        for entry in try entries() {
            let text = ([entry.headers["Subject", default: ""]] + entry.body).joined(separator: "\n")
            for field in text.matches(of: /@([A-Z0-9_]+)@/).map({ String($0.1) }) {
                XCTAssertTrue(names.contains(field), "\(entry.id) uses @\(field)@, which no entry carries")
            }
        }
    }
}
