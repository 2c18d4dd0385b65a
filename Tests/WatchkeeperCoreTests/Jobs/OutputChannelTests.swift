import Dispatch
import Foundation
import Logging
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A job's output channel at the job's end, with the daemon's stderr a pipe the test fills
/// and reads: the close is a state on the jobs queue, never a wait on it.
final class OutputChannelTests: XCTestCase {
    private var stderrRead: Int32 = -1
    private var stderrWrite: Int32 = -1

    override func setUp() {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        (stderrRead, stderrWrite) = (fds[0], fds[1])
    }

    override func tearDown() {
        close(stderrRead)
        close(stderrWrite)
    }

    private func makeContext() -> JobContext {
        let sink = LogSink(target: .stderr, level: .critical, problemCapacity: 4, stderrStream: StderrStream(fd: stderrWrite))
        return JobContext(queue: SubsystemQueue(name: "test.output.\(UUIDLess.next())"), sink: sink, logger: Logger(label: "test"),
                          sources: SourceRegistry(), daemonEnvironment: [:])
    }

    /// The daemon's stderr full: its reader has stopped.
    private func fillStderr() {
        let flags = fcntl(stderrWrite, F_GETFL)
        XCTAssertEqual(fcntl(stderrWrite, F_SETFL, flags | O_NONBLOCK), 0)
        let page = [UInt8](repeating: UInt8(ascii: "\n"), count: 4_096)
        while page.withUnsafeBytes({ write(stderrWrite, $0.baseAddress, $0.count) }) > 0 {}
        XCTAssertEqual(fcntl(stderrWrite, F_SETFL, flags), 0)
    }

    /// A channel reading a pipe, and the pipe's other end as the job's stdout, which has
    /// written `lines` and exited.
    private func channelAfterJobWrote(_ lines: Int, context: JobContext) throws -> OutputChannel {
        let pipe = try OwnedPipe.forJobOutput()
        let jobEnd = dup(pipe.writeEnd.rawValue)
        XCTAssertGreaterThanOrEqual(jobEnd, 0)
        var handed: OwnedPipe? = consume pipe
        let channel = context.queue.queue.sync {
            OutputChannel(stream: "stdout", pipe: handed.take()!, name: "loud", kind: .task, runID: "r1", owner: "task loud run r1", pid: 42, context: context)
        }
        let text = (0..<lines).map { "line \($0)\n" }.joined()
        XCTAssertEqual(text.utf8.count, Array(text.utf8).withUnsafeBytes { write(jobEnd, $0.baseAddress, $0.count) })
        close(jobEnd)
        return channel
    }

    private func readAll(_ fd: Int32, until done: () -> Bool) -> String {
        var all: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let deadline = MonotonicInstant.now + .seconds(10 * testDeadlineScale)
        while MonotonicInstant.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 20) > 0 {
                let count = read(fd, &buffer, buffer.count)
                if count > 0 { all += buffer[0..<count] }
            } else if done() {
                break
            }
        }
        return String(decoding: all, as: UTF8.self)
    }

    func testClosingWhileTheSinkIsFull_returnsAtOnce_andCompletesOnceTheLinesAreOut() throws {
        let context = makeContext()
        fillStderr()
        let channel = try channelAfterJobWrote(200, context: context)
        let closed = DispatchSemaphore(value: 0)
        let started = MonotonicInstant.now
        context.queue.queue.sync { channel.close { closed.signal() } }
        XCTAssertLessThan(MonotonicInstant.now - started, .milliseconds(200), "close waited on the jobs queue for the sink")
        XCTAssertEqual(closed.wait(timeout: .now() + 0.3 * testDeadlineScale), .timedOut, "closed before its lines were out")
        XCTAssertTrue(context.queue.queue.sync { channel.isWaitingForSink })
        // Meanwhile the queue serves others at once.
        let turn = MonotonicInstant.now
        context.queue.queue.sync {}
        XCTAssertLessThan(MonotonicInstant.now - turn, .milliseconds(100))

        // The reader comes back: every line arrives, then the channel closes.
        var isClosed = false
        let text = readAll(stderrRead) {
            if closed.wait(timeout: .now()) == .success { isClosed = true }
            return isClosed
        }
        XCTAssertTrue(isClosed, "the channel never closed once its sink read again")
        for index in [0, 99, 199] { XCTAssertTrue(text.contains("loud[42] stdout: line \(index)\n"), "line \(index) lost") }
        XCTAssertEqual(context.queue.queue.sync { channel.isClosed }, true)
    }

    func testTheDrainsLastResort_dropsWhatStillWaits_andClosesAtOnce() throws {
        let context = makeContext()
        fillStderr()
        let channel = try channelAfterJobWrote(200, context: context)
        let closed = DispatchSemaphore(value: 0)
        context.queue.queue.sync { channel.close { closed.signal() } }
        XCTAssertEqual(closed.wait(timeout: .now() + 0.2 * testDeadlineScale), .timedOut, "closed before its lines were out")
        context.queue.queue.sync { channel.stopWaitingForSink() }
        XCTAssertEqual(closed.wait(timeout: .now() + 2 * testDeadlineScale), .success, "still waiting for a sink it was told to give up on")
        XCTAssertTrue(context.queue.queue.sync { channel.isClosed })
    }

    func testClosingWithTheSinkKeepingUp_completesInTheSameTurn() throws {
        let context = makeContext()
        let channel = try channelAfterJobWrote(50, context: context)
        var completed = false
        context.queue.queue.sync { channel.close { completed = true } }
        XCTAssertTrue(completed, "nothing waited, yet the close took another turn")
        let text = readAll(stderrRead) { true }
        XCTAssertTrue(text.contains("loud[42] stdout: line 49\n"), text)
    }

    /// A close that ends in its turn takes the pipe out of the jobs' epoll with one
    /// EPOLL_CTL_DEL before the close (a child still in its setup may hold a copy, so the
    /// close need not be the last reference: DescriptorPoller.remove). One that has to wait
    /// for the sink takes the pipe out at once, so no pass calls its handler meanwhile.
    func testClosingInOneTurn_takesThePipeOutOfTheEpollSet_andAWaitingCloseTakesItOutAtOnce() throws {
        let context = makeContext()
        let channel = try channelAfterJobWrote(50, context: context)
        context.queue.queue.sync {
            XCTAssertEqual(context.poller.count, 1)
            channel.close {}
            XCTAssertTrue(channel.isClosed)
            XCTAssertEqual(context.poller.count, 0)
            XCTAssertEqual(context.poller.deletions, 1, "the pipe leaves the set before its close, which may not be the last reference")
        }
        XCTAssertTrue(readAll(stderrRead) { true }.contains("loud[42] stdout: line 49\n"))

        fillStderr()
        let waiting = try channelAfterJobWrote(200, context: context)
        context.queue.queue.sync {
            waiting.close {}
            XCTAssertTrue(waiting.isWaitingForSink)
            XCTAssertEqual(context.poller.count, 0, "a close that waits must take its pipe out of the set")
            waiting.stopWaitingForSink()
        }
    }
}
