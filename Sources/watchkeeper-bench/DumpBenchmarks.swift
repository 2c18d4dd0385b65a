// The SIGUSR1 dump of a large daemon: 1,000 tasks and a watch rule over 10,000 directories
// (issue 10's "≤ 20 ms to build"). Reports the daemon's own dump_build_ms (every component
// described on its queue and the tree assembled) and SIGUSR1 to state.json rewritten (the
// JSON and text rendered, the file written and fsynced, the text logged).

import Foundation

#if canImport(Glibc)
import Glibc
#endif

func runDumpBenchmark() {
    let taskCount = Int(ProcessInfo.processInfo.environment["WATCHKEEPER_BENCH_DUMP_TASKS"] ?? "") ?? 1_000
    let fanOut = 100
    let dumps = 20
    print("state dump: \(taskCount) tasks, a rule over \(fanOut * fanOut) directories, \(dumps) dumps, on \(releaseBinary())")
    withBenchDaemon("dump", config: { directory in
        let root = directory + "/tree"
        for outer in 0 ..< fanOut {
            for inner in 0 ..< fanOut {
                try? FileManager.default.createDirectory(atPath: "\(root)/d\(outer)/e\(inner)", withIntermediateDirectories: true)
            }
        }
        var lines = ["[daemon]", "[[watch]]", "name = \"tree\"", "path = \"\(root)\"", "recursive = true", "command = [\"/bin/true\", \"{path}\"]"]
        for index in 0 ..< taskCount {
            lines += ["[[task]]", "name = \"task-\(index)\"", "every = \"1h\"", "command = [\"/bin/true\"]"]
        }
        return lines.joined(separator: "\n") + "\n"
    }) { daemon in
        let statePath = daemon.directory + "/run/state.json"
        func sequence() -> (Int, Double)? {
            guard let data = FileManager.default.contents(atPath: statePath),
                  let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                  let number = object["sequence"] as? Int, let build = object["dump_build_ms"] as? Double else { return nil }
            return (number, build)
        }
        var builds: [Double] = []
        var totals: [Double] = []
        var size = 0
        for expected in 1 ... dumps {
            let sent = now()
            kill(daemon.pid, SIGUSR1)
            var seen: (Int, Double)?
            while seen == nil || seen!.0 < expected {
                if now() - sent > 10_000_000_000 { throw BenchFailure(description: "dump \(expected) did not arrive within 10 s") }
                usleep(200)
                seen = sequence()
            }
            totals.append(Double(now() - sent) / 1e9)
            builds.append(seen!.1 / 1e3)
            size = (try? FileManager.default.attributesOfItem(atPath: statePath)[.size] as? Int) ?? 0
        }
        print("  state.json: \(size) bytes")
        print("  dump_build_ms (components described, tree built): \(milliseconds(builds))")
        print("  SIGUSR1 to state.json rewritten:                  \(milliseconds(totals))")
        print(String(format: "  daemon RSS %.1f MiB", daemon.residentMiB))
    }
}
