import XCTest

@testable import WatchkeeperCore

/// Who gets a connection slot, who makes room, and who goes at a bound, one row per rule:
/// ControlAdmission alone, without a socket (the socket's side: ControlSocketTests).
final class ControlAdmissionTests: XCTestCase {
    private let t0 = MonotonicInstant(nanoseconds: 1_000_000_000_000)

    private func at(_ seconds: Int) -> MonotonicInstant { t0 + .seconds(seconds) }

    /// A small server: 4 connections, the last one root's, 2 per uid, 100 bytes of replies.
    private var limits: ControlLimits {
        var limits = ControlLimits()
        limits.maxConnections = 4
        limits.reservedForRoot = 1
        limits.maxConnectionsPerUID = 2
        limits.maxPendingReplyBytes = 100
        limits.requestTimeout = .seconds(5)
        limits.writeTimeout = .seconds(10)
        limits.idleTimeout = .seconds(60)
        return limits
    }

    private func idle(_ id: UInt64, uid: UInt32, since: Int = 0) -> ControlAdmission.Client {
        .init(id: id, uid: uid, lastActivity: at(since))
    }

    private func busy(_ id: UInt64, uid: UInt32) -> ControlAdmission.Client {
        .init(id: id, uid: uid, isIdle: false, lastActivity: at(0))
    }

    private func halfSent(_ id: UInt64, uid: UInt32, since: Int) -> ControlAdmission.Client {
        .init(id: id, uid: uid, isIdle: false, lastActivity: at(since), partialSince: at(since))
    }

    private func notReading(_ id: UInt64, uid: UInt32, since: Int, bytes: Int = 10) -> ControlAdmission.Client {
        .init(id: id, uid: uid, isIdle: false, lastActivity: at(since), writeBlockedSince: at(since), pendingReplyBytes: bytes)
    }

    func testWhoGetsASlot_andWhoMakesRoom() {
        typealias Row = (name: String, uid: UInt32, open: [ControlAdmission.Client], expected: ControlAdmission.Decision)
        let rows: [Row] = [
            ("a free slot is taken", 1000, [], .admit),
            ("a uid's second connection is let in", 1000, [busy(1, uid: 1000)], .admit),
            ("a uid's third is refused at the per-uid limit", 1000, [busy(1, uid: 1000), busy(2, uid: 1000)], .refuse(.perUIDLimit)),
            ("the per-uid limit counts only that uid", 1001, [busy(1, uid: 1000), busy(2, uid: 1000)], .admit),
            ("root has no per-uid limit", 0, [busy(1, uid: 0), busy(2, uid: 0)], .admit),
            ("the slot kept for root is not another uid's: the idle one makes room", 1003,
             [busy(1, uid: 1000), idle(2, uid: 1001, since: 5), busy(3, uid: 1002)], .admitEvicting(id: 2, .idle)),
            ("with nobody to make room, another uid is refused before root's slot", 1003,
             [busy(1, uid: 1000), busy(2, uid: 1001), busy(3, uid: 1002)], .refuse(.connectionLimit)),
            ("root takes its own slot while the others are full and busy", 0,
             [busy(1, uid: 1000), busy(2, uid: 1001), busy(3, uid: 1002)], .admit),
            ("the one idle longest makes room", 1003,
             [idle(1, uid: 1000, since: 9), idle(2, uid: 1001, since: 3), busy(3, uid: 1002)], .admitEvicting(id: 2, .idle)),
            ("idle ties go to the oldest connection", 1003,
             [idle(4, uid: 1000, since: 3), idle(2, uid: 1001, since: 3), busy(3, uid: 1002)], .admitEvicting(id: 2, .idle)),
            ("idle goes before half-sent", 1003,
             [halfSent(1, uid: 1000, since: 1), idle(2, uid: 1001, since: 8), busy(3, uid: 1002)], .admitEvicting(id: 2, .idle)),
            ("with none idle, the call half-sent longest makes room", 1003,
             [halfSent(1, uid: 1000, since: 4), halfSent(2, uid: 1001, since: 2), notReading(3, uid: 1002, since: 0)],
             .admitEvicting(id: 2, .halfSent)),
            ("with none idle or half-sent, the reply not read longest", 1003,
             [busy(1, uid: 1000), notReading(2, uid: 1001, since: 7), notReading(3, uid: 1002, since: 3)],
             .admitEvicting(id: 3, .replyNotRead)),
            ("root's own connections make no room for another uid", 1003,
             [idle(1, uid: 0, since: 0), busy(2, uid: 1001), busy(3, uid: 1002)], .refuse(.connectionLimit)),
            ("root's idle connection makes room for root", 0,
             [idle(1, uid: 0, since: 0), busy(2, uid: 1001), busy(3, uid: 1002), busy(4, uid: 1003)], .admitEvicting(id: 1, .idle)),
            ("root at the full limit evicts whoever was idle longest, its own included", 0,
             [idle(1, uid: 0, since: 0), idle(2, uid: 1001, since: 1), busy(3, uid: 1002), busy(4, uid: 1003)],
             .admitEvicting(id: 1, .idle)),
            ("root at the full limit with everyone busy is refused", 0,
             [busy(1, uid: 0), busy(2, uid: 1001), busy(3, uid: 1002), busy(4, uid: 1003)], .refuse(.connectionLimit)),
        ]
        let admission = ControlAdmission(limits: limits)
        for row in rows {
            XCTAssertEqual(admission.admit(uid: row.uid, among: row.open), row.expected, row.name)
        }
    }

    func testAllClientsUnreadReplies_stayWithinTheirBound_byDroppingThoseThatReadLeastRecently() {
        typealias Row = (name: String, open: [ControlAdmission.Client], dropped: [UInt64])
        let rows: [Row] = [
            ("within the bound, nobody goes", [notReading(1, uid: 1000, since: 0, bytes: 60), notReading(2, uid: 1001, since: 1, bytes: 40)], []),
            ("past it, the one blocked longest goes", [notReading(1, uid: 1000, since: 5, bytes: 60), notReading(2, uid: 1001, since: 1, bytes: 50)], [2]),
            ("as many go as the bound needs, oldest first",
             [notReading(1, uid: 1000, since: 1, bytes: 30), notReading(2, uid: 1001, since: 2, bytes: 30), notReading(3, uid: 1002, since: 3, bytes: 90)],
             [1, 2]),
            ("root's unread replies count, and root goes too", [notReading(1, uid: 0, since: 0, bytes: 80), notReading(2, uid: 1001, since: 4, bytes: 80)], [1]),
            ("replies still being written count last; ties by id",
             [.init(id: 3, uid: 1000, isIdle: false, lastActivity: at(0), pendingReplyBytes: 70),
              .init(id: 2, uid: 1001, isIdle: false, lastActivity: at(0), pendingReplyBytes: 70)], [2]),
        ]
        let admission = ControlAdmission(limits: limits)
        for row in rows {
            XCTAssertEqual(admission.overReplyBudget(row.open), row.dropped, row.name)
        }
    }

    func testEachDeadline_endsTheConnectionsPastIt_withTheFirstRuleItBroke() {
        var closing = busy(6, uid: 1000)
        closing.closedAndDone = true
        let open: [ControlAdmission.Client] = [
            halfSent(1, uid: 1000, since: 94),
            halfSent(2, uid: 1000, since: 96),
            notReading(3, uid: 1001, since: 89),
            notReading(4, uid: 1001, since: 91),
            idle(5, uid: 1002, since: 39),
            closing,
            idle(7, uid: 0, since: 41),
            // Half-sent and not reading: the request's deadline is said first.
            .init(id: 8, uid: 1003, isIdle: false, lastActivity: at(0), partialSince: at(0), writeBlockedSince: at(0), pendingReplyBytes: 1),
        ]
        let expired = ControlAdmission(limits: limits).expired(open.shuffled(), now: at(100))
        XCTAssertEqual(expired.map(\.id), [1, 3, 5, 6, 8])
        XCTAssertEqual(expired.map(\.expiry), [.requestTimeout, .writeTimeout, .idleTimeout, .done, .requestTimeout])
    }
}
