// What watching a job's descriptors costs the daemon, apart from everything else a job
// does: each job has four (its pidfd, stdout, stderr and progress pipes), each now a
// dispatch read source. On Linux libdispatch registers and unregisters every source on
// its manager thread (event_epoll.c), so a job costs eight hand-offs to that thread and
// back. The alternative measured here: one read source on an epoll instance of our own,
// to which the jobs queue adds and removes descriptors with epoll_ctl, no hand-off.
//
// A "job" here: four pipes watched, a byte written to the first (its exit), and on that
// event all four unwatched and closed; eight jobs in flight, as max_jobs = 8. CPU is the
// whole process's (every thread), from getrusage; context switches likewise.

import CWatchkeeperSystem
import Foundation
import WatchkeeperCore
#if canImport(Glibc)
import Glibc
#endif

private let sourceBenchJobs = Int(ProcessInfo.processInfo.environment["WATCHKEEPER_BENCH_SOURCE_JOBS"] ?? "") ?? 20_000
private let descriptorsPerJob = 4
private let jobsInFlight = 8

private struct Usage {
    var cpuMicroseconds: Double
    var contextSwitches: Int

    static func now() -> Usage {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let cpu = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)
        return Usage(cpuMicroseconds: cpu, contextSwitches: usage.ru_nvcsw + usage.ru_nivcsw)
    }
}

/// The daemon's own job pipe: O_CLOEXEC, the read end non-blocking.
private func makePipe() -> (read: Int32, write: Int32) {
    do {
        let ends = try OwnedPipe.forJobOutput().releaseEnds()
        return (ends.readEnd, ends.writeEnd)
    } catch {
        fatalError("\(error)")
    }
}

/// Runs `jobs` jobs with `start`, eight at a time; `start` calls its argument when a job ended.
// @unchecked Sendable: every member is touched only on `queue` (`start` is set before `run`).
private final class JobChain: @unchecked Sendable {
    let queue = DispatchQueue(label: "jobs")
    private var toStart: Int
    private var running = 0
    private let finished = DispatchSemaphore(value: 0)
    var start: ((@escaping () -> Void) -> Void)!

    init(jobs: Int) { toStart = jobs }

    func run() {
        queue.async {
            for _ in 0..<jobsInFlight { self.next() }
        }
        finished.wait()
    }

    private func next() {
        guard toStart > 0 else {
            if running == 0 { finished.signal() }
            return
        }
        toStart -= 1
        running += 1
        start { [self] in
            running -= 1
            next()
        }
    }
}

/// Now: a dispatch read source per descriptor.
private func runWithDispatchSources(jobs: Int) {
    let chain = JobChain(jobs: jobs)
    let queue = chain.queue
    chain.start = { ended in
        let pipes = (0..<descriptorsPerJob).map { _ in makePipe() }
        let sources = pipes.map { pipe -> DispatchSourceRead in
            let source = DispatchSource.makeReadSource(fileDescriptor: pipe.read, queue: queue)
            source.setCancelHandler {
                close(pipe.read)
                close(pipe.write)
            }
            return source
        }
        // After cancel libdispatch drops the handler, and with it this cycle.
        sources[0].setEventHandler {
            var byte: UInt8 = 0
            _ = read(pipes[0].read, &byte, 1)
            for source in sources { source.cancel() }
            ended()
        }
        for source in sources { source.activate() }
        _ = write(pipes[0].write, "x", 1)
    }
    chain.run()
}

/// The alternative: one read source on an epoll instance; descriptors added and removed by hand.
private func runWithOneEpoll(jobs: Int) {
    let chain = JobChain(jobs: jobs)
    let epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
    guard epoll >= 0 else { fatalError("epoll_create1: \(String(cString: strerror(errno)))") }
    // @unchecked Sendable: touched only on the chain's queue.
    final class Handlers: @unchecked Sendable { var byDescriptor: [Int32: () -> Void] = [:] }
    let handlers = Handlers()
    let outer = DispatchSource.makeReadSource(fileDescriptor: epoll, queue: chain.queue)
    outer.setEventHandler {
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        while true {
            let count = epoll_wait(epoll, &events, Int32(events.count), 0)
            guard count > 0 else { break }
            for event in events[0..<Int(count)] { handlers.byDescriptor[event.data.fd]?() }
        }
    }
    outer.setCancelHandler { close(epoll) }
    outer.activate()
    chain.start = { ended in
        let pipes = (0..<descriptorsPerJob).map { _ in makePipe() }
        for pipe in pipes {
            var event = epoll_event()
            event.events = EPOLLIN.rawValue
            event.data.fd = pipe.read
            guard epoll_ctl(epoll, EPOLL_CTL_ADD, pipe.read, &event) == 0 else { fatalError("epoll_ctl: \(String(cString: strerror(errno)))") }
        }
        handlers.byDescriptor[pipes[0].read] = {
            var byte: UInt8 = 0
            _ = read(pipes[0].read, &byte, 1)
            for pipe in pipes {
                epoll_ctl(epoll, EPOLL_CTL_DEL, pipe.read, nil)
                handlers.byDescriptor[pipe.read] = nil
                close(pipe.read)
                close(pipe.write)
            }
            ended()
        }
        _ = write(pipes[0].write, "x", 1)
    }
    chain.run()
    outer.cancel()
}

func runJobSourcesBenchmark() {
    print("job descriptors: \(sourceBenchJobs) jobs, \(descriptorsPerJob) watched descriptors each, \(jobsInFlight) in flight; whole-process CPU (getrusage)")
    let ways: [(String, (Int) -> Void)] = [("a dispatch read source per descriptor", runWithDispatchSources),
                                          ("one read source on an epoll of our own", runWithOneEpoll)]
    // Warm both up, then alternate so machine noise hits both alike.
    for (_, run) in ways { run(500) }
    var totals = [(cpu: Double, switches: Int, wall: Double)](repeating: (0, 0, 0), count: ways.count)
    let rounds = 3
    for _ in 0..<rounds {
        for (index, way) in ways.enumerated() {
            let before = Usage.now()
            let began = DispatchTime.now().uptimeNanoseconds
            way.1(sourceBenchJobs)
            let wall = Double(DispatchTime.now().uptimeNanoseconds - began) / 1e3
            let after = Usage.now()
            totals[index].cpu += after.cpuMicroseconds - before.cpuMicroseconds
            totals[index].switches += after.contextSwitches - before.contextSwitches
            totals[index].wall += wall
        }
    }
    let jobs = Double(sourceBenchJobs * rounds)
    for (index, way) in ways.enumerated() {
        print(String(format: "  %-40@ CPU %6.1f µs per job, wall %6.1f µs per job, %5.2f context switches per job",
                     way.0 as NSString, totals[index].cpu / jobs, totals[index].wall / jobs, Double(totals[index].switches) / jobs))
    }
}
