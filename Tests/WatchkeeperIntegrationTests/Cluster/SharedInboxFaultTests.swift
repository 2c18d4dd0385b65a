import FleetCheck
import Foundation
import XCTest
import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A shared inbox under the faults it exists for (issue 35): a host cut off from etcd with
/// files on its hands, hosts of unequal capacity, a host killed and restarted while another
/// moves files out. Every job writes its start and end to one history that
/// `FleetHistoryChecker` reads, with the faults the test caused.
final class SharedInboxFaultTests: XCTestCase {
    private static let ttl = 4.0

    private func inboxRule(_ inbox: String, seconds: String) -> String {
        """
        [[watch]]
        name = "inbox"
        path = "\(inbox)"
        events = ["closed_write", "moved_in"]
        settle = "100ms"
        fleet = "one"
        shell = true
        command = '''
        \(FleetHosts.inboxJob(seconds: seconds))'''
        """
    }

    /// Files written under a temporary name and renamed in, as producers do.
    private func drop(_ count: Int, into inbox: String, from first: Int = 0) -> [String] {
        (first..<(first + count)).map { index in
            let name = String(format: "f%05d.dat", index)
            FileManager.default.createFile(atPath: inbox + "/.\(name).part", contents: Data("payload \(index)\n".utf8))
            rename(inbox + "/.\(name).part", inbox + "/" + name)
            return "file:\(name)#1"
        }
    }

    private func done(_ shared: String) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: shared + "/done").count) ?? 0
    }

    private func report(_ fleet: FleetHosts, faults: [FleetFault], expected: [String]) throws -> FleetCheckReport {
        let report = FleetHistoryChecker().check(try fleet.historyEvents(faults: faults, expected: expected))
        print("checker: \(report.dumpValue.json)")
        return report
    }

    /// Issue 35, item 1: a host cut off from etcd stops *starting* fleet jobs at its fence,
    /// drops what it claimed and did not start, and has ended every job before its lease can
    /// expire; the other host runs what it left, never beside it.
    func testAPartitionedHost_startsNothingAfterItsFence_andEndsItsJobsBeforeItsLeaseCanExpire() throws {
        let partition = try NetworkPartition()
        defer { partition.remove() }
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory(), extraListenAddresses: [partition.hostAddress])
        let shared = try makeScratchDirectory()
        let inbox = shared + "/inbox"
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        // Jobs longer than the time from the cut to the fence: the fence stops them.
        let rule = inboxRule(inbox, seconds: "6")
        let cutOff = try FleetHosts(count: 1, endpoints: etcd.endpoints(address: partition.hostAddress), shared: shared, tasks: rule,
                                    daemon: "max_jobs = 4")
        let host = cutOff.hosts[0]
        host.launcher = partition.launcher
        try cutOff.start(host)
        let other = try FleetHosts(count: 1, endpoints: etcd.endpoints, shared: shared, tasks: rule, prefix: cutOff.prefix, firstIndex: 1,
                                   daemon: "max_jobs = 4")
        try other.startAll()
        for fleetHost in [host, other.hosts[0]] {
            let fleet = fleetHost === host ? cutOff : other
            XCTAssertTrue(waitFor(15) { (try? fleet.control(fleetHost, ["status"]))?.contains(" held (renewed") ?? false }, "\(fleetHost.name) holds no lease")
        }
        let expected = drop(40, into: inbox)
        Thread.sleep(forTimeInterval: 2)
        try partition.cut()
        let cutAt = Date().timeIntervalSince1970
        Thread.sleep(forTimeInterval: 20)
        try partition.heal()
        let healAt = Date().timeIntervalSince1970
        XCTAssertTrue(waitFor(120) { self.done(shared) == expected.count }, "handled \(done(shared)) of \(expected.count)")
        host.daemon?.stop(within: 20)
        other.hosts[0].daemon?.stop(within: 20)

        let events = try cutOff.historyEvents()
        var starts: [String: Double] = [:]
        var late: [String] = []
        for event in events {
            switch event {
            case .start(let item, let runHost, let run, let at) where runHost == host.name:
                starts[run] = at
                if at > cutAt + Self.ttl && at < healAt { late.append("\(item) started \(at - cutAt) s after the cut") }
            case .end(let item, let runHost, let run, let at, _) where runHost == host.name:
                if let start = starts[run], start < healAt, at > cutAt + Self.ttl, at < healAt {
                    late.append("\(item) (started \(start - cutAt) s after the cut) ended \(at - cutAt) s after it")
                }
            default: break
            }
        }
        XCTAssertEqual(late, [], "the cut-off host ran jobs past the moment its lease could expire (\(Self.ttl) s after the cut)")
        let ends = events.compactMap { event -> Double? in
            if case .end(_, host.name, _, let at, _) = event, at > cutAt, at < healAt { return at - cutAt }
            return nil
        }
        let startsAfterCut = events.compactMap { event -> Double? in
            if case .start(_, host.name, _, let at) = event, at > cutAt, at < healAt { return at - cutAt }
            return nil
        }
        print("inbox fence: the cut-off host's last start \(startsAfterCut.max().map { String(format: "%.2f", $0) } ?? "none") s and last end \(ends.max().map { String(format: "%.2f", $0) } ?? "none") s after the cut; lease_ttl \(Self.ttl) s")
        let report = try report(cutOff, faults: [FleetFault(kind: "partition", host: host.name, at: cutAt, until: healAt)], expected: expected)
        XCTAssertEqual(report.anomalyCount, 0, "\(report.examples)")
    }

    /// Issue 35, item 4: a file is claimed when a slot is free, so a host with one slot never
    /// holds more than it runs, and shares follow capacity.
    func testClaimsFollowFreeSlots_aHostWithOneSlotHoldsNoMoreThanItRuns() throws {
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory())
        let shared = try makeScratchDirectory()
        let inbox = shared + "/inbox"
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        let rule = inboxRule(inbox, seconds: "0.2")
        let small = try FleetHosts(count: 1, endpoints: etcd.endpoints, shared: shared, tasks: rule, daemon: "max_jobs = 1")
        let large = try FleetHosts(count: 1, endpoints: etcd.endpoints, shared: shared, tasks: rule, prefix: small.prefix, firstIndex: 1,
                                   daemon: "max_jobs = 4")
        try small.startAll()
        try large.startAll()
        for (fleet, fleetHost) in [(small, small.hosts[0]), (large, large.hosts[0])] {
            XCTAssertTrue(waitFor(15) { (try? fleet.control(fleetHost, ["status"]))?.contains(" held (renewed") ?? false })
        }
        let expected = drop(100, into: inbox)
        // What the one-slot host holds in etcd, sampled while the files are handled.
        var mostHeld = 0
        let keys = small.prefix + "/watches/inbox/files/"
        let deadline = Date().addingTimeInterval(60 * testDeadlineScale)
        while done(shared) < expected.count && Date() < deadline {
            let held = ((try? etcd.getPrefix(keys)) ?? []).filter { $0.value.contains("\"host\":\"host0\"") && $0.value.contains("\"state\":\"running\"") }.count
            mostHeld = max(mostHeld, held)
            usleep(50_000)
        }
        XCTAssertTrue(waitFor(60) { self.done(shared) == expected.count }, "handled \(done(shared)) of \(expected.count)")
        small.hosts[0].daemon?.stop(within: 20)
        large.hosts[0].daemon?.stop(within: 20)
        let report = try report(small, faults: [], expected: expected)
        XCTAssertEqual(report.anomalyCount, 0, "\(report.examples)")
        let ended = try small.historyEvents().compactMap { event -> String? in
            if case .end(_, let host, _, _, true) = event { return host }
            return nil
        }
        let share = Double(ended.filter { $0 == "host0" }.count) / Double(max(1, ended.count))
        print("claims at free slots: the one-slot host held at most \(mostHeld) claim(s) and ran \(Int(share * 100)) % of \(ended.count) files beside a four-slot host")
        // A slot's next claim may reach etcd before the last file's record: one more.
        XCTAssertLessThanOrEqual(mostHeld, 2, "the one-slot host held files it was not running")
        XCTAssertLessThanOrEqual(share, 0.35, "the one-slot host ran more than its capacity's share")
    }

    /// Issue 35, item 5: a host killed (and later stopped) and restarted while the other
    /// handles and moves files out runs none of the files the other finished, whether still
    /// listed or moved.
    func testARestartedHost_runsNoFileTheOtherHostFinished_stillThereOrMoved() throws {
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory())
        let shared = try makeScratchDirectory()
        let inbox = shared + "/inbox"
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        let fleet = try FleetHosts(count: 2, endpoints: etcd.endpoints, shared: shared, tasks: inboxRule(inbox, seconds: "0.05"),
                                   daemon: "max_jobs = 8")
        try fleet.startAll()
        let victim = fleet.hosts[0]
        var expected = drop(400, into: inbox)
        XCTAssertTrue(waitFor(60) { self.done(shared) >= 100 }, "handled \(done(shared))")
        fleet.powerOff(victim)
        // Every job of the host is dead by now (a job spawned during the kill, too).
        let killedAt = Date().timeIntervalSince1970
        expected += drop(400, into: inbox, from: 400)
        try fleet.start(victim)
        let restartedAt = Date().timeIntervalSince1970
        XCTAssertTrue(waitFor(60) { self.done(shared) >= 500 }, "handled \(done(shared))")
        // A clean stop and a start, while the other host works through the rest.
        let stoppedAt = Date().timeIntervalSince1970
        victim.daemon?.stop(within: 20)
        expected += drop(400, into: inbox, from: 800)
        try fleet.start(victim)
        let startedAt = Date().timeIntervalSince1970
        XCTAssertTrue(waitFor(120) { self.done(shared) == expected.count }, "handled \(done(shared)) of \(expected.count)")
        for host in fleet.hosts { host.daemon?.stop(within: 20) }
        // A job killed with its host may have moved its file before it could say it ended.
        let events = try fleet.historyEvents()
        var ended = Set<String>()
        for case .end(_, _, let run, _, _) in events { ended.insert(run) }
        var killed = Set<String>()
        for case .start(let item, victim.name, let run, let at) in events where !ended.contains(run) && at < killedAt { killed.insert(item) }
        let faults = [FleetFault(kind: "kill9", host: victim.name, at: killedAt, until: restartedAt, jobsKilled: true),
                      FleetFault(kind: "sigterm", host: victim.name, at: stoppedAt, until: startedAt)]
        let report = try report(fleet, faults: faults, expected: expected.filter { !killed.contains($0) })
        XCTAssertEqual(report.anomalyCount, 0, "\(report.examples)")
        XCTAssertEqual(report.failedRuns, 0, "runs on files already handled and moved")
    }
}
