import XCTest

@testable import WatchkeeperCore

/// What a claim that found its key taken means, one row per case, without etcd: the
/// reading alone (the whole claim against a simulated etcd: FleetSimulationTests).
final class ClaimReadingTests: XCTestCase {
    private let keys = FleetKeys(prefix: "/wk")
    private let lease: Int64 = 7
    private let instantText = "2026-11-28T17:00:00.000Z"

    /// `unanswered`: the run IDs of this host's claims that got no answer.
    private func reading(_ known: [String: ClaimReading.Known] = [:], unanswered: Set<String> = ["00000000000000aa"]) -> ClaimReading {
        ClaimReading(host: "web-1", lease: lease, keys: keys, known: { known[$0] ?? [] }, unanswered: { _, runID in unanswered.contains(runID) })
    }

    private func kv(_ key: String, _ value: String, lease: Int64, revision: Int64 = 40) -> EtcdKeyValue {
        EtcdKeyValue(key: key, value: value, createRevision: revision, modRevision: revision, lease: lease)
    }

    private func fire(host: String, state: FleetFire.State, instant: String? = nil) -> FleetFire {
        FleetFire(task: "report", instant: instant ?? instantText, host: host, runID: "00000000000000aa", state: state)
    }

    func testAFireClaim_thatFoundItsKeys_isWonAdoptedLostSkippedOrHeld() throws {
        let at = try XCTUnwrap(WallTime(iso8601: instantText))
        let fireKey = keys.fire("report", at: at)
        let runningKey = keys.running("report")
        let mine = fire(host: "web-1", state: .running)
        let previous = "2026-11-28T16:00:00.000Z"
        let previousKey = keys.fire("report", at: try XCTUnwrap(WallTime(iso8601: previous)))
        typealias Row = (name: String, found: [EtcdKeyValue], known: [String: ClaimReading.Known], expected: ClaimReading.Verdict<FireClaim>)
        let ours = fire(host: "web-1", state: .running)
        let theirs = fire(host: "web-2", state: .running)
        let rows: [Row] = [
            ("this host's claim on this lease, its answer lost, is adopted", [kv(fireKey, ours.json, lease: lease)], [:],
             .init(answer: .won(revision: 40, lease: lease), counter: "claims_adopted", adopts: true)),
            ("this host's claim that a run here holds is not adopted again", [kv(fireKey, ours.json, lease: lease)], [fireKey: .held],
             .init(answer: .elsewhere(ours, revision: 40), counter: "claims_lost")),
            ("nor one whose claim is still on its way", [kv(fireKey, ours.json, lease: lease)], [fireKey: .pending],
             .init(answer: .elsewhere(ours, revision: 40), counter: "claims_lost")),
            ("nor one whose record is on its way", [kv(fireKey, ours.json, lease: lease)], [fireKey: .writing],
             .init(answer: .elsewhere(ours, revision: 40), counter: "claims_lost")),
            ("this host's name under another lease (an earlier life, a twin) is not ours", [kv(fireKey, ours.json, lease: 6)], [:],
             .init(answer: .elsewhere(ours, revision: 40), counter: "claims_lost")),
            ("this host's record of the fire, ended, is not a claim to adopt",
             [kv(fireKey, fire(host: "web-1", state: .done).json, lease: 0)], [:],
             .init(answer: .elsewhere(fire(host: "web-1", state: .done), revision: 40), counter: "claims_lost")),
            ("another host's claim is lost to it", [kv(fireKey, theirs.json, lease: 9)], [:],
             .init(answer: .elsewhere(theirs, revision: 40), counter: "claims_lost")),
            ("a value this version did not write is read as done by an unknown host", [kv(fireKey, "{\"x\":1}", lease: 9)], [:],
             .init(answer: .elsewhere(FleetFire(task: "report", instant: instantText, host: "unknown", runID: "unknown", state: .done), revision: 40),
                   counter: "claims_lost")),
            ("the previous fire still running elsewhere skips this one",
             [kv(runningKey, fire(host: "web-2", state: .running, instant: previous).json, lease: 9)], [:],
             .init(answer: .previousRunning(fire(host: "web-2", state: .running, instant: previous), revision: 40, orphan: false), counter: "claims_skipped")),
            ("this host's running key on its lease with no run here holding it is an orphan",
             [kv(runningKey, fire(host: "web-1", state: .running, instant: previous).json, lease: lease)], [:],
             .init(answer: .previousRunning(fire(host: "web-1", state: .running, instant: previous), revision: 40, orphan: true), counter: "claims_skipped")),
            ("this host's running key that a run here holds is no orphan",
             [kv(runningKey, fire(host: "web-1", state: .running, instant: previous).json, lease: lease)], [previousKey: .held],
             .init(answer: .previousRunning(fire(host: "web-1", state: .running, instant: previous), revision: 40, orphan: false), counter: "claims_skipped")),
            ("nor is this host's running key on another lease",
             [kv(runningKey, fire(host: "web-1", state: .running, instant: previous).json, lease: 6)], [:],
             .init(answer: .previousRunning(fire(host: "web-1", state: .running, instant: previous), revision: 40, orphan: false), counter: "claims_skipped")),
            ("this host's previous fire, its end on its way to etcd, holds this one rather than skipping it",
             [kv(runningKey, fire(host: "web-1", state: .running, instant: previous).json, lease: lease)], [previousKey: .writing],
             .init(answer: .held("this host's record of the fire due at \(previous) is on its way to etcd"))),
            ("this host's previous fire, its claim still on its way, holds this one",
             [kv(runningKey, fire(host: "web-1", state: .running, instant: previous).json, lease: lease)], [previousKey: .pending],
             .init(answer: .held("this host's claim of the fire due at \(previous) is on its way to etcd"))),
            ("a later fire running (this one is run late) holds this one: it is not this one's previous",
             [kv(runningKey, fire(host: "web-2", state: .running, instant: "2026-11-28T18:00:00.000Z").json, lease: 9)], [:],
             .init(answer: .held("the later fire due at 2026-11-28T18:00:00.000Z runs on web-2; this one waits for its end"))),
            ("both keys gone between the compare and the read: held, to try again", [], [:],
             .init(answer: .held("the claim raced with an expiring lease; retrying"))),
        ]
        for row in rows {
            XCTAssertEqual(reading(row.known).fire(row.found, mine: mine, fireKey: fireKey), row.expected, row.name)
        }
        // Seen in the simulation with etcd electing a leader (seed 2298 with elections drawn):
        // a claim answered as won while the lease was fenced is released, the retry overtakes
        // the release, finds the claim, and must not run under a revision the release deletes.
        XCTAssertEqual(reading([:], unanswered: []).fire([kv(fireKey, ours.json, lease: lease)], mine: mine, fireKey: fireKey),
                       .init(answer: .held("this host's claim of the fire, let go a moment ago, is still in etcd; retrying")),
                       "this host's claim on this lease that was answered, and let go since, is not adopted")
    }

    func testAFileClaim_thatFoundItsKey_isWonRunningHandledOrClaimedOver() {
        let key = keys.file("inbox", "a.csv")
        let mine = FleetFile(host: "web-1", runID: "00000000000000bb", state: .running, size: 10, modifiedNanoseconds: 5)
        let ours = FleetFile(host: "web-1", runID: "00000000000000aa", state: .running, size: 10, modifiedNanoseconds: 5)
        let theirs = FleetFile(host: "web-2", runID: "00000000000000cc", state: .running, size: 10, modifiedNanoseconds: 5)
        let done = FleetFile(host: "web-2", runID: "00000000000000cc", state: .done, size: 10, modifiedNanoseconds: 5)
        let doneOtherForm = FleetFile(host: "web-2", runID: "00000000000000cc", state: .done, size: 11, modifiedNanoseconds: 5)
        typealias Row = (name: String, found: EtcdKeyValue?, known: ClaimReading.Known, expected: ClaimReading.Verdict<FileClaim?>)
        let rows: [Row] = [
            ("gone between the compare and the read: held", nil, [],
             .init(answer: .held("the claim raced with an expiring lease; retrying"))),
            ("a value this version did not write: held", kv(key, "nonsense", lease: 9), [],
             .init(answer: .held("the claim raced with an expiring lease; retrying"))),
            ("another host's job has it", kv(key, theirs.json, lease: 9), [], .init(answer: .runningElsewhere(theirs), counter: "file_claims_lost")),
            ("this host's claim under another lease is another's", kv(key, ours.json, lease: 6), [],
             .init(answer: .runningElsewhere(ours), counter: "file_claims_lost")),
            ("this host's job has it already", kv(key, ours.json, lease: lease), .held, .init(answer: .runningHere)),
            ("this host's claim of it is on its way", kv(key, ours.json, lease: lease), .pending, .init(answer: .runningHere)),
            ("this host's release of it is on its way: held", kv(key, ours.json, lease: lease), .writing,
             .init(answer: .held("this host's release of the file is on its way to etcd; retrying"))),
            ("this host's claim whose answer was lost is adopted", kv(key, ours.json, lease: lease), [],
             .init(answer: .won(revision: 40, lease: lease), counter: "claims_adopted", adopts: true)),
            ("handled in this very form elsewhere", kv(key, done.json, lease: 0), [], .init(answer: .handledElsewhere(done), counter: "file_claims_lost")),
            ("handled in another form: new content, claimed over the record", kv(key, doneOtherForm.json, lease: 0), [], .init(answer: nil)),
        ]
        for row in rows {
            XCTAssertEqual(reading([key: row.known]).file(row.found, mine: mine, key: key), row.expected, row.name)
        }
        XCTAssertEqual(reading([key: []], unanswered: ["00000000000000bb"]).file(kv(key, ours.json, lease: lease), mine: mine, key: key),
                       .init(answer: .held("this host's claim of the file, let go a moment ago, is still in etcd; retrying")),
                       "this host's claim on this lease that was answered (its release overtaken by this claim) is not adopted")
    }
}
