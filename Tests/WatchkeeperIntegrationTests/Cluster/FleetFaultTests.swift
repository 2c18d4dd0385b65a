import Foundation
import XCTest
import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Fleet tasks at three edges of issue 35: two daemons given one name, a clean stop racing
/// the record of the run it waited for, and a run stopped by the fence.
final class FleetFaultTests: XCTestCase {
    private func seconds(_ iso: String) -> Double? {
        WallTime(iso8601: iso).map { Double($0.secondsSinceEpoch) + Double($0.nanoseconds) / 1e9 }
    }

    private func fireKey(_ fleet: FleetHosts, task: String, instant: String) -> String {
        fleet.prefix + "/tasks/\(task)/fires/" + (WallTime(iso8601: instant)?.iso8601 ?? instant)
    }

    private func json(_ text: String?) -> [String: Any] {
        guard let text, let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { return [:] }
        return object
    }

    /// Issue 35, item 2: the second daemon with a name takes no fleet duty while the first
    /// lives, says who holds the name, and takes over when it is gone.
    func testTwoDaemonsWithOneName_onlyOneTakesFleetDuty_andStatusSaysWhoHoldsTheName() throws {
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory())
        let shared = try makeScratchDirectory()
        let fleet = try FleetHosts(count: 2, endpoints: etcd.endpoints, shared: shared, tasks: FleetHosts.tickTask(every: "1s"),
                                   memberName: "twin")
        let (first, second) = (fleet.hosts[0], fleet.hosts[1])
        try fleet.start(first)
        XCTAssertTrue(waitFor(15) { (try? fleet.control(first, ["status"]))?.contains(" held (renewed") ?? false })
        try fleet.start(second)
        let bothUp = Date().timeIntervalSince1970
        XCTAssertTrue(waitFor(15) { (try? fleet.control(second, ["status"]))?.contains("held by another member") ?? false },
                      "the second daemon does not say the name is taken: \((try? fleet.control(second, ["status"])) ?? "")")
        XCTAssertTrue(second.daemon?.waitForStderr(containing: "twin", timeout: 5) ?? false)
        XCTAssertTrue(waitFor(30) { fleet.runs().filter { (self.seconds($0.instant) ?? 0) > bothUp + 1 }.count >= 6 })
        let killedAt = Date().timeIntervalSince1970
        fleet.powerOff(first)
        // The survivor takes the name and the fires once the first one's lease is gone.
        XCTAssertTrue(waitFor(20) { fleet.runs().contains { $0.host == second.name && $0.start > killedAt } },
                      "the second daemon took no fleet duty after the first died: \(second.daemon?.stderrTail ?? "")")
        XCTAssertTrue(waitFor(20) { fleet.runs().filter { $0.host == second.name && $0.start > killedAt }.count >= 3 })
        let stoppedAfter = Date().timeIntervalSince1970
        second.daemon?.stop(within: 20)
        let runs = fleet.runs().filter { (seconds($0.instant) ?? 0) > bothUp + 1 && (seconds($0.instant) ?? .infinity) < stoppedAfter - 2 }
        for (instant, group) in Dictionary(grouping: runs, by: \.instant) where group.count != 1 {
            XCTFail("the fire at \(instant) ran \(group.count) times: \(group)")
        }
    }

    /// Issue 35, item 3: SIGTERM while a persistent fleet fire runs: the drain waits for it,
    /// its end is recorded in etcd before the lease is revoked, and no host runs it again.
    func testSIGTERMDuringAFleetRun_recordsItsEndBeforeTheLeaseGoes_andNoHostRunsTheFireAgain() throws {
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory())
        let shared = try makeScratchDirectory()
        let fleet = try FleetHosts(count: 2, endpoints: etcd.endpoints, shared: shared,
                                   tasks: FleetHosts.tickTask(every: "3s", sleep: "1", extra: "persistent = true"))
        try fleet.startAll()
        for attempt in 0..<6 {
            let before = fleet.runs().count
            guard let run = waitForValue(15, { fleet.runs().count > before ? fleet.runs().last : nil }) else {
                return XCTFail("attempt \(attempt): no fire started")
            }
            let host = try XCTUnwrap(fleet.hosts.first { $0.name == run.host })
            let other = try XCTUnwrap(fleet.hosts.first { $0.name != run.host })
            host.daemon?.stop(within: 20)
            let record = json(try etcd.get(fireKey(fleet, task: "tick", instant: run.instant)))
            XCTAssertEqual(record["state"] as? String, "done", "attempt \(attempt): the fire at \(run.instant) in etcd: \(record)")
            XCTAssertEqual(record["outcome"] as? String, "ok", "attempt \(attempt): \(record)")
            Thread.sleep(forTimeInterval: 4)
            XCTAssertEqual(fleet.runs().filter { $0.instant == run.instant }.count, 1, "attempt \(attempt): \(fleet.runs().suffix(4))")
            XCTAssertFalse(other.daemon?.stderr.contains("taking over the fire due at \(run.instant)") ?? true,
                           "attempt \(attempt): \(other.name) took over a fire that ended ok")
            try fleet.start(host)
        }
        for host in fleet.hosts { host.daemon?.stop(within: 20) }
    }

    /// Issue 35, item 6: a run stopped by the fence is recorded in etcd as run and fenced,
    /// with its start and end; a persistent task's fenced fire is run again by another host,
    /// after it, once; a task that is not persistent keeps the fenced record.
    func testAFencedRun_isRecordedAsFenced_andAPersistentFireIsTakenOverOnce() throws {
        let partition = try NetworkPartition()
        defer { partition.remove() }
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory(), extraListenAddresses: [partition.hostAddress])
        let shared = try makeScratchDirectory()
        func task(_ name: String, persistent: Bool) -> String {
            """
            [[task]]
            name = "\(name)"
            manual = true
            fleet = "one"
            persistent = \(persistent)
            shell = true
            command = 'mkdir -p @SHARED@/pids; touch @SHARED@/pids/@HOST@.$$; \(FleetHosts.record("start")); finish() { \(FleetHosts.record("end")); exit 0; }; trap finish TERM; while :; do sleep 0.1; done'
            """
        }
        let tasks = task("long", persistent: true) + "\n" + task("kept", persistent: false)
        let ttl = 9.0
        let cutOff = try FleetHosts(count: 1, endpoints: etcd.endpoints(address: partition.hostAddress), shared: shared, tasks: tasks,
                                    cluster: "lease_ttl = \"9s\"")
        let host = cutOff.hosts[0]
        host.launcher = partition.launcher
        try cutOff.start(host)
        let others = try FleetHosts(count: 1, endpoints: etcd.endpoints, shared: shared, tasks: tasks, cluster: "lease_ttl = \"9s\"",
                                    prefix: cutOff.prefix, firstIndex: 1)
        try others.startAll()
        XCTAssertTrue(waitFor(15) { (try? cutOff.control(host, ["status"]))?.contains(" held (renewed") ?? false })
        for name in ["long", "kept"] {
            let triggered = try cutOff.control(host, ["trigger", "--fleet", name])
            XCTAssertTrue(triggered.contains("submitted"), triggered)
        }
        XCTAssertTrue(waitFor(10) { cutOff.runs().count == 2 }, "the fires did not start: \(host.daemon?.stderrTail ?? "")")
        // The fence comes two thirds of the TTL after the last renewal sent: heal after it,
        // before the lease can expire, so the fenced run's record can reach etcd.
        let status = json(try cutOff.control(host, ["status", "--json"]))
        let age = try XCTUnwrap((status["cluster"] as? [String: Any])?["last_renewal_age_s"] as? Double, "\(status)")
        let renewedAt = Date().timeIntervalSince1970 - age
        try partition.cut()
        Thread.sleep(forTimeInterval: max(0, renewedAt + ttl * 0.8 - Date().timeIntervalSince1970))
        try partition.heal()
        XCTAssertTrue(waitFor(30) { cutOff.runs().filter { $0.end != nil }.count >= 2 }, "the fence did not end the runs: \(cutOff.runs())")
        let instants = Set(cutOff.runs().prefix(2).map(\.instant))
        // The persistent fire is taken over by the other host, after the fenced run, once.
        let persistentInstant = try XCTUnwrap(waitForValue(30) {
            instants.first { instant in cutOff.runs().filter { $0.instant == instant }.count >= 2 }
        }, "no fenced fire was taken over: \(cutOff.runs())\n\(others.hosts[0].daemon?.stderrTail ?? "")")
        Thread.sleep(forTimeInterval: 3)
        let runs = cutOff.runs().filter { $0.instant == persistentInstant }
        XCTAssertEqual(runs.count, 2, "\(runs)")
        if runs.count == 2 {
            XCTAssertEqual(runs[1].host, others.hosts[0].name)
            XCTAssertLessThan(try XCTUnwrap(runs[0].end), runs[1].start, "the takeover overlapped the fenced run")
        }
        let takeover = json(try etcd.get(fireKey(cutOff, task: "long", instant: persistentInstant)))
        XCTAssertEqual(takeover["taken_over_from"] as? String, host.name, "\(takeover)")
        // The other fire's record stays: run and fenced, with its times.
        let keptInstant = try XCTUnwrap(instants.first { $0 != persistentInstant })
        let kept = json(try etcd.get(fireKey(cutOff, task: "kept", instant: keptInstant)))
        XCTAssertEqual(kept["state"] as? String, "done", "\(kept)")
        XCTAssertEqual(kept["outcome"] as? String, "fenced", "\(kept)")
        XCTAssertNotNil(kept["started_at"] as? String, "\(kept)")
        XCTAssertNotNil(kept["finished_at"] as? String, "\(kept)")
        XCTAssertEqual(cutOff.runs().filter { $0.instant == keptInstant }.count, 1)
        for other in others.hosts { other.daemon?.stop(within: 20) }
        host.daemon?.stop(within: 20)
    }
}
