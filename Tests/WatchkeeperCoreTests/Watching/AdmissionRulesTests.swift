import XCTest

@testable import WatchkeeperCore

/// Admission's decisions from what is known of a file, as a table: the event, whether a
/// scan found it, what waits for it, and what this life remembers.
final class AdmissionRulesTests: XCTestCase {
    private static func form(changed: Int64, modified: Int64 = 1_000, inode: UInt64 = 7) -> FileIdentity {
        FileIdentity(device: 1, inode: inode, size: 4, modifiedNanoseconds: modified, changedNanoseconds: changed, bornNanoseconds: nil, generation: 0)
    }

    func testTheVerdicts() {
        let now = Self.form(changed: 5_000)
        let before = Self.form(changed: 4_000)
        let handledNow = RuleMemory(handled: [now.inodeKey: HandledFile(admitted: now, current: now, path: Array("f".utf8))])
        let handledBefore = RuleMemory(handled: [now.inodeKey: HandledFile(admitted: before, current: before, path: Array("f".utf8))])
        let inFlightNow = RuleMemory(inFlight: [now.inodeKey: InFlightFile(identity: now, current: now, submissions: 1, followers: [])])
        struct Row {
            let why: String
            let event: WatchEvent
            let fromScan: Bool
            let pending: PendingFile
            let quiet: Bool
            let memory: RuleMemory
            let verdict: AdmissionRules.Verdict
        }
        let close = PendingFile(event: .closedWrite)
        let found = PendingFile(event: .closedWrite)
        let rows: [Row] = [
            Row(why: "a close of a file never seen", event: .closedWrite, fromScan: false, pending: close, quiet: false, memory: RuleMemory(), verdict: .admit),
            Row(why: "a close that changed nothing since the job", event: .closedWrite, fromScan: false, pending: close, quiet: false, memory: handledNow,
                verdict: .unchangedSinceAdmitted),
            Row(why: "a close that changed nothing while the job waits", event: .closedWrite, fromScan: false, pending: close, quiet: false, memory: inFlightNow,
                verdict: .unchangedSinceAdmitted),
            Row(why: "a close after a write: the change time moved (cp -p, same size and mtime)", event: .closedWrite, fromScan: false, pending: close,
                quiet: false, memory: handledBefore, verdict: .admit),
            Row(why: "a move in: new only if not handled in this form", event: .movedIn, fromScan: false, pending: PendingFile(event: .movedIn), quiet: false,
                memory: handledNow, verdict: .admitUnlessHandled),
            Row(why: "a scan's find that changed within its window", event: .closedWrite, fromScan: true, pending: found, quiet: false, memory: RuleMemory(),
                verdict: .stillChanging),
            Row(why: "a scan's find quiet for its window", event: .closedWrite, fromScan: true, pending: found, quiet: true, memory: RuleMemory(),
                verdict: .admitUnlessHandled),
            Row(why: "a scan's find looked at again, unchanged", event: .closedWrite, fromScan: true, pending: PendingFile(event: .closedWrite, seen: now),
                quiet: false, memory: RuleMemory(), verdict: .admitUnlessHandled),
            Row(why: "a scan's find looked at again, changed", event: .closedWrite, fromScan: true, pending: PendingFile(event: .closedWrite, seen: before),
                quiet: true, memory: RuleMemory(), verdict: .stillChanging),
            Row(why: "a rescan after lost events: unchanged since before they were lost", event: .closedWrite, fromScan: true,
                pending: PendingFile(event: .closedWrite, changedSince: 6_000), quiet: true, memory: RuleMemory(), verdict: .olderThanTheLostEvents),
            Row(why: "a rescan after lost events: changed since", event: .closedWrite, fromScan: true,
                pending: PendingFile(event: .closedWrite, changedSince: 4_500), quiet: true, memory: RuleMemory(), verdict: .admitUnlessHandled),
            Row(why: "a scan's find whose job waits in this form", event: .closedWrite, fromScan: true, pending: found, quiet: true, memory: inFlightNow,
                verdict: .alreadyInFlight),
        ]
        for row in rows {
            let rules = AdmissionRules(event: row.event, fromScan: row.fromScan, pending: row.pending, identity: now)
            XCTAssertEqual(rules.verdict(quiet: row.quiet, memory: row.memory), row.verdict, row.why)
        }
    }

    func testQuiet_isAWindowOfTheChangeTime_andAChangeTimeInTheFutureIsNotTrusted() {
        let second: Int64 = 1_000_000_000
        let now = WallTime(secondsSinceEpoch: 2_000_000_000, nanoseconds: 0)
        let at = { (seconds: Int64) in Self.form(changed: 2_000_000_000 * second + seconds * second, modified: 0) }
        XCTAssertTrue(AdmissionRules.quietFor(.seconds(1), at(-2), now: now))
        XCTAssertFalse(AdmissionRules.quietFor(.seconds(1), at(0), now: now))
        XCTAssertFalse(AdmissionRules.quietFor(.seconds(1), at(5), now: now), "a change time in the future")
    }
}
