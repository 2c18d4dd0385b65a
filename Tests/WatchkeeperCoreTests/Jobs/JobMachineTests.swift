import XCTest

@testable import WatchkeeperCore

/// The job state machine, table-driven over every phase and event. (finished, exited) is
/// a precondition failure by design and is not driven: it would stop the test process.
final class JobMachineTests: XCTestCase {
    private let term: Int32 = 15
    private let kill: Int32 = 9

    private func machine(_ phase: JobPhase, handler: Bool) -> JobMachine {
        var machine = JobMachine(hasExpireHandler: handler, stopSignal: term)
        switch phase {
        case .running: break
        case .expiring(let reason):
            _ = machine.handle(.expire(reason))
        case .stopping(let reason):
            _ = machine.handle(.expire(reason))
            if handler { _ = machine.handle(.expireHandlerEnded) }
        case .killing(let reason):
            _ = machine.handle(.expire(reason))
            if handler { _ = machine.handle(.expireHandlerEnded) }
            _ = machine.handle(.killGraceElapsed)
        case .finished:
            _ = machine.handle(.exited(.exited(0)))
        }
        precondition(machine.phase == phase, "could not reach \(phase)")
        return machine
    }

    private struct Row {
        let phase: JobPhase
        let handler: Bool
        let event: JobEvent
        let actions: [JobAction]
        let next: JobPhase
    }

    func testEveryPhaseAndEvent_givesTheActionsAndPhaseOfTheTable() {
        let budget = ExpiryReason.budget
        let rows: [Row] = [
            // running
            Row(phase: .running, handler: false, event: .warnPointReached, actions: [.logBudgetWarning], next: .running),
            Row(phase: .running, handler: true, event: .expire(budget), actions: [.logExpiring(budget), .runExpireHandler(budget)], next: .expiring(budget)),
            Row(phase: .running, handler: false, event: .expire(budget), actions: [.logExpiring(budget), .signalGroup(term), .startKillGrace], next: .stopping(budget)),
            Row(phase: .running, handler: false, event: .expireHandlerEnded, actions: [], next: .running),
            Row(phase: .running, handler: false, event: .killGraceElapsed, actions: [], next: .running),
            Row(phase: .running, handler: false, event: .exited(.exited(0)), actions: [.reapLeftovers(expired: false), .record(.ok, .exited(0), nil)], next: .finished),
            Row(phase: .running, handler: false, event: .exited(.exited(3)), actions: [.reapLeftovers(expired: false), .record(.failed, .exited(3), nil)], next: .finished),
            Row(phase: .running, handler: false, event: .exited(.signaled(kill, coreDumped: false)),
                actions: [.reapLeftovers(expired: false), .record(.failed, .signaled(kill, coreDumped: false), nil)], next: .finished),
            // expiring: the on_expire handler runs
            Row(phase: .expiring(budget), handler: true, event: .warnPointReached, actions: [], next: .expiring(budget)),
            Row(phase: .expiring(budget), handler: true, event: .expire(.shutdown), actions: [], next: .expiring(budget)),
            Row(phase: .expiring(budget), handler: true, event: .expireHandlerEnded, actions: [.signalGroup(term), .startKillGrace], next: .stopping(budget)),
            Row(phase: .expiring(budget), handler: true, event: .killGraceElapsed, actions: [], next: .expiring(budget)),
            Row(phase: .expiring(budget), handler: true, event: .exited(.exited(0)),
                actions: [.reapLeftovers(expired: true), .record(.expired, .exited(0), budget)], next: .finished),
            // stopping: stop_signal sent
            Row(phase: .stopping(.shutdown), handler: false, event: .warnPointReached, actions: [], next: .stopping(.shutdown)),
            Row(phase: .stopping(.shutdown), handler: false, event: .expire(budget), actions: [], next: .stopping(.shutdown)),
            Row(phase: .stopping(.shutdown), handler: false, event: .expireHandlerEnded, actions: [], next: .stopping(.shutdown)),
            Row(phase: .stopping(.shutdown), handler: false, event: .killGraceElapsed, actions: [.signalGroup(kill)], next: .killing(.shutdown)),
            Row(phase: .stopping(.shutdown), handler: false, event: .exited(.exited(0)),
                actions: [.reapLeftovers(expired: true), .record(.expired, .exited(0), .shutdown)], next: .finished),
            // killing: SIGKILL sent
            Row(phase: .killing(.replaced), handler: false, event: .warnPointReached, actions: [], next: .killing(.replaced)),
            Row(phase: .killing(.replaced), handler: false, event: .expire(budget), actions: [], next: .killing(.replaced)),
            Row(phase: .killing(.replaced), handler: false, event: .expireHandlerEnded, actions: [], next: .killing(.replaced)),
            Row(phase: .killing(.replaced), handler: false, event: .killGraceElapsed, actions: [], next: .killing(.replaced)),
            Row(phase: .killing(.replaced), handler: false, event: .exited(.signaled(kill, coreDumped: false)),
                actions: [.reapLeftovers(expired: true), .record(.expired, .signaled(kill, coreDumped: false), .replaced)], next: .finished),
            // finished: nothing but a second exit (a precondition) changes it
            Row(phase: .finished, handler: false, event: .warnPointReached, actions: [], next: .finished),
            Row(phase: .finished, handler: false, event: .expire(budget), actions: [], next: .finished),
            Row(phase: .finished, handler: false, event: .expireHandlerEnded, actions: [], next: .finished),
            Row(phase: .finished, handler: false, event: .killGraceElapsed, actions: [], next: .finished),
        ]
        for row in rows {
            var machine = machine(row.phase, handler: row.handler)
            XCTAssertEqual(machine.handle(row.event), row.actions, "\(row.phase) + \(row.event)")
            XCTAssertEqual(machine.phase, row.next, "\(row.phase) + \(row.event)")
        }
    }

    func testExpiryReason_isKeptThroughTheWholeSequence() {
        var machine = JobMachine(hasExpireHandler: true, stopSignal: term)
        XCTAssertNil(machine.expiryReason)
        _ = machine.handle(.expire(.replaced))
        _ = machine.handle(.expireHandlerEnded)
        _ = machine.handle(.killGraceElapsed)
        XCTAssertEqual(machine.expiryReason, .replaced)
    }
}
