import Foundation
import WatchkeeperCore
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The control socket against clients that misbehave or must be kept out: each is dropped
/// or refused, and none of them keeps `status` from answering.
final class ControlSocketTests: ControlTestCase {
    static let oneTask = """
        [[task]]
        name = "quick"
        manual = true
        overlap = "allow"
        max_concurrent = 8
        command = ["/bin/true"]
        """

    func testMalformedJSON_getsInvalidMessage_andIsClosed_whileStatusStillAnswers() throws {
        try startDaemon(Self.oneTask)
        let fd = try rawConnection()
        defer { close(fd) }
        send(fd, Array("{\"method\": ".utf8) + [0])
        let reply = try XCTUnwrap(readReply(fd))
        XCTAssertEqual(reply["error"]?.stringValue, "io.watchkeeper.Control.InvalidMessage", reply.json)
        XCTAssertTrue(isClosedByServer(fd))
        XCTAssertEqual(try cli(["status"]).status, 0)
    }

    func testUnknownMethodAndInterface_getTheServiceInterfacesErrors() throws {
        try startDaemon(Self.oneTask)
        let fd = try rawConnection()
        defer { close(fd) }
        send(fd, VarlinkCall(method: "io.watchkeeper.Control.Explode").encoded)
        XCTAssertEqual(readReply(fd)?["error"]?.stringValue, "org.varlink.service.MethodNotFound")
        send(fd, VarlinkCall(method: "com.example.Other.Call").encoded)
        XCTAssertEqual(readReply(fd)?["error"]?.stringValue, "org.varlink.service.InterfaceNotFound")
        send(fd, VarlinkCall(method: "io.watchkeeper.Control.Trigger", parameters: [.init("task", .int(3))]).encoded)
        let invalid = readReply(fd)
        XCTAssertEqual(invalid?["error"]?.stringValue, "org.varlink.service.InvalidParameter")
        XCTAssertEqual(invalid?["parameters"]?["parameter"]?.stringValue, "task")
        // The connection stays usable after errors that are the caller's mistake.
        send(fd, VarlinkCall(method: "org.varlink.service.GetInfo").encoded)
        XCTAssertEqual(readReply(fd)?["parameters"]?["product"]?.stringValue, "watchkeeper")
    }

    func testOversizedRequest_getsRequestTooLarge_andIsClosed() throws {
        try startDaemon(Self.oneTask)
        let fd = try rawConnection()
        defer { close(fd) }
        // No NUL: the server must give up at its limit, not buffer without end.
        send(fd, [UInt8](repeating: UInt8(ascii: "a"), count: 200 * 1024))
        let reply = try XCTUnwrap(readReply(fd))
        XCTAssertEqual(reply["error"]?.stringValue, "io.watchkeeper.Control.RequestTooLarge", reply.json)
        XCTAssertEqual(reply["parameters"]?["limit"]?.intValue, 65_536)
        XCTAssertTrue(isClosedByServer(fd))
        XCTAssertEqual(try cli(["status"]).status, 0)
    }

    func testNeverFinishedRequest_doesNotBlockStatus_andIsDroppedAtItsDeadline() throws {
        try startDaemon(Self.oneTask)
        let fd = try rawConnection()
        defer { close(fd) }
        send(fd, Array("{\"method\":\"io.watchkeeper.Control.Status\"".utf8))
        XCTAssertEqual(try cli(["status"]).status, 0, "a half-sent call on another connection blocks nothing")
        // The request deadline is 5 s; the server then closes the connection without a reply.
        var timeout = timeval(tv_sec: 15, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        XCTAssertTrue(isClosedByServer(fd), "dropped at the request deadline")
    }

    func testTwoHundredIdleConnections_doNotBlockStatus() throws {
        try startDaemon(Self.oneTask)
        var idle: [Int32] = []
        defer { idle.forEach { close($0) } }
        for _ in 0 ..< 200 { idle.append(try rawConnection()) }
        XCTAssertTrue(waitFor(10) {
            (try? self.statusJSON()["control"] as? [String: Any])?["connections"] as? Int ?? 0 >= 200
        }, "the daemon holds the 200 connections")
        let status = try cli(["status"])
        XCTAssertEqual(status.status, 0, status.stderr)
        XCTAssertTrue(status.stdout.contains("● watchkeeper"))
        // Each idle one still works.
        send(idle[0], VarlinkCall(method: "org.varlink.service.GetInfo").encoded)
        XCTAssertEqual(readReply(idle[0])?["parameters"]?["vendor"]?.stringValue, "watchkeeper")
    }

    func testClientThatDoesNotRead_isDropped_andOthersAreServed() throws {
        try startDaemon(Self.oneTask)
        let fd = try rawConnection()
        defer { close(fd) }
        var small: Int32 = 4096
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        // Dumps asked for in small batches, none read: megabytes of replies back up behind
        // the full socket. Each batch waits until the daemon has answered the one before, so
        // the calls sent ahead stay within their limit (16) however slow the daemon is: it is
        // the write deadline this test is about, not TooManyRequests.
        func callsServed() -> Int { ((try? statusJSON()["control"] as? [String: Any]) ?? [:])?["calls"] as? Int ?? 0 }
        let before = callsServed()
        for batch in 1 ... 40 {
            for _ in 0 ..< 8 { send(fd, VarlinkCall(method: "io.watchkeeper.Control.Dump").encoded) }
            XCTAssertTrue(waitFor(10) { callsServed() >= before + 8 * batch }, "batch \(batch) answered")
        }
        XCTAssertEqual(try cli(["status"]).status, 0, "served while the other client's replies are stuck")
        var control: [String: Any] = [:]
        XCTAssertTrue(waitFor(30) {
            control = (try? self.statusJSON()["control"] as? [String: Any]) ?? [:]
            return (control["dropped"] as? [String: Int] ?? [:])["write timeout"] ?? 0 >= 1
        }, "the stalled reader is dropped at the write deadline: \(control)")
    }

    func testVarlinkPythonClient_callsTheDaemon() throws {
        try startDaemon(Self.oneTask)
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let modules = root.appendingPathComponent(".build/pydeps").path
        guard FileManager.default.fileExists(atPath: modules + "/varlink") else {
            XCTFail("the varlink Python module is not in \(modules): `make pydeps` installs it (make test does)")
            return
        }
        let script = """
            import sys, varlink
            with varlink.Client(address="unix:" + sys.argv[1]) as client:
                info = client.get_interfaces()
                assert "io.watchkeeper.Control" in info, info
                with client.open("io.watchkeeper.Control") as control:
                    status = control.Status()["status"]
                    print("state", status["daemon"]["state"])
                    print("run", control.Trigger(task="quick")["run_id"])
                    try:
                        control.Trigger(task="missing")
                    except varlink.VarlinkError as error:
                        print("error", error.error(), error.parameters()["task"])
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, socketPath]
        process.environment = ["PATH": "/usr/local/bin:/usr/bin:/bin:" + (ProcessInfo.processInfo.environment["PATH"] ?? ""), "PYTHONPATH": modules]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = out
        try process.run()
        let output = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, output)
        XCTAssertTrue(output.contains("state running"), output)
        XCTAssertTrue(output.range(of: "run [0-9a-f]{16}", options: .regularExpression) != nil, output)
        XCTAssertTrue(output.contains("error io.watchkeeper.Control.NoSuchTask missing"), output)
    }

    func testTriggerAndCancel_racingTheJobsOwnEnd_answerOnceEach_andEveryRunGetsOneRecord() throws {
        try startDaemon(Self.oneTask)
        var answers: [String: Int] = [:]
        var runIDs: [String] = []
        for _ in 0 ..< 25 {
            let trigger = try cli(["trigger", "quick"])
            XCTAssertEqual(trigger.status, 0, trigger.stderr)
            let words = trigger.stdout.split(separator: " ")
            let runID = try XCTUnwrap(words.firstIndex(of: "run").map { String(words[$0 + 1]) })
            runIDs.append(runID)
            // /bin/true ends within a millisecond or so: the cancel lands before, during or after.
            let cancel = try cli(["cancel", runID])
            let kind = cancel.status == 0 ? (cancel.stdout.contains("expiring") ? "running" : "waiting") : "finished"
            if cancel.status != 0 { XCTAssertEqual(cancel.status, 1, cancel.stderr) }
            answers[kind, default: 0] += 1
        }
        XCTAssertEqual(answers.values.reduce(0, +), 25, "\(answers)")
        for runID in runIDs {
            XCTAssertTrue(daemon.waitForStderr(containing: "run \(runID): ", timeout: 10), "no record for \(runID)")
        }
        XCTAssertTrue(daemon.isRunning)
        // Counted once the daemon has stopped: a second record of a run could still be on its way.
        daemon.stop(within: 15)
        let records = daemon.stderr.split(separator: "\n").filter { line in runIDs.contains { line.contains("run \($0): ") } }
        XCTAssertEqual(records.count, 25, "one record per run:\n\(records.joined(separator: "\n"))")
    }
}
