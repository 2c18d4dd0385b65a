import Dispatch
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The kill after a finished job's leftovers had their kill_grace, and the drain's kill of
/// all of them, against stand-ins for the groups (the real ones: JobRunTests).
final class LingeringKillsTests: XCTestCase {
    /// A leftover group as the kills see it; touched only on the jobs queue.
    private final class Group: LeftoverProcesses {
        let pid: pid_t
        var groupHasMembers: Bool
        var signals: [Int32] = []
        var released = 0
        var containerDescription: String { "process group \(pid)" }

        init(pid: pid_t, members: Bool = true) {
            self.pid = pid
            self.groupHasMembers = members
        }

        func signalGroup(_ signal: Int32) -> Bool {
            signals.append(signal)
            return true
        }

        func releaseContainment() { released += 1 }
    }

    private let queue = SubsystemQueue(name: "test.lingering.\(UUIDLess.next())")
    private let key = JobKey(.task, "leaves")

    private func make() -> LingeringKills { LingeringKills(queue: queue, sources: SourceRegistry()) }

    func testAfterItsGrace_aGroupWithMembersGetsSIGKILL_isReleased_andTheOwnerIsTold() {
        let kills = make()
        let group = Group(pid: 4242)
        let killed = DispatchSemaphore(value: 0)
        queue.queue.sync { kills.linger(group, key: key, grace: .milliseconds(20)) { killed.signal() } }
        XCTAssertEqual(queue.queue.sync { kills.count }, 1)
        XCTAssertEqual(killed.wait(timeout: .now() + 10 * testDeadlineScale), .success, "the kill never came")
        queue.queue.sync {
            XCTAssertEqual(group.signals, [SIGKILL])
            XCTAssertEqual(group.released, 1)
            XCTAssertEqual(kills.count, 0)
        }
    }

    func testAGroupThatEmptiedOnItsOwn_getsNoSignal_butIsStillReleased() {
        let kills = make()
        let group = Group(pid: 4243, members: false)
        let killed = DispatchSemaphore(value: 0)
        queue.queue.sync { kills.linger(group, key: key, grace: .milliseconds(1)) { killed.signal() } }
        XCTAssertEqual(killed.wait(timeout: .now() + 10 * testDeadlineScale), .success)
        queue.queue.sync {
            XCTAssertEqual(group.signals, [])
            XCTAssertEqual(group.released, 1)
        }
    }

    func testTheDrainsLastResort_killsEveryGroupAtOnce_andNoTimerFiresLater() {
        let kills = make()
        let groups = [Group(pid: 10), Group(pid: 11), Group(pid: 12)]
        let told = DispatchSemaphore(value: 0)
        queue.queue.sync {
            for group in groups { kills.linger(group, key: key, grace: .milliseconds(50)) { told.signal() } }
            XCTAssertEqual(kills.count, 3)
            kills.killAll()
            XCTAssertEqual(kills.count, 0)
        }
        // Past every grace: the cancelled timers neither signal again nor tell the owner.
        XCTAssertEqual(told.wait(timeout: .now() + 0.3), .timedOut, "a kill after killAll told the owner")
        queue.queue.sync {
            for group in groups {
                XCTAssertEqual(group.signals, [SIGKILL], "pid \(group.pid)")
                XCTAssertEqual(group.released, 1, "pid \(group.pid)")
            }
        }
    }

    func testTheSamePidLingeringAgain_replacesItsEarlierKill() {
        let kills = make()
        let first = Group(pid: 77)
        let second = Group(pid: 77)
        let told = DispatchSemaphore(value: 0)
        queue.queue.sync {
            kills.linger(first, key: key, grace: .milliseconds(10)) { told.signal() }
            kills.linger(second, key: key, grace: .milliseconds(30)) { told.signal() }
            XCTAssertEqual(kills.count, 1)
        }
        XCTAssertEqual(told.wait(timeout: .now() + 10 * testDeadlineScale), .success)
        XCTAssertEqual(told.wait(timeout: .now() + 0.2), .timedOut, "the replaced kill told the owner too")
        queue.queue.sync {
            XCTAssertEqual(first.signals, [], "the replaced kill still fired")
            XCTAssertEqual(second.signals, [SIGKILL])
        }
    }
}
