import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// File names are attacker-controlled: every byte 1-255 but '/', 255-byte names, a leading
/// '-', shell syntax, quotes, newlines that would forge a log line, escape sequences,
/// invalid UTF-8. Each must reach the job exactly (argv, environment, stdin batch), run
/// nothing, and never make the daemon write a line it did not mean to.
final class HostileNameTests: WatchTestCase {
    /// What the daemon logs on stderr starts with an ISO 8601 time stamp, line after line.
    private static let forgedMarker = "2026-01-01T00:00:00.000Z critical: FORGED"

    private static var names: [[UInt8]] {
        var names: [[UInt8]] = []
        for byte in UInt8(1)...255 where byte != UInt8(ascii: "/") {
            names.append(Array("b\(byte)-".utf8) + [byte] + Array("-end".utf8))
        }
        names.append([UInt8](repeating: UInt8(ascii: "n"), count: 255))
        names.append(Array("-rf --no-preserve-root".utf8))
        names.append(Array("$(touch PWNED)`touch PWNED2`;touch PWNED3".utf8))
        names.append(Array("'\"\\ \t*?[a]{b,c}~".utf8))
        names.append(Array("x\n\(forgedMarker)\nrest".utf8))
        names.append(Array("x\r\(forgedMarker)".utf8))
        names.append([0x1b] + Array("[2J\u{1b}]0;title\u{07}clear".utf8))
        names.append([0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80, 0x2e, 0x62, 0x69, 0x6e])
        names.append(Array("\u{202e}txt.exe".utf8))
        return names
    }

    private func create(_ name: [UInt8]) {
        let path = Array((sandbox.root + "/in/").utf8) + name + [0]
        let fd = path.withUnsafeBufferPointer { open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_WRONLY | O_CREAT, 0o644) }
        XCTAssertGreaterThanOrEqual(fd, 0, "unable to create \(name): \(String(cString: strerror(errno)))")
        close(fd)
    }

    func testEveryHostileName_reachesArgvEnvironmentAndStdinByteExact_andRunsNothing() throws {
        try start("""
            [[watch]]
            name = "by-argv"
            path = "@DIR@/in"
            exclude_temporary = false
            command = ["/bin/sh", "-c", "printf '%s\\\\0' \\"$1\\" >> @DIR@/argv", "sh", "{path}"]

            [[watch]]
            name = "by-env"
            path = "@DIR@/in"
            exclude_temporary = false
            command = ["/bin/sh", "-c", "printf '%s\\\\0' \\"$WATCHKEEPER_PATH\\" >> @DIR@/env"]

            [[watch]]
            name = "by-stdin"
            path = "@DIR@/in"
            exclude_temporary = false
            settle = "300ms"
            batch = "stdin"
            command = ["/bin/sh", "-c", "cat >> @DIR@/stdin"]

            [[watch]]
            name = "echoes"
            path = "@DIR@/in"
            exclude_temporary = false
            command = ["/usr/bin/printf", "name=%s\\n", "{name}"]
            """, daemonExtra: "max_jobs = 8")
        let names = Self.names
        for name in names { create(name) }
        let expected = Set(names.map { Array((sandbox.root + "/in/").utf8) + $0 })
        for file in ["argv", "env", "stdin"] {
            XCTAssertTrue(waitFor(60) { Set(self.records(self.sandbox.root + "/" + file)).count >= names.count },
                          "\(file): \(Set(records(sandbox.root + "/" + file)).count) of \(names.count)\n\(daemon.stderrTail)")
            let got = records(sandbox.root + "/" + file)
            XCTAssertEqual(Set(got), expected, "\(file): names changed on the way")
            XCTAssertEqual(got.count, names.count, "\(file): each name exactly once")
        }
        XCTAssertTrue(waitFor(30) { self.daemon.stderr.components(separatedBy: "watch echoes run").count - 1 >= names.count }, daemon.stderrTail)
        for planted in ["PWNED", "PWNED2", "PWNED3"] {
            XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.root + "/" + planted), "a name ran a command")
            XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.root + "/in/" + planted), "a name ran a command")
        }
        // Every line the daemon wrote is its own: a time stamp first, no raw control bytes. Read
        // once it has stopped: the other rules' records may still be on their way to stderr,
        // and a line being appended would be read cut.
        daemon.stop(within: 20)
        let stderr = try Data(contentsOf: URL(fileURLWithPath: daemon.stderrPath))
        for line in stderr.split(separator: UInt8(ascii: "\n")) {
            let text = String(decoding: line, as: UTF8.self)
            XCTAssertNotNil(text.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "#, options: .regularExpression),
                            "a line the daemon did not write: \(text.debugDescription)")
            XCTAssertFalse(line.contains { $0 < 0x20 && $0 != UInt8(ascii: "\t") }, "a raw control byte reached the log: \(text.debugDescription)")
            XCTAssertFalse(text.hasPrefix(Self.forgedMarker), "forged line: \(text)")
        }
    }
}
