// The control socket on the release daemon: `status` latency with 200 tasks and 8 running
// jobs, over one connection and with a connection per call (as the CLI makes), and what
// serving it costs in memory and CPU.

import Foundation
import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

func runControlBenchmark() {
    let calls = Int(ProcessInfo.processInfo.environment["WATCHKEEPER_BENCH_CONTROL_CALLS"] ?? "") ?? 1_000
    print("control socket: \(calls) Status calls, 200 tasks, 8 running jobs, on \(releaseBinary())")
    withBenchDaemon("control", config: { directory in
        var lines = ["[daemon]", "max_jobs = 16"]
        for index in 0 ..< 8 {
            lines += ["[[task]]", "name = \"busy-\(index)\"", "manual = true", "budget = \"1h\"", "shell = true",
                      "command = 'echo PROGRESS=\(index * 10) >&\"$WATCHKEEPER_PROGRESS_FD\"; echo STATUS=part \(index) >&\"$WATCHKEEPER_PROGRESS_FD\"; exec sleep 3600'"]
        }
        for index in 0 ..< 192 {
            lines += ["[[task]]", "name = \"hourly-\(index)\"", "every = \"1h\"", "command = [\"/bin/true\"]"]
        }
        return lines.joined(separator: "\n") + "\n"
    }) { daemon in
        let socket = daemon.directory + "/run/control.sock"
        let client = try connect(socket)
        for index in 0 ..< 8 {
            guard case .success = try client.call(VarlinkCall(method: ControlInterface.Method.trigger.qualified,
                                                              parameters: [.init("task", .string("busy-\(index)"))])) else {
                throw BenchFailure(description: "unable to trigger busy-\(index)")
            }
        }
        // Every job started and reported its progress.
        var running = 0
        for _ in 0 ..< 100 {
            let status = try statusReply(client)
            running = status["jobs"]?["running"]?.arrayValue?.filter { $0["progress"]?.doubleValue != nil }.count ?? 0
            if running == 8 { break }
            usleep(50_000)
        }
        guard running == 8 else { throw BenchFailure(description: "only \(running) of 8 jobs running with progress") }
        sleep(2)
        let idleRSS = daemon.residentMiB
        let size = try statusReply(client).json.utf8.count
        let cpuBefore = daemon.cpuSeconds
        var same: [Double] = []
        for _ in 0 ..< calls {
            let started = now()
            _ = try statusReply(client)
            same.append(Double(now() - started) / 1e9)
        }
        let cpuSame = daemon.cpuSeconds - cpuBefore
        var fresh: [Double] = []
        for _ in 0 ..< calls {
            let started = now()
            _ = try statusReply(try connect(socket))
            fresh.append(Double(now() - started) / 1e9)
        }
        let afterRSS = daemon.residentMiB
        var idle: [ControlClient] = []
        for _ in 0 ..< 200 { idle.append(try connect(socket)) }
        var underLoad: [Double] = []
        for _ in 0 ..< min(calls, 200) {
            let started = now()
            _ = try statusReply(client)
            underLoad.append(Double(now() - started) / 1e9)
        }
        let idleConnectionsRSS = daemon.residentMiB
        idle.removeAll()
        print("  Status reply: \(size) bytes of JSON")
        print("  one connection, \(calls) calls:          \(milliseconds(same)); daemon CPU \(String(format: "%.2f", cpuSame * 1e3 / Double(calls))) ms per call")
        print("  a connection per call (the CLI), \(calls): \(milliseconds(fresh))")
        print("  with 200 idle connections open:         \(milliseconds(underLoad))")
        print(String(format: "  daemon RSS: %.1f MiB before any call, %.1f MiB after %d calls, %.1f MiB with 200 idle connections",
                     idleRSS, afterRSS, 2 * calls, idleConnectionsRSS))
    }
}

private func connect(_ path: String) throws -> ControlClient {
    do {
        return try ControlClient.connect(path: path, timeout: .seconds(10))
    } catch {
        throw BenchFailure(description: "\(error)")
    }
}

private func statusReply(_ client: ControlClient) throws -> DumpValue {
    let result: Result<DumpValue, VarlinkError>
    do {
        result = try client.call(VarlinkCall(method: ControlInterface.Method.status.qualified))
    } catch {
        throw BenchFailure(description: "\(error)")
    }
    switch result {
    case .success(let reply): return reply["status"] ?? .null
    case .failure(let error): throw BenchFailure(description: "Status failed: \(error)")
    }
}
