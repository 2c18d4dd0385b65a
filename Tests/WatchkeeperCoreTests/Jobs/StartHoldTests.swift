import Dispatch
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Starts held back while descriptors or processes are short, as a pure value.
final class StartHoldTests: XCTestCase {
    private let emfile = SpawnError(step: .pipe, errorNumber: EMFILE, description: "unable to create pipe: Too many open files")
    private let second: UInt64 = 1_000_000_000

    private func at(_ nanoseconds: UInt64) -> MonotonicInstant { MonotonicInstant(nanoseconds: nanoseconds) }

    func testAShortage_holdsStarts_untilAJobEndsOrTheDelayPasses_andWarnsOnce() {
        var hold = StartHold()
        XCTAssertTrue(hold.allowsStarts)
        XCTAssertEqual(hold.shortage(emfile, now: at(0)), [.warn(emfile, holdsBefore: 0), .retryAfter(.milliseconds(250))])
        XCTAssertFalse(hold.allowsStarts)
        hold.release()
        XCTAssertTrue(hold.allowsStarts, "a job ended: the next start is a probe")
        // The probe hits the limit again: no second warning, a longer delay.
        XCTAssertEqual(hold.shortage(emfile, now: at(1)), [.retryAfter(.milliseconds(500))])
        XCTAssertFalse(hold.allowsStarts)
        XCTAssertEqual(hold.totalPutBack, 2)
    }

    func testTheDelayDoubles_uptoFiveSeconds() {
        var hold = StartHold()
        var delays: [Duration] = []
        for tick in 0..<8 {
            for case .retryAfter(let delay) in hold.shortage(emfile, now: at(UInt64(tick))) { delays.append(delay) }
        }
        XCTAssertEqual(delays.map { $0.components.seconds * 1000 + $0.components.attoseconds / 1_000_000_000_000_000 },
                       [250, 500, 1000, 2000, 4000, 5000, 5000, 5000])
    }

    func testAShortHold_endsInSilence_aLongOneIsReported_withHowManyWentBack() {
        var hold = StartHold()
        _ = hold.shortage(emfile, now: at(0))
        hold.release()
        XCTAssertEqual(hold.started(now: at(second / 10)), [], "a tenth of a second: not worth a line")
        XCTAssertTrue(hold.allowsStarts)
        _ = hold.shortage(emfile, now: at(2 * second))
        _ = hold.shortage(emfile, now: at(3 * second))
        hold.release()
        XCTAssertEqual(hold.started(now: at(5 * second)), [.recovered(after: .seconds(3), putBack: 2)])
        XCTAssertEqual(hold.started(now: at(6 * second)), [], "already open")
    }

    func testHoldsWithinAMinute_shareOneWarning_countedInTheNext() {
        var hold = StartHold()
        for minuteTick in 0..<5 {
            let now = at(UInt64(minuteTick) * 10 * second)
            let actions = hold.shortage(emfile, now: now)
            XCTAssertEqual(actions.contains(.warn(emfile, holdsBefore: 0)), minuteTick == 0, "at \(minuteTick * 10) s")
            hold.release()
            _ = hold.started(now: now + .nanoseconds(1))
        }
        XCTAssertEqual(hold.shortage(emfile, now: at(61 * second)).first, .warn(emfile, holdsBefore: 4))
        XCTAssertEqual(hold.holds, 6)
    }

    func testOnlyDescriptorAndProcessShortages_count() {
        XCTAssertTrue(emfile.isResourceShortage)
        XCTAssertTrue(SpawnError(step: .pipe, errorNumber: ENFILE, description: "").isResourceShortage)
        XCTAssertTrue(SpawnError(step: .fork, errorNumber: EAGAIN, description: "").isResourceShortage)
        XCTAssertFalse(SpawnError(step: .execve, errorNumber: ENOENT, description: "").isResourceShortage)
        XCTAssertFalse(SpawnError(step: .execve, errorNumber: EAGAIN, description: "").isResourceShortage)
    }
}

/// The hold acting on the jobs queue: its warning, its retry timer, its dump fields.
final class HeldStartsTests: JobTestCase {
    private let emfile = SpawnError(step: .pipe, errorNumber: EMFILE, description: "unable to create pipe: Too many open files")

    func testAShortage_warnsWithTheWaitingJobs_andTriesAgainOnceTheDelayHasPassed() {
        let held = HeldStarts(queue: context.queue, sources: context.sources, logger: context.logger)
        let retried = DispatchSemaphore(value: 0)
        context.queue.queue.sync {
            held.shortage(emfile, waiting: 3) { retried.signal() }
            XCTAssertFalse(held.allowsStarts)
            XCTAssertEqual(held.describe().map(\.value), [.bool(true), .int(1), .int(1)])
        }
        XCTAssertEqual(retried.wait(timeout: .now() + 10 * testDeadlineScale), .success, "held starts were never tried again")
        context.queue.queue.sync {
            XCTAssertTrue(held.allowsStarts, "the delay passed: the next start is a probe")
            held.started()
            XCTAssertTrue(held.allowsStarts)
            XCTAssertEqual(held.describe().map(\.value), [.bool(false), .int(1), .int(1)])
        }
        let warnings = messages(at: .warning)
        XCTAssertEqual(warnings.count, 1, "\(warnings)")
        XCTAssertTrue(warnings.first?.contains("unable to start jobs: ") == true && warnings.first?.contains("3 waiting job(s) stay in line") == true,
                      "\(warnings)")
    }
}
