import FleetCheck
import Synchronization
import WatchkeeperCore
import XCTest

@testable import FleetSimulation

/// Issue 35's defects, each as the faults that showed it, run through the simulation over
/// many seeds: the checker reads every history, and the simulation checks every run against
/// its lease at etcd.
final class FleetFaultScenarioTests: XCTestCase {
    /// Runs `count` seeds of the scenario `adjust` makes; fails with the first failing
    /// seed's summary and the command that replays it.
    @discardableResult
    private func run(_ count: Int, from first: UInt64 = 1, file: StaticString = #filePath, line: UInt = #line,
                     _ adjust: (inout FleetScenario) -> Void) -> [(simulation: FleetSimulation, result: FleetSimulationResult)] {
        (first..<(first + UInt64(count))).map { seed in
            var scenario = FleetScenario(seed: seed)
            adjust(&scenario)
            let simulation = FleetSimulation(scenario: scenario)
            let result = simulation.run()
            if !result.passed {
                XCTFail("\(result.summary)\n  (this test's scenario, not the plain seed's)", file: file, line: line)
            }
            return (simulation, result)
        }
    }

    private func seconds(_ value: Double) -> Int64 { .seconds(value) }

    /// "12.0s", "850ms", "1m2s" (Duration.compactDescription) back to a duration.
    static func duration(_ text: String) -> Duration? {
        if text.hasSuffix("ms") { return Double(text.dropLast(2)).map { .milliseconds($0) } }
        if let minutes = text.split(separator: "m").first, text.contains("m"), let whole = Double(minutes) {
            return .seconds(whole * 60) + (duration(String(text.drop { $0 != "m" }.dropFirst())) ?? .zero)
        }
        if text.hasSuffix("s") { return Double(text.dropLast()).map { .seconds($0) } }
        return nil
    }

    /// Item 1: a host cut off from etcd with files claimed and waiting starts none after its
    /// fence, drops the claims it did not start, and ends what runs before its lease can
    /// expire; the others run the files after, never beside it.
    func testAHostCutOffWithABacklogOfFiles_startsNoneAfterItsFence_andEndsItsJobsBeforeItsLeaseCanExpire() {
        let results = run(60) { scenario in
            scenario.files = (0..<30).map { FleetScenario.File(name: "f\($0).dat", createdAt: seconds(1 + Double($0) / 30), size: 100) }
            scenario.fileDurations = 1...3
            scenario.fileFailures = 0
            scenario.maxJobs = [4, 4, 4]
            scenario.ruleLimit = 4
            scenario = scenario.with(faults: [FleetScenario.Fault(kind: .partition, host: Int(scenario.seed % 3), at: seconds(2.5),
                                                                 duration: scenario.leaseTTL * 2 + seconds(2))])
        }
        XCTAssertGreaterThan(results.map(\.result.fencedRuns).reduce(0, +), 0, "no run was fenced: the scenario proves nothing")
    }

    /// Item 4: a file is claimed only when a slot is free for its job, so a host with one
    /// slot holds one claim (two for a moment, as the next claim may overtake the last
    /// record) and runs a share that follows its capacity.
    func testAFileIsClaimedWhenASlotIsFree_soAOneSlotHostHoldsNoBacklog() {
        for (simulation, result) in run(20, { scenario in
            scenario.files = (0..<40).map { FleetScenario.File(name: "f\($0).dat", createdAt: seconds(1), size: 100) }
            scenario.fileDurations = 0.1...0.3
            scenario.fileFailures = 0
            scenario.maxJobs = [1, 4, 4]
            scenario.ruleLimit = 4
            scenario.tasks = []
            // A lost or late answer leaves a claim behind until its file comes back (adopted
            // then): not this test's subject.
            scenario.lostAnswers = 0
            scenario.slowLegs = 0
            // Nor a host whose jobs queue is held up (the others then take its share).
            scenario.stalledStarts = 0
            scenario = scenario.with(faults: [])
        }) {
            var held: Set<String> = []
            var most = 0
            for (_, events) in simulation.etcd.history {
                for event in events where event.kv.key.contains("/files/") {
                    let claim = event.kind == .put && event.kv.value.contains("\"host\":\"host0\"") && event.kv.value.contains("\"state\":\"running\"")
                    if claim { held.insert(event.kv.key) } else { held.remove(event.kv.key) }
                }
                most = max(most, held.count)
            }
            XCTAssertLessThanOrEqual(most, 2, "seed \(result.report): the one-slot host held \(most) claims at once")
            let ran = simulation.history.events.filter { if case .start(_, "host0", _, _) = $0 { return true } else { return false } }.count
            XCTAssertLessThanOrEqual(Double(ran) / 40, 0.3, "the one-slot host ran \(ran) of 40 files beside two hosts of four slots")
        }
    }

    /// Starts held up between the gate and the exec (the jobs queue with them), often and
    /// for up to twice the TTL, among every fault a seed draws: a start past its fence point
    /// does not exec (the child's exec deadline), its claim is released, and every promise
    /// holds. A minute more of quiet at the end: a file held up twice on two hosts takes
    /// that long to be claimed a third time.
    func testStartsHeldUpPastTheirFencePoint_doNotExec_andEveryPromiseHolds() {
        var refused = 0
        for (simulation, _) in run(60, { scenario in
            scenario.stalledStarts = 0.2
            scenario.end += .seconds(60)
        }) {
            refused += simulation.history.lateExecsRefused
            XCTAssertEqual(simulation.history.lateExecs, 0)
        }
        XCTAssertGreaterThan(refused, 0, "no start was held up past its fence point: the scenario proves nothing")
    }

    /// Item 2: two daemons with one member name: one takes fleet duty, the other says who
    /// holds the name and takes it when that one is gone; no fire or file runs twice.
    func testTwoDaemonsWithOneName_onlyOneTakesFleetDuty_andTheOtherWhenItIsGone() {
        let said = Mutex(0)
        for seed: UInt64 in 1...30 {
            var scenario = FleetScenario(seed: seed)
            scenario.memberNames = ["twin", "twin", "host2"]
            scenario = scenario.with(faults: [FleetScenario.Fault(kind: .kill9, host: Int(seed % 2), at: seconds(8), duration: seconds(6))])
            let simulation = FleetSimulation(scenario: scenario) { line in
                if line.contains("the member name twin is held by another live member") { said.withLock { $0 += 1 } }
            }
            let result = simulation.run()
            XCTAssertTrue(result.passed, result.summary)
        }
        XCTAssertGreaterThan(said.withLock { $0 }, 0, "no daemon said the name was taken")
    }

    /// Item 3: SIGTERM while fleet runs go on: their ends are in etcd before the lease is
    /// revoked, so no host runs a finished fire or file again.
    func testCleanStops_writeTheEndsOfTheirRunsBeforeTheLeaseGoes() {
        run(150) { scenario in
            scenario.slowLegs = 0.2
            scenario = scenario.with(faults: scenario.faults.map { fault in
                FleetScenario.Fault(kind: .sigterm, host: fault.host ?? 0, at: fault.at, duration: fault.duration)
            })
        }
    }

    /// Items 5 and 7: hosts killed and restarted while others handle and move files out: a
    /// restarted host runs none of the files another finished (its catch-up finds them done
    /// in etcd, moved or not), and an ok run's record is in etcd before its host could die.
    func testKilledAndRestartedHosts_runNoFileAnotherHostFinished() {
        run(150) { scenario in
            scenario.fileMoves = scenario.seed % 2 == 0 ? 1 : 0
            scenario.files = (0..<30).map { FleetScenario.File(name: "f\($0).dat", createdAt: seconds(1 + Double($0) / 3), size: 100) }
            scenario = scenario.with(faults: scenario.faults.map { fault in
                FleetScenario.Fault(kind: .kill9, host: fault.host ?? 1, at: fault.at, duration: min(fault.duration, seconds(3)))
            })
        }
    }

    /// Item 3, the log: a clean stop while etcd has no leader gives the records it could not
    /// write up after its budget, and says so once; a record given up so is not a claim found
    /// gone, and nothing says the lease expired (seed 6389 with elections drawn said "this
    /// host's lease expired there" of a lease that lived 18 s more).
    func testAStopWhileEtcdHasNoLeader_saysItsRecordsGivenUp_andNeverThatItsLeaseExpired() {
        let gaveUp = Mutex(0)
        let falseExpiry = Mutex<[String]>([])
        for seed in UInt64(1)...12 {
            var scenario = FleetScenario(seed: seed)
            scenario.leaseTTL = seconds(9)
            scenario.tasks = [FleetScenario.Task(name: "report", interval: seconds(3), durations: 1.5...2.5, persistent: true)]
            scenario.files = []
            scenario.stubbornJobs = 0
            scenario.shutdownGrace = seconds(3)
            scenario.lostAnswers = 0
            let host = Int(seed % 3)
            scenario = scenario.with(faults: [
                FleetScenario.Fault(kind: .sigterm, host: host, at: seconds(10), duration: seconds(2)),
                FleetScenario.Fault(kind: .quorum, host: nil, at: seconds(10.2), duration: seconds(8)),
            ])
            let simulation = FleetSimulation(scenario: scenario) { line in
                if line.contains("could not be written to etcd within") { gaveUp.withLock { $0 += 1 } }
                if line.contains("lease expired there") { falseExpiry.withLock { $0.append(line) } }
            }
            let result = simulation.run()
            XCTAssertTrue(result.passed, result.summary)
        }
        // No lease expires while etcd has no quorum, and every one is refreshed after it.
        XCTAssertEqual(falseExpiry.withLock { $0 }, [])
        XCTAssertGreaterThan(gaveUp.withLock { $0 }, 0, "no stop gave a record up: the scenario proves nothing")
    }

    /// Item 6: a run stopped by the fence is recorded in etcd as run and fenced, with its
    /// start and end; a persistent fire so recorded is run again by another host, once.
    func testAFencedRunIsRecordedAsFenced_andItsPersistentFireRunsAgainElsewhereOnce() {
        var fenced = 0
        for (simulation, _) in run(40, { scenario in
            scenario.tasks = [FleetScenario.Task(name: "long", interval: seconds(6), durations: 4...5, persistent: true)]
            scenario.files = []
            scenario.stubbornJobs = 0
            // Cut off for most of a TTL: fenced, then back in time for the record to land.
            scenario = scenario.with(faults: (0..<3).map { index in
                FleetScenario.Fault(kind: .partition, host: index, at: seconds(4) + Int64(index) * seconds(20), duration: scenario.leaseTTL * 8 / 10)
            })
        }) {
            let puts = simulation.etcd.history.flatMap(\.events).filter { $0.kind == .put && $0.kv.key.contains("/fires/") }
            for (index, event) in puts.enumerated() where event.kv.value.contains("\"outcome\":\"fenced\"") {
                fenced += 1
                XCTAssertTrue(event.kv.value.contains("\"started_at\"") && event.kv.value.contains("\"finished_at\""), event.kv.value)
                // Taken over next (the takeover may itself be cut short by the next fault and
                // taken over in turn), and run to the end once.
                let later = puts[(index + 1)...].filter { $0.kv.key == event.kv.key }
                XCTAssertTrue(later.first?.kv.value.contains("\"taken_over_from\"") ?? false, "\(later.map(\.kv.value))")
                XCTAssertEqual(later.filter { $0.kv.value.contains("\"outcome\":\"ok\"") }.count, 1,
                               "the fenced fire \(event.kv.key) did not run to its end once after: \(later.map(\.kv.value))")
            }
        }
        XCTAssertGreaterThan(fenced, 0, "no run was recorded fenced: the scenario proves nothing")
    }

    /// The etcd leader killed: for a moment no request is applied; each waits for the new
    /// leader (etcd's server waits for one within the request's own timeout), and the caller
    /// may give up first, as an answer lost. The lease lives through it. A 1 s fleet task
    /// loses no fire to it: a fire whose claim failed is held and claimed again, none replaced
    /// by the next (that is for a lease gone), a fire won late makes the next wait rather than
    /// skip, and an earlier fire waits for a later one's end rather than being skipped for it.
    /// No answers are lost otherwise: the daemon's client retries a call whose connection a
    /// killed member dropped on the next endpoint at once (a black hole is the partition's).
    func testTheLeaderKilled_whileTheLeaseLives_losesNoFireOfA1sTask() {
        for (simulation, _) in run(120, { scenario in
            scenario.leaseTTL = seconds(10)
            scenario.tasks = [FleetScenario.Task(name: "tick", interval: seconds(1), durations: 0.05...0.3, persistent: scenario.seed % 2 == 0)]
            scenario.files = []
            scenario.lostAnswers = 0
            // A host whose jobs queue is held up for seconds loses fires to it: another fault.
            scenario.stalledStarts = 0
            let election = 0.3 + Double(scenario.seed % 13) / 10
            scenario = scenario.with(faults: [FleetScenario.Fault(kind: .election, host: nil, at: seconds(6), duration: seconds(election))])
        }) {
            let puts = simulation.etcd.history.flatMap(\.events).filter { $0.kind == .put && $0.kv.key.contains("/tasks/tick/fires/") }
            let ended = Set(puts.filter { $0.kv.value.contains("\"outcome\":\"ok\"") }.map(\.kv.key))
            let instants = ended.compactMap { WallTime(iso8601: String($0.split(separator: "/").last ?? "")) }.map(\.secondsSinceEpoch).sorted()
            guard let first = instants.first, let last = instants.last else { XCTFail("seed \(simulation.scenario.seed): no fire ran"); continue }
            let missing = Set(first...last).subtracting(instants).sorted()
            XCTAssertTrue(missing.isEmpty, "seed \(simulation.scenario.seed): fires that never ended ok, seconds after the first: \(missing.map { $0 - first })")
            XCTAssertGreaterThan(last - first, 30, "seed \(simulation.scenario.seed): the fires stopped early")
        }
    }

    /// Item 8: when etcd answers again, the outage said is counted from the last renewal
    /// that reached etcd (a daemon stopped for 16 s was 16 s without etcd), not from the
    /// moment the host noticed.
    func testEtcdAnsweringAgain_isSaidWithTheTimeSinceTheLastRenewalThatReachedIt() throws {
        let lines = Mutex<[String]>([])
        var scenario = FleetScenario(seed: 3)
        scenario.leaseTTL = seconds(3)
        scenario = scenario.with(faults: [FleetScenario.Fault(kind: .partition, host: 0, at: seconds(5), duration: seconds(12))])
        let simulation = FleetSimulation(scenario: scenario) { line in
            if line.contains(" host0 ") && line.contains("etcd answers again after") { lines.withLock { $0.append(line) } }
        }
        _ = simulation.run()
        let line = try XCTUnwrap(lines.withLock { $0.first }, "host0 never said etcd answers again")
        let word = try XCTUnwrap(line.split(separator: " ").drop { $0 != "after" }.dropFirst().first, line)
        let said = try XCTUnwrap(Self.duration(String(word.dropLast())), line)
        XCTAssertGreaterThan(said, .seconds(11), line)
        XCTAssertLessThan(said, .seconds(14), line)
    }
}
