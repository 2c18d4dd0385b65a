// Spawn overhead: ProcessSpawner's two ways (the shared-memory clone used for jobs without
// credentials, and fork for jobs with them) against posix_spawn.
//
// Each spawn starts /bin/true with stdout and stderr on fresh pipes, as the job runner
// will, then waits for the pidfd and reaps. Two numbers per spawn:
// - to exec: ProcessSpawner's `spawnToExecNanoseconds` (the wk_spawn call, which returns
//   once the child's execve succeeded); for posix_spawn, the posix_spawn call plus
//   pidfd_open (glibc's posix_spawn returns once the child exec'd: CLONE_VFORK).
// - to reaped: from creating the pipes to the exit status in hand and everything closed.
// The two methods alternate spawn by spawn so that machine noise hits both alike.
//
// fork copies the parent's page tables, so its cost grows with the parent's anonymous
// memory. The daemon idles at about 13 MiB RSS (docs/measurements/daemon.md); the rows
// "+12 MiB" first allocate and touch 12 MiB of heap, which is pessimistic since most of
// the daemon's RSS is file-backed (fork does not copy page tables of file mappings that
// have no private pages). "+96 MiB" shows the slope. Results: docs/measurements/spawn.md.

import Foundation
import WatchkeeperCore
#if canImport(Glibc)
import Glibc
#endif

private enum SpawnBench {
    static let spawnsPerRow = Int(ProcessInfo.processInfo.environment["WATCHKEEPER_BENCH_SPAWNS"] ?? "") ?? 2000
    static let warmUpSpawns = 50
    static let program = "/bin/true"
}

private struct SpawnFailure: Error, CustomStringConvertible {
    let description: String
}

private struct SpawnSample {
    var toExec: UInt64
    var toReaped: UInt64
}

private func nanosecondsNow() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
}

/// VmRSS and RssAnon in MiB: fork copies page tables for the anonymous part.
private func residentMiB() -> (total: Double, anonymous: Double) {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return (0, 0) }
    func field(_ name: String) -> Double {
        for line in status.split(separator: "\n") where line.hasPrefix(name + ":") {
            let kilobytes = line.dropFirst(name.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" }).first.flatMap { Double($0) } ?? 0
            return kilobytes / 1024
        }
        return 0
    }
    return (field("VmRSS"), field("RssAnon"))
}

private func waitAndReap(pid: pid_t, pidfd: Int32) throws -> ProcessExit {
    var entry = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
    while poll(&entry, 1, 10_000) < 0 && errno == EINTR {}
    guard let exit = reap(pid: pid, pidfd: pidfd) else {
        throw SpawnFailure(description: "unable to reap \(pid): not exited after 10 s")
    }
    return exit
}

private func spawnWithProcessSpawner(forceFork: Bool) throws -> SpawnSample {
    let start = nanosecondsNow()
    // The job's stdout and stderr as the engine makes them; all ends close on return.
    let output = try OwnedPipe.forJobOutput()
    let errorOutput = try OwnedPipe.forJobOutput()
    var request = SpawnRequest(
        arguments: [Array(SpawnBench.program.utf8)], environment: [],
        standardOutput: output.writeEnd.rawValue, standardError: errorOutput.writeEnd.rawValue
    )
    request.forceFork = forceFork
    let spawned = try ProcessSpawner.spawn(request)
    let exit = try waitAndReap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue)
    guard exit == .exited(0) else { throw SpawnFailure(description: "\(SpawnBench.program) \(exit)") }
    return SpawnSample(toExec: spawned.spawnToExecNanoseconds, toReaped: nanosecondsNow() &- start)
}

// posix_spawn_file_actions_addclosefrom_np (glibc 2.34) is declared under _GNU_SOURCE,
// which Swift's Glibc module is not built with.
// So is pidfd_open (glibc 2.36), and the variadic syscall(2) is not callable from Swift.
private let addCloseFrom: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32 = {
    guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else {
        return { _, _ in ENOSYS }
    }
    return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32).self)
}()

private let pidfdOpen: @convention(c) (pid_t, UInt32) -> Int32 = {
    guard let symbol = dlsym(nil, "pidfd_open") else {
        return { _, _ in errno = ENOSYS; return -1 }
    }
    return unsafeBitCast(symbol, to: (@convention(c) (pid_t, UInt32) -> Int32).self)
}()

// What the job runner would do without credentials: glibc's posix_spawn with a new
// session, an empty mask, default dispositions and every other fd closed.
private func spawnWithPosixSpawn() throws -> SpawnSample {
    let start = nanosecondsNow()
    let output = try OwnedPipe.forJobOutput()
    let errorOutput = try OwnedPipe.forJobOutput()

    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_adddup2(&actions, output.writeEnd.rawValue, 1)
    posix_spawn_file_actions_adddup2(&actions, errorOutput.writeEnd.rawValue, 2)
    guard addCloseFrom(&actions, 3) == 0 else {
        throw SpawnFailure(description: "unable to add a closefrom action: glibc older than 2.34?")
    }

    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var emptyMask = sigset_t()
    sigemptyset(&emptyMask)
    var allSignals = sigset_t()
    sigfillset(&allSignals)
    posix_spawnattr_setsigmask(&attributes, &emptyMask)
    posix_spawnattr_setsigdefault(&attributes, &allSignals)
    // POSIX_SPAWN_SETSID (0x80, glibc 2.26) is a GNU extension Swift's Glibc does not import.
    let setSession: Int16 = 0x80
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF) | setSession)

    let argv: [UnsafeMutablePointer<CChar>?] = [strdup(SpawnBench.program), nil]
    let envp: [UnsafeMutablePointer<CChar>?] = [nil]
    defer { free(argv[0]) }
    var pid: pid_t = 0
    let execStart = nanosecondsNow()
    let spawned = posix_spawn(&pid, SpawnBench.program, &actions, &attributes, argv, envp)
    let pidfd = spawned == 0 ? pidfdOpen(pid, 0) : -1
    let execEnd = nanosecondsNow()
    guard spawned == 0 else {
        throw SpawnFailure(description: "unable to posix_spawn \(SpawnBench.program): \(String(cString: strerror(spawned)))")
    }
    guard pidfd >= 0 else {
        let code = errno
        kill(pid, SIGKILL)
        waitpid(pid, nil, 0)
        throw SpawnFailure(description: "unable to pidfd_open \(pid): \(String(cString: strerror(code)))")
    }
    defer { close(pidfd) }
    let exit = try waitAndReap(pid: pid, pidfd: pidfd)
    guard exit == .exited(0) else { throw SpawnFailure(description: "\(SpawnBench.program) \(exit)") }
    return SpawnSample(toExec: execEnd &- execStart, toReaped: nanosecondsNow() &- start)
}

private func percentileMicroseconds(_ values: [UInt64], _ p: Double) -> Double {
    let sorted = values.sorted()
    let index = min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))
    return Double(sorted[index]) / 1e3
}

/// Allocates and writes `bytes` of heap so that fork has that many more private pages to
/// map; never freed (the rows after it include it too).
private func touchHeap(_ bytes: Int) {
    let memory = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: 4096)
    memory.initializeMemory(as: UInt8.self, repeating: 0xa5, count: bytes)
    heapBlocks.append(memory)
}

nonisolated(unsafe) private var heapBlocks: [UnsafeMutableRawPointer] = []

func runSpawnOverheadBenchmark() {
    let spawns = SpawnBench.spawnsPerRow
    print("spawn overhead: \(SpawnBench.program), \(spawns) spawns per method and row (alternating), stdout/stderr on pipes")
    func label(_ text: String, _ width: Int) -> String { text.padding(toLength: width, withPad: " ", startingAt: 0) }
    print("\(label("method", 30)) | \(label("heap", 8)) | RSS (anon) MiB | to exec p50 |     p99 |     max | to reaped p50 |     p99  (µs)")
    do {
        for (heap, extraBytes) in [("+0", 0), ("+12 MiB", 12 << 20), ("+96 MiB", 84 << 20)] {
            if extraBytes > 0 { touchHeap(extraBytes) }
            for _ in 0..<SpawnBench.warmUpSpawns {
                _ = try spawnWithProcessSpawner(forceFork: false)
                _ = try spawnWithProcessSpawner(forceFork: true)
                _ = try spawnWithPosixSpawn()
            }
            var shared: [SpawnSample] = []
            var forked: [SpawnSample] = []
            var posix: [SpawnSample] = []
            for _ in 0..<spawns {
                shared.append(try spawnWithProcessSpawner(forceFork: false))
                forked.append(try spawnWithProcessSpawner(forceFork: true))
                posix.append(try spawnWithPosixSpawn())
            }
            let resident = residentMiB()
            let rss = String(format: "%7.1f (%4.1f)", resident.total, resident.anonymous)
            for (name, samples) in [("ProcessSpawner (CLONE_VM)", shared), ("ProcessSpawner (fork, creds)", forked),
                                    ("posix_spawn (CLONE_VFORK)", posix)] {
                let toExec = samples.map(\.toExec)
                let toReaped = samples.map(\.toReaped)
                let cells = [
                    String(format: "%11.1f", percentileMicroseconds(toExec, 0.5)),
                    String(format: "%7.1f", percentileMicroseconds(toExec, 0.99)),
                    String(format: "%7.1f", Double(toExec.max() ?? 0) / 1e3),
                    String(format: "%13.1f", percentileMicroseconds(toReaped, 0.5)),
                    String(format: "%7.1f", percentileMicroseconds(toReaped, 0.99)),
                ]
                print("\(label(name, 30)) | \(label(heap, 8)) | \(rss) | \(cells.joined(separator: " | "))")
            }
        }
    } catch {
        print("spawn overhead: failed: \(error)")
        exit(1)
    }
}
