import Dispatch
import FleetSimulation
import Foundation
import XCTest

/// The proof of issue 35 in `make test`: 10,000 seeds (WATCHKEEPER_SIM_SEEDS for more or
/// fewer), each a fleet of three hosts running the daemon's own fleet code against the
/// simulated etcd under partitions, kills and restarts, clean stops, quorum losses, lost
/// answers and slow jobs; every history read by FleetHistoryChecker, every run checked
/// against its lease at etcd. A failing seed prints the command that replays it.
final class FleetSimulationSeedsTests: XCTestCase {
    func testTenThousandSeeds_ofTasksAndInboxFilesUnderFaults_keepEveryPromise() {
        let environment = ProcessInfo.processInfo.environment
        let seeds = Int(environment["WATCHKEEPER_SIM_SEEDS"] ?? "") ?? 10_000
        let first = UInt64(environment["WATCHKEEPER_SIM_FIRST_SEED"] ?? "") ?? 1
        let started = DispatchTime.now()
        let summary = FleetSimulation.run(seeds: seeds, from: first, jobs: ProcessInfo.processInfo.activeProcessorCount)
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        print("fleet simulation: \(summary.description)\n\(String(format: "%.1f", seconds)) s on \(ProcessInfo.processInfo.activeProcessorCount) core(s)")
        XCTAssertEqual(summary.seeds, seeds)
        XCTAssertEqual(summary.failed.map(\.seed), [], "failing seeds; replay one with: \(summary.failed.first.map { SeedRunSummary.replay($0.seed) } ?? "")")
        // The faults happened: a run without them would prove nothing.
        for kind in ["partition", "kill9", "sigterm", "etcd_quorum"] {
            XCTAssertGreaterThan(summary.faults[kind] ?? 0, seeds / 5, "too few \(kind) faults")
        }
        XCTAssertGreaterThan(summary.fencedRuns, 0, "no run was ever fenced")
    }

    /// What `watchkeeper-sim --seed S` prints, in a process of its own, is what this process
    /// got for the seed: nothing depends on hashing, addresses or the real clock.
    func testASeedsReplayCommand_reproducesItExactly_inAnotherProcess() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let binary = repository.appendingPathComponent(".build/debug/watchkeeper-sim").path
        guard FileManager.default.isExecutableFile(atPath: binary) else { throw XCTSkip("no \(binary): swift build first") }
        for seed: UInt64 in [11, 5003] {
            let expected = FleetSimulation(seed: seed).run().summary
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = ["--seed", String(seed)]
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            XCTAssertEqual(printed.trimmingCharacters(in: .newlines), expected, "seed \(seed)")
        }
    }

    func testASeed_replaysExactly() {
        for seed: UInt64 in [7, 4242] {
            let first = FleetSimulation(seed: seed).run()
            let again = FleetSimulation(seed: seed).run()
            XCTAssertEqual(first.report, again.report, "seed \(seed)")
            XCTAssertEqual(first.eventsRun, again.eventsRun, "seed \(seed)")
        }
    }
}
