import Foundation
import WatchkeeperCore
import WatchkeeperTestSupport
import XCTest

/// `watchkeeper next`: from a configuration file with no daemon, and from a running daemon
/// over the control socket, whose listed fire is the one it then performs.
final class NextCommandTests: ControlTestCase {
    static let fileTasks = """
        [[task]]
        name = "backup"
        cron = "30 2 * * *"
        timezone = "Europe/Berlin"
        command = ["/bin/true"]

        [[task]]
        name = "by-hand"
        manual = true
        command = ["/bin/true"]
        """

    private func json(_ text: String, file: StaticString = #filePath, line: UInt = #line) throws -> [[String: Any]] {
        let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
        return try XCTUnwrap(object?["tasks"] as? [[String: Any]], text, file: file, line: line)
    }

    /// "2026-03-29 03:00:00" or "2026-03-29T01:00:00.000Z" as seconds, read as if in UTC.
    private func seconds(_ local: String) -> Int64? {
        let parts = local.split(whereSeparator: { " -:.TZ".contains($0) }).compactMap { Int($0) }
        guard parts.count >= 6 else { return nil }
        var fields = tm()
        fields.tm_year = Int32(parts[0] - 1900)
        fields.tm_mon = Int32(parts[1] - 1)
        fields.tm_mday = Int32(parts[2])
        fields.tm_hour = Int32(parts[3])
        fields.tm_min = Int32(parts[4])
        fields.tm_sec = Int32(parts[5])
        return Int64(timegm(&fields))
    }

    func testNextFromAFile_listsEachFireWithZoneOffsetAndUTC_withoutADaemon() throws {
        sandbox = try DaemonSandbox()
        try sandbox.writeConfig(Self.fileTasks)
        let text = try cli(["next", "--config", sandbox.configPath, "-n", "3"], withSocket: false)
        XCTAssertEqual(text.status, 0, text.stderr)
        let lines = text.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        XCTAssertEqual(lines.first, "backup: cron 30 2 * * *, zone Europe/Berlin", text.stdout)
        let fireLines = lines.filter { $0.hasPrefix("  ") && $0.contains("Z") }
        XCTAssertEqual(fireLines.count, 3, text.stdout)
        for fire in fireLines {
            XCTAssertTrue(fire.contains(" CET +01:00  ") || fire.contains(" CEST +02:00  "), fire)
        }
        XCTAssertTrue(lines.contains("by-hand: manual"), text.stdout)
        XCTAssertTrue(lines.contains("  manual: fires only when triggered (watchkeeper trigger)"), text.stdout)

        // The JSON says the same, and each local time is its UTC time plus its offset.
        let result = try cli(["next", "--config", sandbox.configPath, "-n", "3", "--json", "backup"], withSocket: false)
        XCTAssertEqual(result.status, 0, result.stderr)
        let tasks = try json(result.stdout)
        XCTAssertEqual(tasks.map { $0["name"] as? String }, ["backup"])
        let fires = try XCTUnwrap(tasks.first?["fires"] as? [[String: Any]])
        XCTAssertEqual(fires.count, 3)
        for fire in fires {
            let local = try XCTUnwrap(seconds(fire["local"] as? String ?? ""))
            let utc = try XCTUnwrap(seconds(fire["utc"] as? String ?? ""))
            let offset = fire["utc_offset"] as? String
            XCTAssertEqual(local - utc, offset == "+02:00" ? 7_200 : 3_600, "\(fire)")
            // 02:30 every day, or the gap's end (03:00, marked) on the spring-forward day.
            let wall = (fire["local"] as? String ?? "").dropFirst(11).prefix(5)
            if fire["mark"] is NSNull {
                XCTAssertEqual(wall, "02:30", "\(fire)")
            } else {
                XCTAssertEqual(wall, "03:00", "\(fire)")
            }
        }
    }

    func testNextFrom_listsTheFiresAfterThatInstant_fromAFileAndFromTheDaemon() throws {
        sandbox = try DaemonSandbox()
        try sandbox.writeConfig(Self.fileTasks)
        // Next year's fall-back night in Berlin: 2027-10-31 02:30 CEST is the first of two.
        let expected = ["2027-10-31T00:30:00.000Z", "2027-11-01T01:30:00.000Z"]
        let fromFile = try cli(["next", "--config", sandbox.configPath, "--from", "2027-10-30 12:00 UTC", "-n", "2", "--json", "backup"], withSocket: false)
        XCTAssertEqual(fromFile.status, 0, fromFile.stderr)
        let fires = try XCTUnwrap(try json(fromFile.stdout).first?["fires"] as? [[String: Any]])
        XCTAssertEqual(fires.compactMap { $0["utc"] as? String }, expected, fromFile.stdout)
        let mark = (fires.first?["mark"] as? [String: Any])?["text"] as? String
        XCTAssertEqual(mark, "repeated: 02:30 occurs twice on this day (CEST, then CET); this is the first, the second does not fire")

        let bad = try cli(["next", "--config", sandbox.configPath, "--from", "next tuesday"], withSocket: false)
        XCTAssertEqual(bad.status, 64, bad.stderr)
        XCTAssertTrue(bad.stderr.contains("--from: \"next tuesday\""), bad.stderr)

        try startDaemon(Self.fileTasks)
        let fromDaemon = try cli(["next", "backup", "--from", "@1824897600", "-n", "2", "--json"])
        XCTAssertEqual(fromDaemon.status, 0, fromDaemon.stderr)
        let daemonFires = try XCTUnwrap(try json(fromDaemon.stdout).first?["fires"] as? [[String: Any]])
        XCTAssertEqual(daemonFires.compactMap { $0["utc"] as? String }, expected, fromDaemon.stdout)
    }

    func testNextFromAFile_unknownTask_exits1NamingIt() throws {
        sandbox = try DaemonSandbox()
        try sandbox.writeConfig(Self.fileTasks)
        let result = try cli(["next", "--config", sandbox.configPath, "backup", "nope"], withSocket: false)
        XCTAssertEqual(result.status, 1)
        XCTAssertTrue(result.stderr.contains("no task named nope in \(sandbox.configPath)"), result.stderr)
        XCTAssertEqual(result.stdout, "")
    }

    func testNextFromTheDaemon_unknownTask_exits1NamingIt() throws {
        try startDaemon(Self.fileTasks)
        let result = try cli(["next", "nope"])
        XCTAssertEqual(result.status, 1)
        XCTAssertTrue(result.stderr.contains("no task named nope"), result.stderr)
    }

    func testNextFromTheDaemon_listsEveryTask_andTheFireItListsIsTheOneItPerforms() throws {
        try startDaemon(Self.fileTasks + """

            [[task]]
            name = "tick"
            every = "1s"
            command = ["/bin/true"]
            """)
        let all = try cli(["next"])
        XCTAssertEqual(all.status, 0, all.stderr)
        let headers = all.stdout.split(separator: "\n").filter { !$0.hasPrefix(" ") }
        XCTAssertEqual(headers.map { String($0.prefix { $0 != ":" }) }, ["backup", "by-hand", "tick"], all.stdout)
        XCTAssertTrue(all.stdout.contains("from the daemon's anchor"), all.stdout)

        let result = try cli(["next", "tick", "-n", "3", "--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let fires = try XCTUnwrap(try json(result.stdout).first?["fires"] as? [[String: Any]])
        let listed = fires.compactMap { $0["utc"] as? String }
        XCTAssertEqual(listed.count, 3, result.stdout)
        let instants = listed.compactMap(WallTime.init(iso8601:)).map { $0.secondsSinceEpoch * 1_000 + Int64($0.nanoseconds) / 1_000_000 }
        XCTAssertEqual(instants.count, 3, "\(listed)")
        if instants.count == 3 { XCTAssertEqual([instants[1] - instants[0], instants[2] - instants[1]], [1_000, 1_000], "\(listed)") }

        // The daemon then records a run scheduled at exactly the first listed instant.
        var history = ""
        XCTAssertTrue(waitFor(15) {
            history = (try? self.cli(["history", "tick", "-n", "20", "--json"]).stdout) ?? history
            return history.contains("\"scheduled_at\":\"\(listed[0])\"")
        }, "next listed \(listed[0]); history: \(history)")
    }

    func testACalendarTask_firesAtTheInstantsNextLists_asSystemdWouldElapseIt() throws {
        try startDaemon("""
            [[task]]
            name = "every-two"
            calendar = ["*:*:0/2 UTC", "2020-01-01 UTC"]
            command = ["/bin/true"]
            """)
        let result = try cli(["next", "every-two", "-n", "3", "--json"])
        XCTAssertEqual(result.status, 0, result.stderr)
        let tasks = try json(result.stdout)
        XCTAssertEqual(tasks.first?["schedule"] as? String, "calendar *-*-* *:*:00/2 UTC; 2020-01-01 00:00:00 UTC", result.stdout)
        let fires = try XCTUnwrap(tasks.first?["fires"] as? [[String: Any]])
        let listed = fires.compactMap { $0["utc"] as? String }
        XCTAssertEqual(listed.count, 3, result.stdout)
        let instants = listed.compactMap(WallTime.init(iso8601:))
        XCTAssertEqual(instants.count, 3, "\(listed)")
        // Even seconds only, two apart: the past date adds nothing.
        XCTAssertEqual(instants.map { $0.secondsSinceEpoch % 2 }, [0, 0, 0], "\(listed)")
        if instants.count == 3 {
            XCTAssertEqual([instants[1].secondsSinceEpoch - instants[0].secondsSinceEpoch, instants[2].secondsSinceEpoch - instants[1].secondsSinceEpoch], [2, 2])
        }

        // The daemon then runs the task scheduled at exactly those instants.
        var history = ""
        XCTAssertTrue(waitFor(15) {
            history = (try? self.cli(["history", "every-two", "-n", "20", "--json"]).stdout) ?? history
            return listed.allSatisfy { history.contains("\"scheduled_at\":\"\($0)\"") }
        }, "next listed \(listed); history: \(history)")
    }
}
