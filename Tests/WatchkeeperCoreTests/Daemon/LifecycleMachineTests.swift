import XCTest

@testable import WatchkeeperCore

/// Drives `LifecycleMachine` through every allowed transition and pins the actions.
/// The transitions that end in `preconditionFailure` are not driven: they would stop
/// the test process, which is their purpose.
final class LifecycleMachineTests: XCTestCase {
    private let sigterm: Int32 = 15
    private let sigint: Int32 = 2

    private func machine(in state: LifecycleState, file: StaticString = #filePath, line: UInt = #line) -> LifecycleMachine {
        var machine = LifecycleMachine()
        switch state {
        case .starting:
            break
        case .running:
            _ = machine.handle(.sourcesRegistered)
        case .draining(let signal):
            _ = machine.handle(.sourcesRegistered)
            _ = machine.handle(.terminationRequested(signal: signal))
        case .stopped:
            _ = machine.handle(.sourcesRegistered)
            _ = machine.handle(.terminationRequested(signal: sigterm))
            _ = machine.handle(.drainFinished)
        }
        XCTAssertEqual(machine.state, state, "setting up", file: file, line: line)
        return machine
    }

    private func isIgnore(_ actions: [LifecycleAction]) -> Bool {
        guard actions.count == 1, case .ignore(let reason) = actions[0] else { return false }
        return !reason.isEmpty
    }

    func testNewMachine_isStarting() {
        XCTAssertEqual(LifecycleMachine().state, .starting)
    }

    func testSourcesRegistered_whileStarting_announcesReadyAndRuns() {
        var machine = machine(in: .starting)
        XCTAssertEqual(machine.handle(.sourcesRegistered), [.announceReady])
        XCTAssertEqual(machine.state, .running)
    }

    func testReload_whileRunning_reloadsAndKeepsRunning() {
        var machine = machine(in: .running)
        XCTAssertEqual(machine.handle(.reloadRequested), [.reload])
        XCTAssertEqual(machine.state, .running)
        XCTAssertEqual(machine.handle(.reloadRequested), [.reload], "every HUP reloads")
        XCTAssertEqual(machine.state, .running)
    }

    func testReload_whileStarting_isIgnoredWithAReason() {
        var machine = machine(in: .starting)
        XCTAssertEqual(
            machine.handle(.reloadRequested),
            [.ignore(reason: "reload requested during start-up; the configuration was read moments ago")]
        )
        XCTAssertEqual(machine.state, .starting)
    }

    func testReload_whileDraining_isIgnoredWithAReason() {
        var machine = machine(in: .draining(signal: sigterm))
        XCTAssertEqual(machine.handle(.reloadRequested), [.ignore(reason: "reload requested while shutting down")])
        XCTAssertEqual(machine.state, .draining(signal: sigterm))
    }

    func testTermination_whileRunning_beginsTheDrainWithThatSignal() {
        var machine = machine(in: .running)
        XCTAssertEqual(machine.handle(.terminationRequested(signal: sigterm)), [.beginDrain(signal: sigterm)])
        XCTAssertEqual(machine.state, .draining(signal: sigterm))
    }

    func testInterrupt_whileRunning_beginsTheDrainWithSIGINT() {
        var machine = machine(in: .running)
        XCTAssertEqual(machine.handle(.terminationRequested(signal: sigint)), [.beginDrain(signal: sigint)])
        XCTAssertEqual(machine.state, .draining(signal: sigint))
    }

    func testTermination_whileStarting_beginsTheDrainWithoutAnnouncingReady() {
        var machine = machine(in: .starting)
        XCTAssertEqual(machine.handle(.terminationRequested(signal: sigterm)), [.beginDrain(signal: sigterm)])
        XCTAssertEqual(machine.state, .draining(signal: sigterm))
    }

    func testSecondTermination_whileDraining_expiresRunningWorkNow_andKeepsTheFirstSignal() {
        var machine = machine(in: .draining(signal: sigterm))
        XCTAssertEqual(machine.handle(.terminationRequested(signal: sigint)), [.expireRunningWorkNow])
        XCTAssertEqual(machine.state, .draining(signal: sigterm))
        XCTAssertEqual(machine.handle(.terminationRequested(signal: sigterm)), [.expireRunningWorkNow], "a third one too")
        XCTAssertEqual(machine.state, .draining(signal: sigterm))
    }

    func testDrainFinished_whileDraining_finishesStopping() {
        var machine = machine(in: .draining(signal: sigterm))
        XCTAssertEqual(machine.handle(.drainFinished), [.finishStopping])
        XCTAssertEqual(machine.state, .stopped)
    }

    func testAnyEvent_whenStopped_isIgnoredAndStaysStopped() {
        let events: [LifecycleEvent] = [
            .sourcesRegistered, .reloadRequested, .terminationRequested(signal: sigterm), .drainFinished,
        ]
        for event in events {
            var machine = machine(in: .stopped)
            XCTAssertEqual(machine.handle(event), [.ignore(reason: "already stopped")], "\(event)")
            XCTAssertEqual(machine.state, .stopped, "\(event)")
        }
    }

    func testFullLife_startRunReloadTermDrainStop_producesEachActionInTurn() {
        var machine = LifecycleMachine()
        var actions: [LifecycleAction] = []
        for event: LifecycleEvent in [
            .reloadRequested, .sourcesRegistered, .reloadRequested, .terminationRequested(signal: sigterm),
            .reloadRequested, .terminationRequested(signal: sigterm), .drainFinished, .terminationRequested(signal: sigint),
        ] {
            actions += machine.handle(event)
        }
        XCTAssertEqual(actions.count, 8)
        XCTAssertTrue(isIgnore([actions[0]]))
        XCTAssertEqual(Array(actions[1...3]), [.announceReady, .reload, .beginDrain(signal: sigterm)])
        XCTAssertTrue(isIgnore([actions[4]]))
        XCTAssertEqual(Array(actions[5...6]), [.expireRunningWorkNow, .finishStopping])
        XCTAssertTrue(isIgnore([actions[7]]))
        XCTAssertEqual(machine.state, .stopped)
    }
}
