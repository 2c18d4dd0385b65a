// Issue 35's throughput of a shared inbox (docs/measurements/fleet.md): release daemons on
// one fleet = "one" watch rule, on one single-member etcd (data on /dev/shm: the claims'
// fsync out of the figure), a burst of files renamed into the inbox at once, each run by a
// 50 ms job. One host with max_jobs 4, three equal hosts with 4 each (want: at least 2.5
// times one host's rate), and a slow host, max_jobs 1, beside two with 4 (want: within 1.2
// times the ideal, the files' work spread over all 9 slots).

import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The job: sleeps its milliseconds, then appends "HOST NAME START_NS END_NS" (CLOCK_REALTIME)
/// to the log, one write.
private let workSource = #"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static long long ns(void) { struct timespec t; clock_gettime(CLOCK_REALTIME, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
int main(int argc, char **argv) {
    long long start = ns();
    if (argc < 5) return 2;
    usleep((useconds_t)atoi(argv[3]) * 1000);
    const char *name = strrchr(argv[4], '/');
    char line[512];
    int length = snprintf(line, sizeof line, "%s %s %lld %lld\n", argv[1], name ? name + 1 : argv[4], start, ns());
    int fd = open(argv[2], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, length) != length) return 4;
    return 0;
}
"""#

/// One burst's outcome.
private struct Burst {
    var seconds = 0.0
    var perHost: [String: Int] = [:]
    var runTwice = 0
    var missing = 0
}

private func realtimeNanoseconds() -> Int64 {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec)
}

/// Daemons with these `slots` (max_jobs each) as hosts of one fleet on `etcd`, watching one
/// inbox; `rounds` bursts of `files` files, each renamed in from a staging directory on the
/// same file system once the previous burst is done.
private final class InboxFleet {
    let directory: String
    let daemons: [BenchDaemon]
    let names: [String]
    private var round = 0

    init(etcd: BenchEtcd, work: String, slots: [Int], jobMilliseconds: Int) throws {
        var template = Array("/tmp/wk-bench-inbox-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw BenchFailure(description: "mkdtemp failed") }
        directory = String(cString: made)
        for sub in ["inbox", "staging"] { mkdir(directory + "/" + sub, 0o755) }
        let prefix = "/wk-bench-inbox/\(getpid())/\(UInt32.random(in: 0 ... .max))"
        names = slots.indices.map { "host\($0)" }
        var started: [BenchDaemon] = []
        do {
            for (index, maxJobs) in slots.enumerated() {
                let config = """
                    [daemon]
                    max_jobs = \(maxJobs)

                    [cluster]
                    etcd = ["\(etcd.endpoint)"]
                    name = "\(names[index])"
                    prefix = "\(prefix)"
                    lease_ttl = "10s"

                    [[watch]]
                    name = "inbox"
                    path = "\(directory)/inbox"
                    events = ["closed_write", "moved_in"]
                    fleet = "one"
                    command = ["\(work)", "\(names[index])", "\(directory)/done.log", "\(jobMilliseconds)", "{path}"]

                    """
                started.append(try BenchDaemon(binary: releaseBinary(), config: { _ in config }))
            }
        } catch {
            started.forEach { $0.stop() }
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
        daemons = started
        for daemon in daemons {
            let socket = daemon.directory + "/run/control.sock"
            let deadline = Date().addingTimeInterval(15)
            while jsonValue(cli(["status", "--json", "--socket", socket]), "lease_state") != "held" {
                guard Date() < deadline else {
                    stop()
                    throw BenchFailure(description: "no etcd lease within 15 s; see \(daemon.stderrPath)")
                }
                usleep(100_000)
            }
        }
    }

    func stop() {
        daemons.forEach { $0.stop() }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Renames `files` files in at once and waits until each has a job's end (at most
    /// `timeout` s); the time is from the first rename to the last job's end.
    func burst(files: Int, timeout: Double) -> Burst {
        round += 1
        let names = (0..<files).map { String(format: "r%d-%05d.dat", round, $0) }
        for name in names {
            FileManager.default.createFile(atPath: directory + "/staging/" + name, contents: Data("\(name)\n".utf8))
        }
        let began = realtimeNanoseconds()
        for name in names { rename(directory + "/staging/" + name, directory + "/inbox/" + name) }
        var burst = Burst()
        let deadline = Date().addingTimeInterval(timeout)
        var ends: [String: [(host: String, end: Int64)]] = [:]
        repeat {
            usleep(50_000)
            ends = [:]
            let log = (try? String(contentsOfFile: directory + "/done.log", encoding: .utf8)) ?? ""
            for line in log.split(separator: "\n") {
                let fields = line.split(separator: " ")
                guard fields.count == 4, fields[1].hasPrefix("r\(round)-"), let end = Int64(fields[3]) else { continue }
                ends[String(fields[1]), default: []].append((String(fields[0]), end))
            }
        } while ends.count < files && Date() < deadline
        burst.missing = files - ends.count
        burst.runTwice = ends.values.filter { $0.count > 1 }.count
        for runs in ends.values { burst.perHost[runs[0].host, default: 0] += 1 }
        let last = ends.values.flatMap { $0.map(\.end) }.max() ?? began
        burst.seconds = Double(last - began) / 1e9
        return burst
    }
}

private func median(_ values: [Double]) -> Double {
    values.isEmpty ? .nan : values.sorted()[values.count / 2]
}

/// Prints the three configurations' figures and whether each bound holds.
func runFleetThroughputBenchmark() {
    let environment = ProcessInfo.processInfo.environment
    let files = Int(environment["WATCHKEEPER_BENCH_INBOX_FILES"] ?? "") ?? 600
    let rounds = Int(environment["WATCHKEEPER_BENCH_INBOX_ROUNDS"] ?? "") ?? 3
    let jobMilliseconds = 50
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/etcd") else {
        return print("fleet inbox: skipped: no /usr/bin/etcd (apt-get install etcd-server)")
    }
    var template = Array("/tmp/wk-bench-work-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { return print("fleet inbox: failed: mkdtemp") }
    let scratch = String(cString: made)
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    let work: String
    let etcd: BenchEtcd
    do {
        work = try compileBenchProgram(workSource, named: "work", in: scratch)
        etcd = try BenchEtcd(onTmpfs: true)
    } catch {
        return print("fleet inbox: failed: \(error)")
    }
    defer { etcd.stop() }
    print("\nfleet inbox: \(releaseBinary()); \(rounds) burst(s) of \(files) files renamed into one fleet = \"one\" inbox, "
          + "a \(jobMilliseconds) ms job each (C: usleep, one line appended); etcd single member \(etcd.storage), pid \(etcd.pid)")
    print("  time: the first rename to the last job's end (CLOCK_REALTIME), median of the bursts; ideal: files × \(jobMilliseconds) ms / slots")
    print("  CPU: the daemons' own (utime + stime) over the bursts, per file, and as cores while bursts ran (the machine has \(ProcessInfo.processInfo.activeProcessorCount))")
    print("  hosts (max_jobs)   | time s | files/s | ideal s | time/ideal | files per host (each burst)             | run twice | never ran | CPU ms/file | cores")
    var medians: [String: Double] = [:]
    for (label, slots) in [("1 (4)", [4]), ("3 (4, 4, 4)", [4, 4, 4]), ("3 (4, 4, 1)", [4, 4, 1])] {
        let fleet: InboxFleet
        do {
            fleet = try InboxFleet(etcd: etcd, work: work, slots: slots, jobMilliseconds: jobMilliseconds)
        } catch {
            print("  \(label): failed: \(error)")
            continue
        }
        let timeout = Double(files * jobMilliseconds) / 1000 + 60
        let cpuBefore = fleet.daemons.map(\.cpuSeconds).reduce(0, +)
        let bursts = (0..<rounds).map { _ in fleet.burst(files: files, timeout: timeout) }
        let cpu = fleet.daemons.map(\.cpuSeconds).reduce(0, +) - cpuBefore
        fleet.stop()
        let time = median(bursts.map(\.seconds))
        let ideal = Double(files * jobMilliseconds) / 1000 / Double(slots.reduce(0, +))
        medians[label] = time
        let shares = bursts.map { burst in fleet.names.map { String(burst.perHost[$0] ?? 0) }.joined(separator: "/") }.joined(separator: ", ")
        print("  \(label.padding(toLength: 18, withPad: " ", startingAt: 0)) | " + String(format: "%6.2f | %7.0f | %7.2f | %10.2f | ", time, Double(files) / time, ideal, time / ideal)
              + shares.padding(toLength: 40, withPad: " ", startingAt: 0)
              + " | \(bursts.map(\.runTwice).reduce(0, +))" + " | \(bursts.map(\.missing).reduce(0, +))"
              + String(format: " | %.2f | %.2f", cpu * 1000 / Double(files * rounds), cpu / bursts.map(\.seconds).reduce(0, +)))
    }
    if let one = medians["1 (4)"], let three = medians["3 (4, 4, 4)"] {
        print(String(format: "  three equal hosts vs one: %.2fx the rate (bound: at least 2.5x): ", one / three) + (one / three >= 2.5 ? "holds" : "DOES NOT HOLD"))
    }
    if let slow = medians["3 (4, 4, 1)"] {
        let ratio = slow / (Double(files * jobMilliseconds) / 1000 / 9)
        print(String(format: "  a slow host (max_jobs 1) beside two with 4: %.2fx the ideal (bound: within 1.2x): ", ratio) + (ratio <= 1.2 ? "holds" : "DOES NOT HOLD"))
    }
}
