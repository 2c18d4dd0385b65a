import Foundation
import XCTest

@testable import WatchkeeperCore
@testable import WatchkeeperImport
import WatchkeeperTestSupport

final class IncrontabImporterTests: XCTestCase {
    func testMasks_mapToWatchEvents_andOptionsToKeys() throws {
        let imported = importIncron("""
            /srv/a IN_CLOSE_WRITE,IN_MOVED_TO /bin/a
            /srv/b IN_CREATE,IN_DELETE,IN_MODIFY,recursive=false /bin/b
            /srv/c IN_MOVE,IN_ATTRIB /bin/c
            /srv/d IN_ALL_EVENTS /bin/d
            /srv/e 136 /bin/e
            /srv/f IN_CLOSE,IN_ONLYDIR,IN_DONT_FOLLOW,IN_NO_LOOP,dotdirs=true /bin/f
            """)
        func events(_ name: String) -> ImportValue? { imported.entry(name)?["events"] }
        XCTAssertEqual(events("a-l1"), .strings(["closed_write", "moved_in"]))
        XCTAssertEqual(events("b-l2"), .strings(["created", "deleted", "modified"]))
        XCTAssertEqual(imported.entry("b-l2")?["recursive"], .bool(false))
        XCTAssertEqual(imported.entry("a-l1")?["recursive"], .bool(true))
        XCTAssertEqual(events("c-l3"), .strings(["moved_in", "moved_out", "attrib"]))
        XCTAssertEqual(events("d-l4"), .strings(["created", "closed_write", "moved_in", "moved_out", "deleted", "modified", "attrib"]))
        XCTAssertEqual(events("e-l5"), .strings(["closed_write", "moved_in"]), "136 = IN_CLOSE_WRITE | IN_MOVED_TO")
        XCTAssertEqual(events("f-l6"), .strings(["closed_write"]))
        let notes = imported.entry("f-l6")?.notes.joined(separator: "\n") ?? ""
        for word in ["IN_ONLYDIR", "IN_DONT_FOLLOW", "IN_NO_LOOP", "LOOPER"] { XCTAssertTrue(notes.contains(word), word) }
        XCTAssertFalse(notes.contains("dotdirs=false"), "f-l6 has dotdirs=true")
        XCTAssertTrue(imported.entry("a-l1")?.notes.contains { $0.contains("dotdirs=false") } == true)
        // What IN_ALL_EVENTS and IN_CLOSE include but watchkeeper cannot react to is listed.
        let dropped = imported.config.untranslated.filter { $0.source.line == 4 }.map(\.text)
        XCTAssertEqual(Set(dropped), ["IN_ACCESS", "IN_OPEN", "IN_CLOSE_NOWRITE", "IN_DELETE_SELF", "IN_MOVE_SELF"])
        XCTAssertEqual(imported.config.untranslated.filter { $0.source.line == 6 }.map(\.text), ["IN_CLOSE_NOWRITE"])
        let configuration = try XCTUnwrap(imported.loaded())
        XCTAssertTrue(configuration.watches.allSatisfy { !$0.catchUp }, "incron handles nothing that happened while it was down")
    }

    func testCRLFAndAByteOrderMark_areOneRulePerLine_andSaid() throws {
        let imported = importIncron("\u{FEFF}/srv/a IN_CLOSE_WRITE /bin/a $@/$#\r\n/srv/b IN_CREATE /bin/b\r\n")
        XCTAssertEqual(imported.config.entries.map(\.name), ["a-l1", "b-l2"], imported.toml)
        XCTAssertEqual(imported.entry("a-l1")?["path"], .string("/srv/a"))
        XCTAssertEqual(imported.entry("b-l2")?["command"], .strings(["/bin/b"]))
        XCTAssertTrue(imported.config.notes.contains { $0.contains("Windows line ends (CR LF) on 2 line(s): incrond") }, "\(imported.config.notes)")
        XCTAssertTrue(imported.config.notes.contains { $0.contains("byte-order mark") }, "\(imported.config.notes)")
        XCTAssertNotNil(imported.loaded())
    }

    func testEventsWithoutEquivalent_leaveTheLineUntranslated_withTheReason() {
        let imported = importIncron("/srv/x IN_ACCESS,IN_OPEN,IN_DELETE_SELF /bin/x\n/srv/y IN_BOGUS /bin/y\nrelative IN_CREATE /bin/z\n")
        XCTAssertTrue(imported.config.entries.isEmpty)
        XCTAssertEqual(imported.config.untranslated.map(\.source.line), [1, 2, 3])
        XCTAssertTrue(imported.config.untranslated[0].reason.contains("IN_ACCESS: watchkeeper does not react to reads"))
        XCTAssertTrue(imported.config.untranslated[1].reason.contains("IN_BOGUS"))
    }

    func testSimpleCommand_becomesArguments_withPlaceholders() throws {
        let imported = importIncron("/srv/in IN_CLOSE_WRITE /usr/bin/ingest --from $@ $@/$# $% {x}\n")
        XCTAssertEqual(imported.entry("in-l1")?["command"], .strings(["/usr/bin/ingest", "--from", "{dir}", "{dir}/{name}", "{event}", "{{x}}"]))
        XCTAssertNil(imported.entry("in-l1")?["shell"])
        XCTAssertNotNil(imported.loaded())
    }

    func testShellCommand_keepsTheShell_withEachValueQuotedForWhereItLands() throws {
        let imported = importIncron(#"/srv/in IN_CLOSE_WRITE echo $# "in $@" 'name $#' $$HOME > /tmp/log; code=$&"# + "\n")
        guard case .string(let script)? = imported.entry("in-l1")?["command"] else { return XCTFail(imported.toml) }
        XCTAssertNotNil(imported.loaded())
        let output = try runShell(script.replacingOccurrences(of: "> /tmp/log", with: "") + "; echo $code",
                                  environment: ["WATCHKEEPER_DIR": "/srv/in", "WATCHKEEPER_NAME": "a b;$(x)", "WATCHKEEPER_EVENT": "closed_write", "HOME": "/h"])
        XCTAssertEqual(output, "a b;$(x) in /srv/in name a b;$(x) /h\n8\n", "$$ gives incron's shell a $ to expand")
    }

    func testUserTable_runsAsItsOwner_throughBash_andLoopableIsKnown() throws {
        let imported = importIncron("/srv/in IN_CLOSE_WRITE,loopable=true echo \"$#\" | logger\n", path: "/var/spool/incron/root")
        let entry = try XCTUnwrap(imported.entry("in-l1"))
        XCTAssertEqual(entry["user"], .string("root"))
        XCTAssertEqual(entry["command"], .strings(["/bin/bash", "-c", "echo \"$WATCHKEEPER_NAME\" | logger"]))
        XCTAssertFalse(entry.notes.contains { $0.contains("LOOPER") })
        XCTAssertNotNil(imported.loaded())
    }

    func testWildcardPath_watchesItsDirectoryWithAnInclude_andAFileItsDirectory() throws {
        let scratch = try makeScratchDirectory()
        FileManager.default.createFile(atPath: scratch + "/state.json", contents: Data())
        let imported = importIncron("/srv/spool/*.csv IN_CLOSE_WRITE /bin/a $#\n\(scratch)/state.json IN_MODIFY /bin/b\n")
        let first = try XCTUnwrap(imported.config.entries.first)
        XCTAssertEqual(first["path"], .string("/srv/spool"))
        XCTAssertEqual(first["include"], .strings(["*.csv"]))
        let second = try XCTUnwrap(imported.config.entries.last)
        XCTAssertEqual(second["path"], .string(scratch))
        XCTAssertEqual(second["include"], .strings(["state.json"]))
        XCTAssertEqual(second["recursive"], .bool(false))
    }
}
