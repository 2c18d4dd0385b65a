import FleetSimulation

#if canImport(Glibc)
import Glibc
#endif

/// The fleet's deterministic simulation (issue 35, docs/fleet.md "Proof"):
///   watchkeeper-sim --seeds N [--from S] [--jobs J]   run seeds S ..< S+N (default 1), J at a time
///   watchkeeper-sim --seed S [--verbose] [--key K]   one seed again, exactly (with the daemon's log, and
///                                                    every change etcd made to keys containing K)
/// Exits 1 if any seed's history has an anomaly or a run broke its lease.
let arguments = Array(CommandLine.arguments.dropFirst())

func value(_ flag: String) -> UInt64? {
    guard let index = arguments.firstIndex(of: flag), index + 1 < arguments.count else { return nil }
    return UInt64(arguments[index + 1])
}

if let seed = value("--seed") {
    let simulation = FleetSimulation(seed: seed, verbose: arguments.contains("--verbose"))
    let result = simulation.run()
    if let index = arguments.firstIndex(of: "--key"), index + 1 < arguments.count {
        for line in simulation.keyHistory(containing: arguments[index + 1]) { print(line) }
    }
    print(result.summary)
    exit(result.passed ? 0 : 1)
}
guard let count = value("--seeds") else {
    print("usage: watchkeeper-sim --seeds N [--from S] [--jobs J] | --seed S [--verbose]")
    exit(64)
}
var start = timespec()
clock_gettime(CLOCK_MONOTONIC, &start)
let summary = FleetSimulation.run(seeds: Int(count), from: value("--from") ?? 1, jobs: Int(value("--jobs") ?? 2))
var end = timespec()
clock_gettime(CLOCK_MONOTONIC, &end)
print(summary.description)
print("\(Double((end.tv_sec - start.tv_sec) * 1000 + (end.tv_nsec - start.tv_nsec) / 1_000_000) / 1000) s")
exit(summary.failed.isEmpty ? 0 : 1)
