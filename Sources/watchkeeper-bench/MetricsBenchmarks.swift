// What the Prometheus metrics cost in memory: idle RSS of the release daemon on the demo
// configuration, with metrics_file set and without, and of a baseline binary built without
// the metrics code (WATCHKEEPER_BENCH_BASELINE), run side by side.

import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Each round starts the variants at once on the demo configuration (demo/watchkeeper.toml,
/// read from the current directory), lets them run for WATCHKEEPER_BENCH_IDLE_S seconds
/// (default 60: the demo's tasks run and the metrics file is written 4 times at the default
/// 15 s), then reads VmRSS and RssAnon; WATCHKEEPER_BENCH_RUNS rounds (default 3), medians.
func runMetricsMemoryBenchmark() {
    let environment = ProcessInfo.processInfo.environment
    let idle = UInt32(environment["WATCHKEEPER_BENCH_IDLE_S"] ?? "") ?? 60
    let runs = Int(environment["WATCHKEEPER_BENCH_RUNS"] ?? "") ?? 3
    guard let demo = try? String(contentsOfFile: "demo/watchkeeper.toml", encoding: .utf8) else {
        print("metrics memory: failed: run it from the repository root (demo/watchkeeper.toml)")
        return
    }
    try? FileManager.default.createDirectory(atPath: "/tmp/watchkeeper-demo/inbox", withIntermediateDirectories: true)
    var variants: [(name: String, binary: String, config: (String) -> String)] = [
        ("this binary, no metrics_file", releaseBinary(), { _ in demo }),
        ("this binary, metrics_file set", releaseBinary(), { directory in
            demo.replacingOccurrences(of: "[daemon]\n", with: "[daemon]\nmetrics_file = \"\(directory)/watchkeeper.prom\"\n")
        }),
    ]
    if let baseline = environment["WATCHKEEPER_BENCH_BASELINE"] {
        variants.insert(("baseline \(baseline)", baseline, { _ in demo }), at: 0)
    }
    print("metrics memory: demo configuration, \(runs) round(s) of \(idle) s, variants started together")
    var resident = Array(repeating: [Double](), count: variants.count)
    var anonymous = resident
    for _ in 0..<runs {
        do {
            let daemons = try variants.map { try BenchDaemon(binary: $0.binary, config: $0.config) }
            defer { daemons.forEach { $0.stop() } }
            sleep(idle)
            for (index, daemon) in daemons.enumerated() {
                resident[index].append(daemon.residentMiB)
                anonymous[index].append(daemon.anonymousMiB)
            }
        } catch {
            print("metrics memory: failed: \(error)")
            return
        }
    }
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    for (index, variant) in variants.enumerated() {
        let runs = resident[index].map { String(format: "%.2f", $0) }.joined(separator: ", ")
        print("  \(variant.name): " + String(format: "VmRSS %.2f MiB, RssAnon %.2f MiB", median(resident[index]), median(anonymous[index]))
              + " (medians; VmRSS of each round: \(runs))")
    }
}
