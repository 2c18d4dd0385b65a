import Dispatch
import Logging
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A queue's epoll with real pipes and sockets: every wait is for an event with a deadline;
/// counts are taken after the queue has run everything it had.
final class DescriptorPollerTests: XCTestCase {
    private let queue = SubsystemQueue(name: "test.poller.\(UUIDLess.next())")
    private lazy var sources = SourceRegistry()
    private lazy var poller = DescriptorPoller(queue: queue, sources: sources, logger: Logger(label: "test"), owner: "test", purpose: "test descriptors")

    /// Calls on the jobs queue, counted; `signal` when the first arrives.
    private final class Calls: @unchecked Sendable {
        var count = 0
        let first = DispatchSemaphore(value: 0)
        func called() {
            count += 1
            if count == 1 { first.signal() }
        }
    }

    private func isOpen(_ fd: Int32) -> Bool { fcntl(fd, F_GETFD) >= 0 }

    private func write(_ fd: Int32, _ text: String) {
        let count = text.utf8.count
        XCTAssertEqual(text.withCString { Glibc.write(fd, $0, count) }, count)
    }

    /// Lets the queue run whatever is ready now, a few times over.
    private func settle() {
        for _ in 0..<5 { queue.queue.sync {} }
    }

    func testReadablePipe_callsItsHandler_andCancelClosesBothEnds_thenSaysSo() throws {
        let calls = Calls()
        let closed = DispatchSemaphore(value: 0)
        let (entry, writer) = try queue.queue.sync { () throws -> (PolledDescriptor, Int32) in
            let pipe = try OwnedPipe.forJobOutput()
            // The daemon's copy of the write end, kept until cancel.
            let writer = pipe.writeEnd.rawValue
            let entry = poller.watch(pipe, owner: "test", target: "stdout", afterClose: { closed.signal() }, handler: { calls.called() })
            entry.activate()
            XCTAssertEqual(poller.count, 1)
            return (entry, writer)
        }
        let reader = entry.descriptor.rawValue
        write(writer, "x")
        XCTAssertEqual(calls.first.wait(timeout: .now() + 10), .success, "a readable pipe must call its handler")
        queue.queue.sync {
            var byte: UInt8 = 0
            XCTAssertEqual(read(reader, &byte, 1), 1)
            entry.cancel()
            XCTAssertEqual(poller.count, 0)
            XCTAssertTrue(entry.isCancelled)
        }
        XCTAssertEqual(closed.wait(timeout: .now()), .success, "cancel must close and report before it returns")
        XCTAssertFalse(isOpen(reader))
        XCTAssertFalse(isOpen(writer))
        queue.queue.sync { entry.cancel() }
    }

    /// A spawned child holds a copy of the daemon's fd table until its close_range, which
    /// may come after the spawn returned (nowait.c): the close of a cancelled descriptor is
    /// then not the last reference to its open file, and epoll keeps a registration until
    /// that one goes. The kernel's own list of the set (fdinfo's `tfd:` lines) must lose it
    /// at the cancel all the same, also with an event pending, and nothing is delivered
    /// after. The jobs' own poller, which left the removal to the close
    /// (`closeIsLastReference`) and failed here: the set still held both.
    func testCancel_takesTheDescriptorOutOfTheKernelsSet_whileACopyOfItLivesOn() throws {
        let calls = Calls()
        let poller = JobContext(queue: queue, sink: LogSink(target: .stderr, level: .critical, problemCapacity: 10), logger: Logger(label: "test"),
                                sources: sources, daemonEnvironment: [:]).poller
        func inKernelSet() throws -> Int {
            let epoll = try XCTUnwrap(queue.queue.sync { poller.epollDescriptor })
            let info = try String(contentsOfFile: "/proc/self/fdinfo/\(epoll)", encoding: .utf8)
            return info.split(separator: "\n").filter { $0.hasPrefix("tfd:") }.count
        }
        let (entries, writers, copies) = try queue.queue.sync { () throws -> ([PolledDescriptor], [Int32], [Int32]) in
            var entries: [PolledDescriptor] = [], writers: [Int32] = [], copies: [Int32] = []
            for index in 0..<3 {
                let pipe = try OwnedPipe.forJobOutput()
                writers.append(pipe.writeEnd.rawValue)
                // What a child still in its setup holds: another reference to the read end.
                copies.append(fcntl(pipe.readEnd.rawValue, F_DUPFD_CLOEXEC, 0))
                let entry = poller.watch(pipe, owner: "test", target: "pipe \(index)", afterClose: {}, handler: { calls.called() })
                entry.activate()
                entries.append(entry)
            }
            return (entries, writers, copies)
        }
        defer { copies.forEach { close($0) } }
        XCTAssertEqual(try inKernelSet(), 3)
        // Readable and unread when cancelled: a registration left behind would fire again and again.
        queue.queue.sync {
            write(writers[0], "x")
            write(writers[1], "y")
            entries[0].cancel()
            entries[1].cancel()
        }
        XCTAssertEqual(try inKernelSet(), 1, "a cancelled descriptor must be out of the kernel's set while a copy of it is open")
        settle()
        queue.queue.sync {
            XCTAssertEqual(calls.count, 0, "nothing may be delivered for a cancelled descriptor")
            XCTAssertEqual(poller.count, 1)
            entries[2].cancel()
        }
        XCTAssertEqual(try inKernelSet(), 0)
    }

    func testSuspendedDescriptor_getsNoEvents_andResumeDeliversWhatArrivedMeanwhile() throws {
        let calls = Calls()
        let (entry, writer) = try queue.queue.sync { () throws -> (PolledDescriptor, Int32) in
            let pipe = try OwnedPipe.forJobOutput()
            let writer = pipe.writeEnd.release().rawValue
            let entry = poller.watch(pipe.readEnd, owner: "test", target: "stdout") { calls.called() }
            entry.suspend()
            entry.activate()
            return (entry, writer)
        }
        write(writer, "waiting")
        settle()
        XCTAssertEqual(queue.queue.sync { calls.count }, 0, "a suspended descriptor must not call its handler")
        queue.queue.sync { entry.resume() }
        XCTAssertEqual(calls.first.wait(timeout: .now() + 10), .success, "resume must deliver the data that arrived while suspended")
        queue.queue.sync { entry.cancel() }
        close(writer)
    }

    func testHandlerCancellingAnotherReadyDescriptor_stopsItsEvent_evenWhenANewDescriptorTakesItsNumber() throws {
        let calls = Calls()
        let newcomerCalls = Calls()
        final class Pair: @unchecked Sendable {
            var entries: [PolledDescriptor] = []
            var writers: [Int32] = []
            var newcomer: PolledDescriptor?
            var newcomerWriter: Int32 = -1
            var reusedNumber = false
        }
        let pair = Pair()
        try queue.queue.sync {
            for index in 0..<2 {
                let pipe = try OwnedPipe.forJobOutput()
                pair.writers.append(pipe.writeEnd.release().rawValue)
                pair.entries.append(poller.watch(pipe.readEnd, owner: "test", target: "pipe \(index)") { [unowned self] in
                    calls.called()
                    var buffer = [UInt8](repeating: 0, count: 16)
                    _ = read(pair.entries[index].descriptor.rawValue, &buffer, buffer.count)
                    // Whichever runs first takes the other out and opens a pipe in its place.
                    let other = pair.entries[1 - index]
                    let number = other.descriptor.rawValue
                    other.cancel()
                    guard pair.newcomer == nil else { return }
                    let replacement: OwnedPipe
                    do {
                        replacement = try OwnedPipe.forJobOutput()
                    } catch {
                        return XCTFail("unable to make the replacement pipe: \(error)")
                    }
                    pair.newcomerWriter = replacement.writeEnd.release().rawValue
                    pair.reusedNumber = replacement.readEnd.rawValue == number
                    let newcomer = self.poller.watch(replacement.readEnd, owner: "test", target: "newcomer") { newcomerCalls.called() }
                    newcomer.activate()
                    pair.newcomer = newcomer
                })
            }
        }
        let writers = pair.writers
        // Both readable before the queue looks: one epoll_wait returns both.
        write(writers[0], "a")
        write(writers[1], "b")
        queue.queue.sync { for entry in pair.entries { entry.activate() } }
        XCTAssertEqual(calls.first.wait(timeout: .now() + 10), .success)
        settle()
        queue.queue.sync {
            XCTAssertEqual(calls.count, 1, "the cancelled descriptor's pending event must not be delivered")
            XCTAssertTrue(pair.reusedNumber, "the test wants the new pipe on the cancelled one's number")
            XCTAssertEqual(newcomerCalls.count, 0, "an event for the old descriptor must not reach the new one with its number")
            for entry in pair.entries { entry.cancel() }
            pair.newcomer?.cancel()
        }
        for writer in writers { close(writer) }
        close(pair.newcomerWriter)
    }

    func testHangUp_isDeliveredOnce_notInALoop() throws {
        let calls = Calls()
        let entry = try queue.queue.sync { () throws -> PolledDescriptor in
            let pipe = try OwnedPipe.forJobOutput()
            close(pipe.writeEnd.release().rawValue)
            let entry = poller.watch(pipe.readEnd, owner: "test", target: "hung up") { calls.called() }
            entry.activate()
            return entry
        }
        XCTAssertEqual(calls.first.wait(timeout: .now() + 10), .success, "a hang-up must reach the handler")
        settle()
        XCTAssertEqual(queue.queue.sync { calls.count }, 1, "a hang-up the owner leaves in place must pause the descriptor, not call it again and again")
        queue.queue.sync { entry.cancel() }
    }

    func testDescriptorEpollRefuses_isPolledByATimerInstead_andCancelStopsItAndClosesIt() throws {
        // epoll_ctl refuses a regular file (EPERM); poll() calls it readable at once.
        let fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let calls = Calls()
        let entry = queue.queue.sync { () -> PolledDescriptor in
            let entry = poller.watch(OwnedFileDescriptor(adopting: fd), owner: "test", target: "plain file") { calls.called() }
            entry.activate()
            XCTAssertEqual(poller.count, 0, "epoll must have refused it")
            return entry
        }
        XCTAssertEqual(calls.first.wait(timeout: .now() + 10), .success, "a descriptor epoll refuses must still reach its handler")
        XCTAssertEqual(sources.all.filter { $0.kind == .timer && $0.target.hasPrefix("plain file: poll every") }.count, 1,
                       "the polling timer must be listed with the sources")
        queue.queue.sync { entry.cancel() }
        let after = queue.queue.sync { calls.count }
        XCTAssertFalse(isOpen(fd))
        XCTAssertTrue(waitFor(10) { sources.all.filter { $0.target.hasPrefix("plain file: poll every") }.isEmpty },
                      "cancel must stop the polling timer")
        // The timer's cancel handler has run (it unlisted the timer): libdispatch calls no
        // event handler after that, so whatever the queue still holds is all there is.
        settle()
        XCTAssertEqual(queue.queue.sync { calls.count }, after, "no call after cancel")
    }

    /// A connected pair of non-blocking Unix stream sockets: (ours, the peer's).
    private static func socketPair() -> (Int32, Int32) {
        var ends: [Int32] = [-1, -1]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends), 0)
        return (ends[0], ends[1])
    }

    /// What libdispatch's epoll backend cannot take (issue 36): a socket whose peer goes
    /// away reports EPOLLHUP; here it is one event, told as such, and the owner's cancel
    /// closes the socket at once.
    func testSocketWhosePeerCloses_reportsAHangUpOnce_andCancelClosesItAtOnce() throws {
        final class Seen: @unchecked Sendable {
            var readiness: [PolledDescriptor.Readiness] = []
            let first = DispatchSemaphore(value: 0)
        }
        let seen = Seen()
        let (entry, peer) = queue.queue.sync { () -> (PolledDescriptor, Int32) in
            let (ours, peer) = Self.socketPair()
            let entry = poller.watch(OwnedFileDescriptor(adopting: ours), owner: "test", target: "client", interest: .readable) { readiness in
                seen.readiness.append(readiness)
                if seen.readiness.count == 1 { seen.first.signal() }
            }
            entry.activate()
            return (entry, peer)
        }
        close(peer)
        XCTAssertEqual(seen.first.wait(timeout: .now() + 10), .success, "the peer's close must reach the handler")
        settle()
        let socket = entry.descriptor.rawValue
        queue.queue.sync {
            XCTAssertEqual(seen.readiness.count, 1, "a hang-up the owner leaves in place must be told once")
            XCTAssertEqual(seen.readiness.first?.hangUp, true)
            XCTAssertEqual(seen.readiness.first?.readable, true, "the end of file is there to read")
            entry.cancel()
            XCTAssertEqual(poller.count, 0)
        }
        XCTAssertFalse(isOpen(socket), "cancel must close the socket before it returns")
    }

    func testWritableInterest_callsTheHandlerOnceTheSocketTakesMore_andNotWhileItIsFull() throws {
        final class Seen: @unchecked Sendable {
            var writable = 0
            let first = DispatchSemaphore(value: 0)
        }
        let seen = Seen()
        let (entry, peer) = queue.queue.sync { () -> (PolledDescriptor, Int32) in
            let (ours, peer) = Self.socketPair()
            let entry = poller.watch(OwnedFileDescriptor(adopting: ours), owner: "test", target: "client", interest: .readable) { readiness in
                guard readiness.writable else { return }
                seen.writable += 1
                seen.first.signal()
            }
            entry.activate()
            return (entry, peer)
        }
        let socket = entry.descriptor.rawValue
        let chunk = [UInt8](repeating: 1, count: 4_096)
        var filled = 0
        while chunk.withUnsafeBytes({ send(socket, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }) > 0 { filled += chunk.count }
        queue.queue.sync { entry.setInterest([.readable, .writable]) }
        settle()
        XCTAssertEqual(queue.queue.sync { seen.writable }, 0, "a full socket must not be called writable")
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var drained = 0
        while drained < filled {
            let count = recv(peer, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if count <= 0 { break }
            drained += count
        }
        XCTAssertEqual(seen.first.wait(timeout: .now() + 10), .success, "room in the socket must call the handler")
        queue.queue.sync { entry.setInterest(.readable) }
        let before = queue.queue.sync { seen.writable }
        settle()
        XCTAssertEqual(queue.queue.sync { seen.writable }, before, "without the interest, an empty socket must not be called writable")
        queue.queue.sync { entry.cancel() }
        close(peer)
    }

    /// The churn of a connect/close flood on one queue: thousands of sockets whose peers hang
    /// up, each cancelled by its own handler, with new ones taking the numbers just closed.
    func testThousandsOfPeersHangingUp_eachCancelledInItsHandler_leaveNothingBehind() throws {
        final class Count: @unchecked Sendable {
            var hangUps = 0
            let done = DispatchSemaphore(value: 0)
        }
        let count = Count()
        let rounds = 5_000
        let poller = self.poller
        final class Box: @unchecked Sendable { var entry: PolledDescriptor? }
        for _ in 0..<rounds {
            queue.queue.async {
                let (ours, peer) = Self.socketPair()
                let box = Box()
                box.entry = poller.watch(OwnedFileDescriptor(adopting: ours), owner: "test", target: "client", interest: .readable) { _ in
                    box.entry?.cancel()
                    box.entry = nil
                    count.hangUps += 1
                    if count.hangUps == rounds { count.done.signal() }
                }
                box.entry?.activate()
                close(peer)
            }
        }
        XCTAssertEqual(count.done.wait(timeout: .now() + 60), .success, "every hang-up must reach its handler")
        XCTAssertEqual(queue.queue.sync { poller.count }, 0)
    }
}
