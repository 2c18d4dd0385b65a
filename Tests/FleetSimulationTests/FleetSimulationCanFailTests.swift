import FleetCheck
import WatchkeeperCore
import XCTest

@testable import FleetSimulation

/// The simulation can fail: with a fence that trusts a clock running too slow (injected
/// through the seam's `FleetClock`: the host's clock runs at 70 % of real time, so it
/// believes its lease lives longer than etcd keeps it), a host cut off from etcd runs its
/// jobs past its lease's expiry, and the checker sees runs of one item side by side.
final class FleetSimulationCanFailTests: XCTestCase {
    func testAFenceThatTrustsAClockRunningSlow_letsACutOffHostRunBesideTheNextOne_andTheCheckerSaysSo() {
        var overlaps = 0
        var violations = 0
        for seed: UInt64 in 1...20 {
            var scenario = FleetScenario(seed: seed)
            scenario.clockRates[0] = 0.6
            scenario.files = (0..<8).map { FleetScenario.File(name: "f\($0).dat", createdAt: .seconds(1 + Double($0) / 30), size: 100) }
            scenario.fileDurations = 3...6
            scenario.fileFailures = 0
            scenario.stubbornJobs = 1
            scenario.maxJobs = [4, 4, 4]
            scenario.ruleLimit = 4
            scenario = scenario.with(faults: [FleetScenario.Fault(kind: .partition, host: 0, at: .seconds(2.5), duration: scenario.leaseTTL * 3)])
            let result = FleetSimulation(scenario: scenario).run()
            overlaps += result.report.anomalies[.overlap] ?? 0
            violations += result.leaseViolations.count
        }
        XCTAssertGreaterThan(overlaps, 0, "the checker saw no overlapping runs from a fence on a slow clock")
        XCTAssertGreaterThan(violations, 0, "no run outlived its lease at etcd")
        print("a fence on a clock at 60 %: \(overlaps) overlapping runs, \(violations) runs past their lease, in 20 seeds")
    }

    /// A start held up past its fence point (the daemon stopped between the gate and the
    /// spawn, as CI's nemesis caught on ffbdafe) while its host is cut off: without the child's
    /// exec deadline the job starts after its lease is gone at etcd, and the simulation says
    /// so; with it, no such start. Both over the same seeds.
    func testWithoutTheExecDeadline_aStartHeldUpPastItsFencePoint_runsWithoutALiveClaim() {
        func run(checked: Bool) -> (violations: Int, late: Int, refused: Int) {
            var totals = (violations: 0, late: 0, refused: 0)
            for seed: UInt64 in 1...20 {
                var scenario = FleetScenario(seed: seed)
                scenario.stalledStarts = 0.5
                scenario.execDeadlineChecked = checked
                scenario.files = (0..<12).map { FleetScenario.File(name: "f\($0).dat", createdAt: .seconds(1 + Double($0) / 4), size: 100) }
                scenario.fileDurations = 0.1...0.5
                scenario = scenario.with(faults: [FleetScenario.Fault(kind: .partition, host: 0, at: .seconds(2.5), duration: scenario.leaseTTL * 3)])
                let simulation = FleetSimulation(scenario: scenario)
                let result = simulation.run()
                totals.violations += result.leaseViolations.count
                totals.late += simulation.history.lateExecs
                totals.refused += simulation.history.lateExecsRefused
            }
            return totals
        }
        let unchecked = run(checked: false)
        let checked = run(checked: true)
        XCTAssertGreaterThan(unchecked.late, 0, "no start was held up past its fence point: the scenario proves nothing")
        XCTAssertGreaterThan(unchecked.violations, 0, "no late start ran without a live claim")
        XCTAssertGreaterThan(checked.refused, 0)
        XCTAssertEqual(checked.violations, 0, "a start held up past its fence point ran with the deadline checked")
        print("starts held up past their fence point: \(unchecked.late) exec'd, \(unchecked.violations) lease violations without the deadline; \(checked.refused) refused, \(checked.violations) violations with it")
    }
}
