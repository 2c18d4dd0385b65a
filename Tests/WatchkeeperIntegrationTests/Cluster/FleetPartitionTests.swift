import Foundation
import XCTest
import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A host cut off from etcd while it runs a fleet fire: it must stop the job before its
/// lease can expire, so the host that takes the fire over never runs it at the same time.
/// The daemon runs in a network namespace of its own, reaching etcd through a veth pair
/// whose link the test takes down.
final class FleetPartitionTests: XCTestCase {
    private func seconds(_ iso: String) -> Double? {
        WallTime(iso8601: iso).map { Double($0.secondsSinceEpoch) + Double($0.nanoseconds) / 1e9 }
    }

    func testAPartitionedHostStopsItsFleetJobBeforeAnotherTakesTheFireOver() throws {
        let partition = try NetworkPartition()
        defer { partition.remove() }
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory(), extraListenAddresses: [partition.hostAddress])
        let shared = try makeScratchDirectory()
        // The job records its end when told to stop (on_expire first, then SIGTERM).
        let task = """
            [[task]]
            name = "long"
            manual = true
            fleet = "one"
            persistent = true
            shell = true
            command = 'mkdir -p @SHARED@/pids; touch @SHARED@/pids/@HOST@.$$; \(FleetHosts.record("start")); finish() { \(FleetHosts.record("end")); exit 0; }; trap finish TERM; while :; do sleep 0.1; done'
            on_expire = 'echo "@HOST@ $WATCHKEEPER_EXPIRE_REASON $(date +%s.%N)" >> @SHARED@/expired'
            """
        let cutOff = try FleetHosts(count: 1, endpoints: etcd.endpoints(address: partition.hostAddress), shared: shared, tasks: task)
        let host = cutOff.hosts[0]
        host.launcher = partition.launcher
        try cutOff.start(host)
        // The fire is claimed by the host in the namespace alone.
        XCTAssertTrue(waitFor(10) { (try? cutOff.control(host, ["status"]))?.contains(" held (renewed") ?? false })
        let triggered = try cutOff.control(host, ["trigger", "--fleet", "long"])
        XCTAssertTrue(triggered.contains("submitted"), triggered)
        XCTAssertTrue(waitFor(10) { cutOff.runs().count == 1 }, "the fire did not start: \(host.daemon?.stderrTail ?? "")")
        let first = try XCTUnwrap(cutOff.runs().first)
        // Two more hosts, outside the namespace, watching the prefix.
        let others = try FleetHosts(count: 2, endpoints: etcd.endpoints, shared: shared, tasks: task, prefix: cutOff.prefix, firstIndex: 1)
        try others.startAll()
        Thread.sleep(forTimeInterval: 1)
        try partition.cut()
        let cutAt = Date().timeIntervalSince1970

        XCTAssertTrue(waitFor(20) { cutOff.runs().filter { $0.instant == first.instant }.count >= 2 },
                      "not taken over: \(cutOff.runs())\n\(host.daemon?.stderrTail ?? "")")
        let runs = cutOff.runs().filter { $0.instant == first.instant }
        let fenced = try XCTUnwrap(runs.first { $0.runID == first.runID })
        let takeover = try XCTUnwrap(runs.first { $0.runID != first.runID })
        let fencedEnd = try XCTUnwrap(fenced.end, "the cut-off job never ended: \(runs)")
        XCTAssertLessThan(fencedEnd, takeover.start, "two runs of one fire overlapped: \(runs)")
        let expired = (try? String(contentsOfFile: shared + "/expired", encoding: .utf8)) ?? ""
        XCTAssertTrue(expired.contains("\(host.name) fleet_lease_lost"), expired)
        XCTAssertTrue(host.daemon?.waitForStderr(containing: "expiry=fleet_lease_lost", timeout: 5) ?? false, host.daemon?.stderrTail ?? "")
        // Measured: from the cut to the fenced job's end, and the gap before the takeover.
        print("fence: cut to end of the cut-off job \(String(format: "%.2f", fencedEnd - cutAt)) s; end to takeover start \(String(format: "%.2f", takeover.start - fencedEnd)) s; lease_ttl 4 s")
        try partition.heal()
        for other in others.hosts { other.daemon?.stop(within: 20) }
        host.daemon?.stop(within: 20)
    }
}
