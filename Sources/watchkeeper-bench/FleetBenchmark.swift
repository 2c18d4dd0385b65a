// What issue 25's fleet coordination costs (docs/measurements/fleet.md): a single-member
// etcd on loopback, its data directory on disk (fsync real) and on /dev/shm (fsync cheap);
// release daemons without [cluster] and with it and a fleet = "one" task; how much later a
// fleet task's job starts than a local one's (the claim), etcd call latencies through our
// client by kind (a txn writes and fsyncs the WAL, a keepalive and a range do not), and idle
// RSS and CPU beside a baseline binary from before the feature (WATCHKEEPER_BENCH_BASELINE).
// Then issue 35's shared-inbox throughput (FleetThroughputBenchmark.swift).

import Foundation
import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

// MARK: etcd calls through our own client

// @unchecked Sendable: written once by the call's completion, read after the semaphore it signals.
private final class Answer<T>: @unchecked Sendable {
    var value: T?
    let done = DispatchSemaphore(value: 0)
}

/// Calls etcd through the daemon's client (EtcdClient on a queue of its own), one at a
/// time, each timed from the call to its answer.
private final class BenchEtcdClient {
    let queue = SubsystemQueue(name: "bench-cluster")
    let client: EtcdClient

    init(endpoint: String) throws {
        client = EtcdClient(options: .init(endpoints: [try EtcdEndpoint.parse(endpoint)]), queue: queue, sources: SourceRegistry())
    }

    /// Runs `body` on the client's queue and waits for its answer (10 s at most).
    func call<T>(_ body: @escaping (EtcdClient, @escaping (T) -> Void) -> Void) -> (T?, Double) {
        let answer = Answer<T>()
        let started = now()
        nonisolated(unsafe) let body = body
        nonisolated(unsafe) let client = client
        queue.async {
            body(client) { value in
                answer.value = value
                answer.done.signal()
            }
        }
        _ = answer.done.wait(timeout: .now() + 10)
        return (answer.value, Double(now() - started) / 1e9)
    }

    /// Waits until etcd grants a lease (it elects itself leader after start-up).
    func waitForLease(seconds: Double) -> Int64? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let (result, _) = call { (client, done: @escaping (Result<(id: Int64, ttl: Int64), EtcdError>) -> Void) in
                client.grantLease(ttl: .seconds(30), timeout: .seconds(1), completion: done)
            }
            if case .success(let granted)? = result { return granted.id }
            usleep(100_000)
        }
        return nil
    }

    func close() {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) let client = client
        queue.async { client.close(); done.signal() }
        done.wait()
    }
}

private struct CallLatencies {
    var range: [Double] = []
    var keepalive: [Double] = []
    var txn: [Double] = []
    var failures = 0
}

/// `count` of each, interleaved so a disturbance hits all kinds alike: a linearizable range
/// (a read, no WAL write), a lease keepalive (the leader renews it in memory, no WAL
/// write) and the claim's transaction (two keys created if absent, bound to the lease:
/// a raft entry, so the WAL's fsync).
private func measureCalls(_ bench: BenchEtcdClient, lease: Int64, count: Int) -> CallLatencies {
    var latencies = CallLatencies()
    let tag = String(getpid())
    for index in 0..<count {
        let (read, readTime) = bench.call { (client, done: @escaping (Result<EtcdKeyValue?, EtcdError>) -> Void) in
            client.get("/wk-bench/calls/\(tag)/fire/0", timeout: .seconds(5), completion: done)
        }
        if case .success? = read { latencies.range.append(readTime) } else { latencies.failures += 1 }
        let (renewed, renewTime) = bench.call { (client, done: @escaping (Result<Int64, EtcdError>) -> Void) in
            client.keepAlive(lease: lease, timeout: .seconds(5), completion: done)
        }
        if case .success? = renewed { latencies.keepalive.append(renewTime) } else { latencies.failures += 1 }
        let entries = [(key: "/wk-bench/calls/\(tag)/fire/\(index)", value: "{\"host\":\"bench\",\"state\":\"running\"}"),
                       (key: "/wk-bench/calls/\(tag)/running/\(index)", value: "{\"host\":\"bench\",\"state\":\"running\"}")]
        let (created, createTime) = bench.call { (client, done: @escaping (Result<EtcdClient.CreateAllResult, EtcdError>) -> Void) in
            client.createAll(entries, lease: lease, timeout: .seconds(5), completion: done)
        }
        if case .success(.created)? = created { latencies.txn.append(createTime) } else { latencies.failures += 1 }
    }
    return latencies
}

// MARK: the job

/// A tiny C program as the job: it reads CLOCK_REALTIME first, then appends
/// "TASK RUN_ID NANOSECONDS" (its start minus WATCHKEEPER_SCHEDULED_AT) to the file it is given.
private let stampSource = #"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const char *at = getenv("WATCHKEEPER_SCHEDULED_AT"), *task = getenv("WATCHKEEPER_TASK"), *run = getenv("WATCHKEEPER_RUN_ID");
    if (argc < 2 || !at || !task) return 2;
    struct tm fields;
    memset(&fields, 0, sizeof fields);
    const char *rest = strptime(at, "%Y-%m-%dT%H:%M:%S", &fields);
    if (!rest) return 3;
    long long ms = *rest == '.' ? strtoll(rest + 1, NULL, 10) : 0;
    long long scheduled = (long long)timegm(&fields) * 1000000000LL + ms * 1000000LL;
    long long started = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
    char line[256];
    int length = snprintf(line, sizeof line, "%s %s %lld\n", task, run ? run : "-", started - scheduled);
    int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, length) != length) return 4;
    return 0;
}
"""#

private func buildStamp(in directory: String) throws -> String {
    try compileBenchProgram(stampSource, named: "stamp", in: directory)
}

// MARK: configurations

private struct FleetConfig {
    let stamp: String
    let endpoint: String?

    /// (a): one local task; (b), with `endpoint`: the same plus [cluster] and the same task
    /// with fleet = "one". `every`: "1s" while measuring starts, "1h" for idle figures.
    func text(directory: String, every: String, member: Int) -> String {
        var lines = ["[daemon]"]
        if let endpoint {
            lines += ["", "[cluster]", "etcd = [\"\(endpoint)\"]", "name = \"bench-\(member)\"",
                      "prefix = \"/wk-bench/\(getpid())/\(member)-\(UInt32.random(in: 0...UInt32.max))\"", "lease_ttl = \"10s\""]
        }
        func task(_ name: String, fleet: Bool) -> [String] {
            ["", "[[task]]", "name = \"\(name)\"", "every = \"\(every)\"", "budget = \"900ms\""]
                + (fleet ? ["fleet = \"one\""] : [])
                + ["command = [\"\(stamp)\", \"\(directory)/starts\"]"]
        }
        lines += task("local-tick", fleet: false)
        if endpoint != nil { lines += task("fleet-tick", fleet: true) }
        return lines.joined(separator: "\n") + "\n"
    }
}

// MARK: measuring

private func quantiles(_ values: [Double]) -> (p50: Double, p90: Double, max: Double)? {
    guard !values.isEmpty else { return nil }
    let sorted = values.sorted()
    func at(_ p: Double) -> Double { sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))] }
    return (at(0.5), at(0.9), sorted.last!)
}

private func msRow(_ label: String, _ values: [Double]) -> String {
    guard let q = quantiles(values) else { return "  \(label.padding(toLength: 52, withPad: " ", startingAt: 0)) | (no samples)" }
    return "  \(label.padding(toLength: 52, withPad: " ", startingAt: 0)) | " + String(format: "%7.2f | %7.2f | %7.2f | %4d", q.p50 * 1e3, q.p90 * 1e3, q.max * 1e3, values.count)
}

private struct StartSamples {
    /// Job-observed: the job's first clock read minus WATCHKEEPER_SCHEDULED_AT (which has
    /// millisecond resolution), by task.
    var job: [String: [Double]] = [:]
    /// The daemon's run records: started (at the spawn) minus scheduled, in µs, by task.
    var daemon: [String: [Double]] = [:]
    var cpuSeconds = 0.0
    var wallSeconds = 0.0
    var status = ""
    var metrics = ""
}

/// Starts a daemon on `config`, waits for `fires` runs of each task after `skip` warm-up
/// fires, and collects both views of each start; the status and metrics as the CLI gives them.
private func collectStarts(config: @escaping (String) -> String, tasks: [String], fires: Int, skip: Int) throws -> StartSamples {
    let daemon = try BenchDaemon(binary: releaseBinary(), config: config)
    defer { daemon.stop() }
    let cpuBefore = daemon.cpuSeconds
    let started = now()
    var samples = StartSamples()
    let deadline = Date().addingTimeInterval(Double(fires + skip) + 20)
    while Date() < deadline {
        sleep(1)
        let lines = ((try? String(contentsOfFile: daemon.directory + "/starts", encoding: .utf8)) ?? "").split(separator: "\n")
        var byTask: [String: [Double]] = [:]
        for line in lines {
            let parts = line.split(separator: " ")
            guard parts.count == 3, let nanoseconds = Double(parts[2]) else { continue }
            byTask[String(parts[0]), default: []].append(nanoseconds / 1e9)
        }
        if tasks.allSatisfy({ (byTask[$0]?.count ?? 0) >= fires + skip }) {
            for task in tasks { samples.job[task] = Array(byTask[task]!.dropFirst(skip).prefix(fires)) }
            break
        }
    }
    samples.cpuSeconds = daemon.cpuSeconds - cpuBefore
    samples.wallSeconds = Double(now() - started) / 1e9
    guard samples.job.count == tasks.count else { throw BenchFailure(description: "fewer than \(fires + skip) runs of \(tasks) in time; see \(daemon.stderrPath)") }
    samples.status = cli(["status", "--json", "--socket", daemon.directory + "/run/control.sock"])
    samples.metrics = cli(["metrics", "--socket", daemon.directory + "/run/control.sock"])
    let records = (try? String(contentsOfFile: daemon.stderrPath, encoding: .utf8)) ?? ""
    for line in records.split(separator: "\n") {
        guard let lateness = line.range(of: "lateness_ms="), let taskField = line.range(of: "(task=") else { continue }
        let task = String(line[taskField.upperBound...].prefix { $0 != "," && $0 != ")" })
        guard let value = Double(line[lateness.upperBound...].prefix { $0.isNumber || $0 == "-" || $0 == "." }) else { continue }
        samples.daemon[task, default: []].append(value / 1e3)
    }
    for task in tasks { samples.daemon[task] = Array((samples.daemon[task] ?? []).dropFirst(skip).prefix(fires)) }
    return samples
}

private func metricLine(_ text: String, _ prefix: String) -> String {
    text.split(separator: "\n").first { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)).trimmingCharacters(in: .whitespaces) } ?? "-"
}

private struct IdleFigures {
    var resident: [Double] = []
    var anonymous: [Double] = []
    var cpu = 0.0
    var seconds = 0.0
}

// MARK: the benchmark

/// `WATCHKEEPER_BENCH_FLEET_PARTS`: `latency` (issue 25's figures below), `throughput`
/// (issue 35's shared inbox, FleetThroughputBenchmark.swift), or both (the default).
func runFleetBenchmark() {
    let parts = (ProcessInfo.processInfo.environment["WATCHKEEPER_BENCH_FLEET_PARTS"] ?? "latency,throughput").split(separator: ",")
    if parts.contains("latency") { runFleetLatencyBenchmark() }
    if parts.contains("throughput") { runFleetThroughputBenchmark() }
}

private func runFleetLatencyBenchmark() {
    let environment = ProcessInfo.processInfo.environment
    let fires = Int(environment["WATCHKEEPER_BENCH_FLEET_FIRES"] ?? "") ?? 60
    let idle = Int(environment["WATCHKEEPER_BENCH_IDLE_S"] ?? "") ?? 30
    let runs = Int(environment["WATCHKEEPER_BENCH_RUNS"] ?? "") ?? 3
    let calls = Int(environment["WATCHKEEPER_BENCH_FLEET_CALLS"] ?? "") ?? 50
    let baseline = environment["WATCHKEEPER_BENCH_BASELINE"]
    let skip = 3
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/etcd") else {
        print("fleet: skipped: no /usr/bin/etcd (apt-get install etcd-server)")
        return
    }
    var template = Array("/tmp/wk-bench-fleet-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { return print("fleet: failed: mkdtemp") }
    let scratch = String(cString: made)
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    let stamp: String
    do { stamp = try buildStamp(in: scratch) } catch { return print("fleet: failed: \(error)") }
    print("fleet: \(releaseBinary()); \(fires) fires per task after \(skip) warm-up fires; a job is \(stamp) (C: clock_gettime, then one line appended)")
    print("  start latency: (job) the job's first clock read minus WATCHKEEPER_SCHEDULED_AT (ms resolution: a local task's")
    print("  instant is truncated by 0-1 ms, a fleet task's whole-second instant is exact); (daemon) its run record's")
    print("  lateness_ms: spawn minus the scheduled instant, µs resolution. The job view of a local task carries ~0.5 ms of that")
    print("  truncation on average, so its difference of medians understates the claim; the daemon view's does not")

    // (a): no [cluster]; the same whichever etcd runs.
    let local = FleetConfig(stamp: stamp, endpoint: nil)
    let localStarts: StartSamples
    do {
        localStarts = try collectStarts(config: { local.text(directory: $0, every: "1s", member: 0) }, tasks: ["local-tick"], fires: fires, skip: skip)
    } catch {
        return print("fleet: failed: configuration (a): \(error)")
    }

    for onTmpfs in [false, true] {
        let etcd: BenchEtcd
        do { etcd = try BenchEtcd(onTmpfs: onTmpfs) } catch { print("fleet: failed: \(error)"); continue }
        defer { etcd.stop() }
        print("\nfleet: etcd 3.4 (single member, pid \(etcd.pid)) at \(etcd.endpoint), data dir \(etcd.storage)")
        let bench: BenchEtcdClient
        do { bench = try BenchEtcdClient(endpoint: etcd.endpoint) } catch { print("fleet: failed: \(error)"); continue }
        defer { bench.close() }
        guard let lease = bench.waitForLease(seconds: 15) else {
            print("fleet: failed: etcd granted no lease in 15 s (\(etcd.directory)/etcd.log)")
            continue
        }
        let callLatencies = measureCalls(bench, lease: lease, count: calls)
        let withCluster = FleetConfig(stamp: stamp, endpoint: etcd.endpoint)
        let fleetStarts: StartSamples
        do {
            fleetStarts = try collectStarts(config: { withCluster.text(directory: $0, every: "1s", member: 0) },
                                            tasks: ["local-tick", "fleet-tick"], fires: fires, skip: skip)
        } catch {
            print("fleet: failed: configuration (b): \(error)")
            continue
        }

        printStartFigures(callLatencies, calls: calls, local: localStarts, fleet: fleetStarts)

        guard !onTmpfs else { continue }
        // Idle: every variant at once.
        var variants: [(name: String, binary: String, config: (String) -> String)] = []
        for every in ["1h", "1s"] {
            if let baseline { variants.append(("baseline, (a), every = \(every)", baseline, { local.text(directory: $0, every: every, member: 0) })) }
            variants.append(("this binary, (a), every = \(every)", releaseBinary(), { local.text(directory: $0, every: every, member: 0) }))
            variants.append(("this binary, (b), every = \(every)", releaseBinary(), { withCluster.text(directory: $0, every: every, member: every == "1h" ? 1 : 2) }))
        }
        measureIdle(variants, runs: runs, idle: idle)
        print("  (b) with an https endpoint (libssl loaded) is not measured here")
    }
}

/// The etcd calls' latencies and the start latencies of (a) and (b), with the daemon's own
/// figures and its CPU while firing.
private func printStartFigures(_ callLatencies: CallLatencies, calls: Int, local localStarts: StartSamples, fleet fleetStarts: StartSamples) {
    print("  etcd calls through EtcdClient, one at a time (\(calls) of each\(callLatencies.failures > 0 ? ", \(callLatencies.failures) failed" : "")) |     p50 |     p90 |     max |    n")
    print(msRow("range (linearizable read, no WAL write)", callLatencies.range))
    print(msRow("lease keepalive (leader in memory, no WAL write)", callLatencies.keepalive))
    print(msRow("txn: create 2 keys with the lease (a claim; fsync)", callLatencies.txn))
    print("  start latency (ms)                                   |     p50 |     p90 |     max |    n")
    print(msRow("(a) local task, no [cluster]: job", localStarts.job["local-tick"] ?? []))
    print(msRow("(a) local task, no [cluster]: daemon", localStarts.daemon["local-tick"] ?? []))
    print(msRow("(b) local task beside [cluster]: job", fleetStarts.job["local-tick"] ?? []))
    print(msRow("(b) local task beside [cluster]: daemon", fleetStarts.daemon["local-tick"] ?? []))
    print(msRow("(b) fleet = \"one\" task: job", fleetStarts.job["fleet-tick"] ?? []))
    print(msRow("(b) fleet = \"one\" task: daemon", fleetStarts.daemon["fleet-tick"] ?? []))
    func p50(_ values: [Double]?) -> Double { quantiles(values ?? [])?.p50 ?? .nan }
    print(String(format: "  the claim adds (p50 fleet - p50 local): job %.2f ms vs (a), %.2f ms vs (b)'s local task; daemon %.2f ms vs (a), %.2f ms vs (b)",
                 (p50(fleetStarts.job["fleet-tick"]) - p50(localStarts.job["local-tick"])) * 1e3,
                 (p50(fleetStarts.job["fleet-tick"]) - p50(fleetStarts.job["local-tick"])) * 1e3,
                 (p50(fleetStarts.daemon["fleet-tick"]) - p50(localStarts.daemon["local-tick"])) * 1e3,
                 (p50(fleetStarts.daemon["fleet-tick"]) - p50(fleetStarts.daemon["local-tick"])) * 1e3))
    print("  the daemon's own figures (watchkeeper status --json, cluster): claim_latency_p50_ms \(jsonValue(fleetStarts.status, "claim_latency_p50_ms")), "
          + "call_latency_p50_ms \(jsonValue(fleetStarts.status, "call_latency_p50_ms")), calls_answered \(jsonValue(fleetStarts.status, "calls_answered")), "
          + "lease_state \(jsonValue(fleetStarts.status, "lease_state"))")
    print("  watchkeeper metrics: etcd call latency p50 \(metricLine(fleetStarts.metrics, "watchkeeper_etcd_call_latency_seconds{quantile=\"0.5\"}")) s, "
          + "p99 \(metricLine(fleetStarts.metrics, "watchkeeper_etcd_call_latency_seconds{quantile=\"0.99\"}")) s")
    print(String(format: "  daemon CPU while firing every second: (a) %.2f %% of a core (%.2f ms a fire), (b) %.2f %% (%.2f ms a second: two jobs, a claim, the records)",
                 localStarts.cpuSeconds / localStarts.wallSeconds * 100, localStarts.cpuSeconds / localStarts.wallSeconds * 1e3,
                 fleetStarts.cpuSeconds / fleetStarts.wallSeconds * 100, fleetStarts.cpuSeconds / fleetStarts.wallSeconds * 1e3))
}

/// WATCHKEEPER_BENCH_RUNS rounds of every variant at once: 5 s to settle plus
/// WATCHKEEPER_BENCH_IDLE_S, RSS at the end (medians), CPU over the window (summed).
private func measureIdle(_ variants: [(name: String, binary: String, config: (String) -> String)], runs: Int, idle: Int) {
    print("\n  idle: \(runs) round(s), the \(variants.count) daemons started together, 5 s to settle, then \(idle) s: RSS at its end, CPU over it")
    var figures = Array(repeating: IdleFigures(), count: variants.count)
    for _ in 0..<runs {
        do {
            let daemons = try variants.map { try BenchDaemon(binary: $0.binary, config: $0.config) }
            defer { daemons.forEach { $0.stop() } }
            sleep(5)
            let before = daemons.map(\.cpuSeconds)
            let started = now()
            sleep(UInt32(idle))
            let seconds = Double(now() - started) / 1e9
            for (index, daemon) in daemons.enumerated() {
                figures[index].cpu += daemon.cpuSeconds - before[index]
                figures[index].seconds += seconds
                figures[index].resident.append(daemon.residentMiB)
                figures[index].anonymous.append(daemon.anonymousMiB)
            }
        } catch {
            print("fleet: failed: idle: \(error)")
            break
        }
    }
    func median(_ values: [Double]) -> Double { values.isEmpty ? .nan : values.sorted()[values.count / 2] }
    print("  variant                                  | VmRSS MiB | RssAnon MiB | CPU % of a core | VmRSS of each round")
    for (index, variant) in variants.enumerated() {
        let figure = figures[index]
        print("  \(variant.name.padding(toLength: 40, withPad: " ", startingAt: 0)) | "
              + String(format: "%9.2f | %11.2f | %15.3f | ", median(figure.resident), median(figure.anonymous), figure.seconds > 0 ? figure.cpu / figure.seconds * 100 : .nan)
              + figure.resident.map { String(format: "%.2f", $0) }.joined(separator: ", "))
    }
}
