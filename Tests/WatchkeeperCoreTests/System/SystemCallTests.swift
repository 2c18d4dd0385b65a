import Dispatch
import Foundation
// A ThreadSanitizer build (make sanitize) brings its own Mutex from WatchkeeperCore.
#if WATCHKEEPER_TSAN
import struct Synchronization.Atomic
#else
import Synchronization
#endif
import SystemPackage
import XCTest

@testable import WatchkeeperCore

/// Counted by the signal handler below; a global because a C signal handler captures nothing.
private let interruptionsHandled = Atomic<Int>(0)

/// What the reader thread of the EINTR tests saw, shared with the test's thread.
private final class ReaderState: Sendable {
    let attempts = Atomic<Int>(0)
    let thread = Mutex<pthread_t?>(nil)
    let result = Mutex<Result<Int, Errno>?>(nil)
}

/// EINTR is produced for real: a thread blocked in read(2) on an empty pipe gets a signal
/// whose handler was installed without SA_RESTART, so the kernel fails the read with
/// EINTR instead of restarting it.
final class SystemCallTests: XCTestCase {
    private static let signal = SIGURG

    private var previousAction = sigaction()

    override func setUp() {
        super.setUp()
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in interruptionsHandled.add(1, ordering: .relaxed) }
        action.sa_flags = 0
        sigemptyset(&action.sa_mask)
        XCTAssertEqual(sigaction(Self.signal, &action, &previousAction), 0)
    }

    override func tearDown() {
        sigaction(Self.signal, &previousAction, nil)
        super.tearDown()
    }

    /// Starts a thread that reads one byte from `fd` through `valueOrErrno`.
    private func startReader(fd: Int32, retryOnInterrupt: Bool, state: ReaderState, done: DispatchSemaphore) {
        let thread = Thread {
            var unblocked = sigset_t()
            sigemptyset(&unblocked)
            sigaddset(&unblocked, Self.signal)
            pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
            state.thread.withLock { $0 = pthread_self() }
            var byte: UInt8 = 0
            let result = valueOrErrno(retryOnInterrupt: retryOnInterrupt) { () -> Int in
                state.attempts.add(1, ordering: .sequentiallyConsistent)
                return read(fd, &byte, 1)
            }
            state.result.withLock { $0 = result }
            done.signal()
        }
        thread.start()
    }

    /// Signals the reader until `until` holds. The signal is sent again every few
    /// milliseconds because one that lands before the thread blocks in read interrupts
    /// nothing; the wait between sends is on `done`, so a reader that finishes early ends
    /// it at once.
    private func interruptReader(_ state: ReaderState, done: DispatchSemaphore, until: () -> Bool) -> Bool {
        let deadline = MonotonicInstant.now + .seconds(10)
        while !until() {
            guard MonotonicInstant.now < deadline else { return false }
            if let thread = state.thread.withLock({ $0 }) { pthread_kill(thread, Self.signal) }
            if done.wait(timeout: .now() + .milliseconds(5)) == .success {
                done.signal()
            }
        }
        return true
    }

    func testValueOrErrno_retriesARealEINTR_andReturnsTheReadsValue() throws {
        let pipe = try OwnedPipe()
        let state = ReaderState()
        let done = DispatchSemaphore(value: 0)
        startReader(fd: pipe.readEnd.rawValue, retryOnInterrupt: true, state: state, done: done)

        let interrupted = interruptReader(state, done: done) { state.attempts.load(ordering: .sequentiallyConsistent) >= 2 }
        var byte: UInt8 = 42
        XCTAssertEqual(write(pipe.writeEnd.rawValue, &byte, 1), 1)
        XCTAssertEqual(done.wait(timeout: .now() + .seconds(10)), .success, "the reader never finished")

        XCTAssertTrue(interrupted, "the read was never interrupted and retried")
        XCTAssertGreaterThan(interruptionsHandled.load(ordering: .relaxed), 0)
        XCTAssertEqual(state.result.withLock { $0 }, .success(1))
    }

    func testValueOrErrno_withoutRetry_returnsInterruptedAfterOneAttempt() throws {
        let pipe = try OwnedPipe()
        let state = ReaderState()
        let done = DispatchSemaphore(value: 0)
        startReader(fd: pipe.readEnd.rawValue, retryOnInterrupt: false, state: state, done: done)

        let finished = interruptReader(state, done: done) { state.result.withLock { $0 } != nil }
        if !finished {
            // Free the thread before failing, so it does not outlive the pipe.
            var byte: UInt8 = 0
            XCTAssertEqual(write(pipe.writeEnd.rawValue, &byte, 1), 1)
            XCTAssertEqual(done.wait(timeout: .now() + .seconds(10)), .success)
        }

        XCTAssertTrue(finished, "the read was never interrupted")
        XCTAssertEqual(state.result.withLock { $0 }, .failure(.interrupted))
        XCTAssertEqual(state.attempts.load(ordering: .sequentiallyConsistent), 1)
    }

    func testValueOrErrno_returnsTheErrnoTheCallSet() throws {
        let pipe = try OwnedPipe(nonBlocking: true)
        var byte: UInt8 = 0
        let fd = pipe.readEnd.rawValue
        XCTAssertEqual(valueOrErrno { read(fd, &byte, 1) }, .failure(.resourceTemporarilyUnavailable))
        XCTAssertEqual(valueOrErrno { write(fd, &byte, 1) }, .failure(.badFileDescriptor))
        XCTAssertThrowsError(try systemCall { read(fd, &byte, 1) }) { error in
            XCTAssertEqual(error as? Errno, .resourceTemporarilyUnavailable)
        }
    }

    func testErrnoUnable_saysWhatFailedOnWhatAndWhy_withTheCName() {
        XCTAssertEqual(Errno.noSpace.unable("watch /srv/in"), "unable to watch /srv/in: No space left on device (ENOSPC)")
        XCTAssertEqual(Errno.interrupted.symbolicName, "EINTR")
        XCTAssertEqual(Errno(rawValue: 9999).symbolicName, "errno 9999")
    }
}
