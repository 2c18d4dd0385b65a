import FleetCheck
import WatchkeeperCore
import XCTest

/// The checker's rules, each shown broken by a small history and kept by its neighbour.
final class FleetHistoryCheckerTests: XCTestCase {
    private let fire = "task:report@2026-11-28T17:00:00.000Z"

    private func run(_ id: String, on host: String, _ start: Double, _ end: Double?, ok: Bool = true, item: String? = nil) -> [FleetHistoryEvent] {
        let item = item ?? fire
        var events: [FleetHistoryEvent] = [.start(item: item, host: host, run: id, at: start)]
        if let end { events.append(.end(item: item, host: host, run: id, at: end, ok: ok)) }
        return events
    }

    func testOneRunPerItem_andEveryExpectedItemOk_isClean() {
        let report = FleetHistoryChecker().check([.expect(item: fire)] + run("a-1", on: "a", 1, 2)
                                                 + run("b-1", on: "b", 1.5, 2.5, item: "file:inbox/x#1"))
        XCTAssertEqual(report.anomalyCount, 0, "\(report)")
        XCTAssertEqual(report.runs, 2)
        XCTAssertEqual(report.items, 2)
        XCTAssertEqual(report.okRuns, 2)
    }

    func testTwoRunsOfOneItemAliveAtOnce_onTwoHosts_isAnOverlap() {
        let report = FleetHistoryChecker().check(run("a-1", on: "a", 1, 3, ok: false) + run("b-1", on: "b", 2, 4))
        XCTAssertEqual(report.anomalies[.overlap], 1, "\(report)")
    }

    func testARunThatStartsAsTheFailedOneEnds_isATakeover_notAnOverlap() {
        let report = FleetHistoryChecker().check(run("a-1", on: "a", 1, 3, ok: false) + run("b-1", on: "b", 3, 4))
        XCTAssertEqual(report.anomalyCount, 0, "\(report)")
        XCTAssertEqual(report.rerunsAfterFailure, 1)
    }

    func testARunWithoutAnEnd_isClosedByTheKillOfItsHostsJobs_andMayBeTakenOverAfter() {
        let kill = FleetFault(kind: "kill9", host: "a", at: 5, until: 8, jobsKilled: true)
        let report = FleetHistoryChecker().check(run("a-1", on: "a", 1, nil) + [.fault(kill)] + run("b-1", on: "b", 6, 7))
        XCTAssertEqual(report.anomalyCount, 0, "\(report)")
        XCTAssertEqual(report.killedRuns, 1)
        XCTAssertEqual(report.faults["kill9"], 1)
    }

    func testATakeoverBeforeTheKilledRunDied_isAnOverlap() {
        let kill = FleetFault(kind: "kill9", host: "a", at: 5, jobsKilled: true)
        let report = FleetHistoryChecker().check(run("a-1", on: "a", 1, nil) + run("b-1", on: "b", 4, 7) + [.fault(kill)])
        XCTAssertEqual(report.anomalies[.overlap], 1, "\(report)")
    }

    func testARunNothingEnded_isAnAnomaly_andOverlapsEveryLaterRun() {
        let report = FleetHistoryChecker().check(run("a-1", on: "a", 1, nil) + run("b-1", on: "b", 100, 101))
        XCTAssertEqual(report.anomalies[.neverEnded], 1, "\(report)")
        XCTAssertEqual(report.anomalies[.overlap], 1, "\(report)")
    }

    func testARunAfterAnOkOne_isAnAnomaly_unlessItsHostWasSilencedBeforeItCouldSaySo() {
        let again = run("a-1", on: "a", 1, 2) + run("b-1", on: "b", 10, 11)
        XCTAssertEqual(FleetHistoryChecker().check(again).anomalies[.ranAgainAfterOk], 1)

        let cutOff = FleetFault(kind: "partition", host: "a", at: 2.3, until: 30)
        let excused = FleetHistoryChecker(silenceWindow: 1).check(again + [.fault(cutOff)])
        XCTAssertEqual(excused.anomalyCount, 0, "\(excused)")
        XCTAssertEqual(excused.rerunsAfterSilencedOk, 1)

        // A clean stop is no excuse: the daemon writes its records before it lets the lease go.
        let stopped = FleetFault(kind: "sigterm", host: "a", at: 2.3, until: 30)
        XCTAssertEqual(FleetHistoryChecker().check(again + [.fault(stopped)]).anomalies[.ranAgainAfterOk], 1)
        // Nor is a partition long after the run ended: its record had time to reach etcd.
        let late = FleetFault(kind: "partition", host: "a", at: 5, until: 30)
        XCTAssertEqual(FleetHistoryChecker(silenceWindow: 1).check(again + [.fault(late)]).anomalies[.ranAgainAfterOk], 1)
    }

    /// Seeds 6389 and 8885 (elections drawn): a host stopped with SIGTERM, its run ended ok
    /// during the drain just as etcd lost its quorum; the stop gave the record up after its
    /// budget, the claim went with the lease, and another host ran the fire again. What the
    /// docs say of a clean stop without etcd, so counted as at-least-once.
    func testARunAfterAnOkOne_isExcused_whenItsHostStoppedWhileEtcdHadNoLeader() {
        let again = run("a-1", on: "a", 1, 2) + run("b-1", on: "b", 10, 11)
        let stop = FleetFault(kind: "sigterm", host: "a", at: 0.5, until: 6)
        let noQuorum = FleetFault(kind: "etcd_quorum", host: nil, at: 1.9, until: 7)
        let excused = FleetHistoryChecker(silenceWindow: 1).check(again + [.fault(stop), .fault(noQuorum)])
        XCTAssertEqual(excused.anomalyCount, 0, "\(excused)")
        XCTAssertEqual(excused.rerunsAfterSilencedOk, 1)
        XCTAssertEqual(excused.rerunsAfterStopWithoutEtcd, 1)

        // An outage that began after the record had had its time to land excuses nothing,
        let later = FleetFault(kind: "etcd_election", host: nil, at: 4, until: 9)
        XCTAssertEqual(FleetHistoryChecker(silenceWindow: 1).check(again + [.fault(stop), .fault(later)]).anomalies[.ranAgainAfterOk], 1)
        // nor one without a stop: a host that goes on writes its record when etcd is back,
        XCTAssertEqual(FleetHistoryChecker(silenceWindow: 1).check(again + [.fault(noQuorum)]).anomalies[.ranAgainAfterOk], 1)
        // nor one that ended before the run did.
        let earlier = FleetFault(kind: "etcd_quorum", host: nil, at: 0.2, until: 1.5)
        XCTAssertEqual(FleetHistoryChecker(silenceWindow: 1).check(again + [.fault(stop), .fault(earlier)]).anomalies[.ranAgainAfterOk], 1)
    }

    func testAnExpectedItemWithOnlyFailedRuns_neverRanOk() {
        let report = FleetHistoryChecker().check([.expect(item: fire), .expect(item: "file:inbox/never#1")]
                                                 + run("a-1", on: "a", 1, 2, ok: false))
        XCTAssertEqual(report.anomalies[.neverRanOk], 2, "\(report)")
        XCTAssertEqual(report.expected, 2)
    }

    func testEndsWithoutStarts_andRunIDsUsedTwice_areMalformed() {
        let report = FleetHistoryChecker().check([.end(item: fire, host: "a", run: "x", at: 1, ok: true)]
                                                 + run("a-1", on: "a", 1, 2) + run("a-1", on: "a", 3, 4))
        // The stray end, the second start, and the second start's end.
        XCTAssertEqual(report.anomalies[.malformed], 3, "\(report)")
    }

    func testEveryEvent_readsBackFromItsJSONLine() throws {
        let events: [FleetHistoryEvent] = run("a-1", on: "a", 1.25, 2.5, item: "file:in/\"q\"\n#1") + [
            .fault(FleetFault(kind: "kill9", host: "b", at: 3, until: 4.5, jobsKilled: true)),
            .fault(FleetFault(kind: "etcd_quorum", host: nil, at: 5)),
            .expect(item: fire),
        ]
        for (index, event) in events.enumerated() {
            XCTAssertEqual(try FleetHistoryEvent.parse(line: event.jsonLine, lineNumber: index + 1), event, event.jsonLine)
        }
        XCTAssertNil(try FleetHistoryEvent.parse(line: "  ", lineNumber: 9))
        XCTAssertThrowsError(try FleetHistoryEvent.parse(line: #"{"type":"start","item":"x"}"#, lineNumber: 7)) {
            XCTAssertEqual(($0 as? FleetHistoryEvent.ParseError)?.line, 7)
        }
    }
}
