import Logging
import XCTest

@testable import WatchkeeperCore

/// Pins how a log event becomes journal fields. journald silently drops fields whose
/// names break its rules (systemd's `journal_field_valid()`: `[A-Z0-9_]`, not starting
/// with `_` or a digit, at most 64 bytes), so every name we produce must be valid.
final class JournalFieldsTests: XCTestCase {
    /// journald's own rule, written out independently of the code under test.
    private func isValidJournalFieldName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard let first = bytes.first, bytes.count <= 64 else { return false }
        guard (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(first) else { return false }
        return bytes.allSatisfy { byte in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "_")
        }
    }

    private func assertValidPrefixedName(_ name: String, for key: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(isValidJournalFieldName(name), "\"\(name)\" (from \(key.debugDescription)) is not a valid journal field name", file: file, line: line)
        XCTAssertTrue(name.hasPrefix("WATCHKEEPER_"), "\"\(name)\" lacks the prefix", file: file, line: line)
        XCTAssertLessThanOrEqual(name.utf8.count, 64, file: file, line: line)
        XCTAssertFalse(name.hasPrefix("_"), file: file, line: line)
        XCTAssertFalse(name.contains("__"), "\"\(name)\" has a run of underscores", file: file, line: line)
    }

    // MARK: - Field names

    func testFieldName_mapsTypicalAndAwkwardKeysExactly() {
        let cases: [(key: String, name: String, line: UInt)] = [
            ("job.pid", "WATCHKEEPER_JOB_PID", #line),
            ("run-id", "WATCHKEEPER_RUN_ID", #line),
            // Non-ASCII letters have no journal spelling; they become separators,
            // and a separator at the start is dropped.
            ("Ünicode key", "WATCHKEEPER_NICODE_KEY", #line),
            ("", "WATCHKEEPER_FIELD", #line),
            ("__x", "WATCHKEEPER_X", #line),
            ("9lives", "WATCHKEEPER_9LIVES", #line),
            ("pid", "WATCHKEEPER_PID", #line),
            ("AlreadyUpper_9", "WATCHKEEPER_ALREADYUPPER_9", #line),
            ("a..b--c  d", "WATCHKEEPER_A_B_C_D", #line),
            ("trailing.", "WATCHKEEPER_TRAILING", #line),
            ("...", "WATCHKEEPER_FIELD", #line),
            ("漢字", "WATCHKEEPER_FIELD", #line),
            ("x=y\nz", "WATCHKEEPER_X_Y_Z", #line),
        ]
        for c in cases {
            let name = JournalFields.fieldName(forMetadataKey: c.key)
            XCTAssertEqual(name, c.name, "key \(c.key.debugDescription)", line: c.line)
            assertValidPrefixedName(name, for: c.key, line: c.line)
        }
    }

    func testFieldName_ofA200CharacterKey_isCutTo64Characters() {
        let key = String(repeating: "abcdefghij", count: 20)
        let name = JournalFields.fieldName(forMetadataKey: key)
        XCTAssertEqual(name, "WATCHKEEPER_" + String(repeating: "ABCDEFGHIJ", count: 5) + "AB")
        XCTAssertEqual(name.count, 64)
        assertValidPrefixedName(name, for: key)
    }

    func testFieldName_cutAtASeparator_doesNotEndInAnUnderscore() {
        // Trailing separators are trimmed for short keys ("trailing." above); the cut
        // to 64 characters must not bring one back. "a." × 100 maps to A_A_A_..., and
        // the 64th character of that is an underscore.
        let key = String(repeating: "a.", count: 100)
        let name = JournalFields.fieldName(forMetadataKey: key)
        assertValidPrefixedName(name, for: key)
        XCTAssertFalse(name.hasSuffix("_"), "\"\(name)\"")
        XCTAssertEqual(name, "WATCHKEEPER_" + String(repeating: "A_", count: 25) + "A")
    }

    func testFieldName_ofManyGeneratedKeys_isAlwaysAValidPrefixedName() {
        // Deterministic SplitMix64, so a failure reproduces.
        var seed: UInt64 = 0x5EED_CAFE_F00D_D00D
        func next() -> UInt64 {
            seed &+= 0x9E37_79B9_7F4A_7C15
            var z = seed
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        let alphabet: [Unicode.Scalar] = Array("abcxyzABCXYZ0129_-. :/=\t\n\u{1}\u{7F}éÜß漢😀\u{FEFF}".unicodeScalars)
        var seen = 0
        for _ in 0..<500 {
            let length = Int(next() % 130)
            var key = ""
            for _ in 0..<length {
                key.unicodeScalars.append(alphabet[Int(next() % UInt64(alphabet.count))])
            }
            let name = JournalFields.fieldName(forMetadataKey: key)
            assertValidPrefixedName(name, for: key)
            XCTAssertEqual(JournalFields.fieldName(forMetadataKey: key), name, "the mapping is a function of the key")
            seen += 1
        }
        XCTAssertEqual(seen, 500)
    }

    // MARK: - Priority

    func testPriority_ofEveryLevel_isTheSyslogValue() {
        let expected: [Logger.Level: Int] = [
            .trace: 7, .debug: 7, .info: 6, .notice: 5, .warning: 4, .error: 3, .critical: 2,
        ]
        XCTAssertEqual(Set(expected.keys), Set(Logger.Level.allCases), "every level has an expectation")
        for level in Logger.Level.allCases {
            XCTAssertEqual(JournalFields.priority(level), expected[level], "\(level)")
        }
    }

    // MARK: - Flattening

    func testFlatten_nestedDictionariesAndArrays_giveOneSortedLeafPerField() {
        let metadata: Logger.Metadata = [
            "tags": ["p", "q"],
            "job": [
                "pid": .stringConvertible(3),
                "name": "backup",
                "limits": ["cpu": "1s"],
            ],
            "a": "x",
        ]
        let flat = JournalFields.flatten(metadata).map { "\($0.key)=\($0.value)" }
        XCTAssertEqual(flat, [
            "a=x",
            "job_limits_cpu=1s",
            "job_name=backup",
            "job_pid=3",
            "tags=p,q",
        ])
    }

    func testFlatten_withPrefix_prefixesEveryKey() {
        let flat = JournalFields.flatten(["b": "2", "a": ["c": "3"]], prefix: "top").map { "\($0.key)=\($0.value)" }
        XCTAssertEqual(flat, ["top_a_c=3", "top_b=2"])
    }

    func testFlatten_emptyMetadataAndEmptyNesting_giveNoFields() {
        XCTAssertTrue(JournalFields.flatten([:]).isEmpty)
        XCTAssertTrue(JournalFields.flatten(["job": [:]]).isEmpty)
        XCTAssertEqual(JournalFields.flatten(["list": []]).map(\.value), [""])
    }

    // MARK: - Whole events

    func testFields_carryTheStandardJournalFieldsFirst_thenPrefixedMetadata() {
        let fields = JournalFields.fields(
            level: .warning,
            message: "unable to write state.json: No space left on device",
            metadata: ["path": "/run/watchkeeper/state.json", "job": ["pid": "42"]],
            label: "watchkeeper.dump",
            file: "WatchkeeperCore/StateDump.swift",
            function: "write(to:)",
            line: 118
        ).map { "\($0.name)=\($0.value)" }
        XCTAssertEqual(fields, [
            "MESSAGE=unable to write state.json: No space left on device",
            "PRIORITY=4",
            "SYSLOG_IDENTIFIER=watchkeeper",
            "CODE_FILE=WatchkeeperCore/StateDump.swift",
            "CODE_LINE=118",
            "CODE_FUNC=write(to:)",
            "WATCHKEEPER_LOGGER=watchkeeper.dump",
            "WATCHKEEPER_JOB_PID=42",
            "WATCHKEEPER_PATH=/run/watchkeeper/state.json",
        ])
    }

    func testFields_messageIDMetadata_becomesTheJournalsOwnMessageID() {
        let id = "3a0b7a6e0a8e4f3bb1f2d0b8d0c1e2f3"
        let fields = JournalFields.fields(
            level: .notice, message: "started", metadata: [JournalFields.messageIDKey: .string(id), "x": "1"],
            label: "l", file: "f", function: "g", line: 1
        )
        XCTAssertEqual(JournalFields.messageIDKey, "message_id")
        XCTAssertEqual(fields.filter { $0.name == "MESSAGE_ID" }.map(\.value), [id])
        XCTAssertFalse(fields.contains { $0.name == "WATCHKEEPER_MESSAGE_ID" }, "message_id must not be prefixed")
        XCTAssertEqual(fields.first { $0.name == "PRIORITY" }?.value, "5")
        XCTAssertEqual(fields.first { $0.name == "WATCHKEEPER_X" }?.value, "1")
    }

    func testFields_everyName_isAValidJournalFieldName() {
        let fields = JournalFields.fields(
            level: .critical, message: "m",
            metadata: ["": "empty", "__x": "1", "9": "2", "ü": "3", "a.b": ["c-d": "4"], "message_id": "abc"],
            label: "l", file: "f", function: "g", line: 7
        )
        for field in fields {
            XCTAssertTrue(isValidJournalFieldName(field.name), field.name)
        }
    }
}
