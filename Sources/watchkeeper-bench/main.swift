// watchkeeper-bench: measurements behind our design choices (see docs/measurements/).
// Usage: watchkeeper-bench [NAME...]   (no NAME: run all; --help: list the names)

import Foundation

let benchmarks: [(name: String, summary: String, run: () -> Void)] = [
    ("sync", "synchronisation primitives for shared counters and small state (ns/op)", runSyncPrimitiveBenchmark),
    ("daemon", "the release daemon: exec to READY, SIGUSR1 to dump, SIGTERM to exit, idle RSS", runDaemonLifecycleBenchmark),
    ("tasks", "idle RSS with 100 tasks configured (WATCHKEEPER_BENCH_TASKS)", runManyTasksBenchmark),
    ("progress", "daemon CPU per update while a job floods its progress fd for 10 s", runProgressCostBenchmark),
    ("cron", "the next fire of rare and common cron expressions in Europe/Berlin (µs)", runCronBenchmark),
    ("timer", "start jitter of a 1 s task over 60 s (WATCHKEEPER_BENCH_TIMER_S)", runTimerJitterBenchmark),
    ("sources", "watching a job's descriptors: a dispatch source each vs one source on an epoll of our own (CPU µs per job)", runJobSourcesBenchmark),
    ("spawn", "job spawn cost: ProcessSpawner (fork/exec shim) vs posix_spawn, to exec and to reaped (µs)", runSpawnOverheadBenchmark),
    ("dump", "SIGUSR1 dump with 1,000 tasks and 10,000 watched directories: build time and to state.json", runDumpBenchmark),
    ("json", "the control socket's JSON reader vs JSONDecoder and JSONSerialization: µs per call, a hostile nesting", runJSONBenchmark),
    ("control", "control socket: Status latency with 200 tasks and 8 running jobs, RSS of serving it", runControlBenchmark),
    ("metrics", "idle RSS on the demo configuration with and without metrics_file (WATCHKEEPER_BENCH_BASELINE: a binary to compare)", runMetricsMemoryBenchmark),
    ("output", "a job's 1 GiB of output through the daemon: CPU per GiB, throughput, peak RSS (WATCHKEEPER_BENCH_OUTPUT_MIB, _READ_MIBS, _CASES=lines,flat)", runOutputBenchmark),
    ("poll", "polling 100,000 files in 1,000 directories every 10 s: CPU per pass, share of a core, write-to-job latency; locally, through sshfs, beside fswatch's poll monitor", runPollBenchmark),
    ("fanotify", "a tree of 1,000,000 directories on a tmpfs: watchkeeper with method = fanotify and inotify, fsnotifywait -r/-S, inotifywait -r: start to watching, RSS, kernel memory of the marks, close-to-job latency (WATCHKEEPER_BENCH_FANOTIFY_DIRS, _FILES, _CASES, _TIMEOUT_S)", runFanotifyBenchmark),
    ("fleet", "issue 25's fleet = \"one\" on a loopback etcd (data dir on disk and on /dev/shm): what a claim adds to a job's start, etcd call latency by kind, idle RSS and CPU with [cluster] and without; issue 35's shared-inbox throughput: three hosts vs one, a slow host beside two (WATCHKEEPER_BENCH_FLEET_FIRES, _IDLE_S, _RUNS, _BASELINE, _FLEET_PARTS=latency,throughput, _INBOX_FILES, _INBOX_ROUNDS)", runFleetBenchmark),
    ("watch", "watch rules vs a C inotify loop, inotifywait, incrond: event-to-job latency, 100k-file burst, idle 10k dirs; batch = \"stdin\" vs a watchman trigger", runWatchBenchmarks),
]

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.contains("--help") || arguments.contains("-h") {
    print("usage: watchkeeper-bench [NAME...]   (no NAME runs all)\n\nbenchmarks:")
    for b in benchmarks { print("  \(b.name)\t\(b.summary)") }
    exit(0)
}
for name in arguments where !benchmarks.contains(where: { $0.name == name }) {
    FileHandle.standardError.write(Data("watchkeeper-bench: unknown benchmark '\(name)' (try --help)\n".utf8))
    exit(2)
}
for b in benchmarks where arguments.isEmpty || arguments.contains(b.name) { b.run() }
