import XCTest

@testable import WatchkeeperCore

/// The lease's timing rules, one event at a time on a clock the test moves.
final class FleetLeaseTests: XCTestCase {
    private let zero = MonotonicInstant(nanoseconds: 1_000_000_000_000)

    private func held(_ lease: inout FleetLease, sentAt: MonotonicInstant) {
        XCTAssertEqual(lease.handle(.start), [.grant])
        _ = lease.handle(.granted(id: 7, ttl: .seconds(9), sentAt: sentAt))
    }

    func testAGrantedLeaseIsRenewedAtAThirdOfItsTTL() {
        var lease = FleetLease(ttl: .seconds(9))
        XCTAssertEqual(lease.handle(.start), [.grant])
        let actions = lease.handle(.granted(id: 7, ttl: .seconds(9), sentAt: zero))
        XCTAssertEqual(actions, [.available(id: 7), .armTimer(at: zero + .seconds(3))])
        XCTAssertEqual(lease.claimable, 7)
        XCTAssertEqual(lease.handle(.timer(now: zero + .seconds(3))), [.renew(id: 7), .armTimer(at: zero + .seconds(6))])
    }

    func testTheExpiryBoundCountsFromWhenTheRenewalWasSentNotAnswered() {
        var lease = FleetLease(ttl: .seconds(9))
        held(&lease, sentAt: zero)
        _ = lease.handle(.renewed(ttl: .seconds(9), sentAt: zero + .seconds(3)))
        XCTAssertEqual(lease.expiresBy, zero + .seconds(12))
    }

    func testFailedRenewalsFenceFleetJobsBeforeTheLeaseCanExpire() {
        var lease = FleetLease(ttl: .seconds(9))
        held(&lease, sentAt: zero)
        _ = lease.handle(.timer(now: zero + .seconds(3)))
        XCTAssertEqual(lease.handle(.renewalFailed(now: zero + .seconds(4))), [.armTimer(at: zero + .milliseconds(4_500))])
        XCTAssertEqual(lease.claimable, 7, "one failed renewal does not stop claims")
        _ = lease.handle(.renewalFailed(now: zero + .seconds(5)))
        // Fence point: expiry (9 s) minus a third of the TTL (3 s).
        let actions = lease.handle(.timer(now: zero + .seconds(6)))
        // Everything stopped by expiry minus the clock's margin (1 % of the TTL) and the stop's (0.5 s).
        XCTAssertEqual(actions.first, .fence(stopBy: zero + .seconds(9) - .milliseconds(90) - .milliseconds(500)))
        XCTAssertNil(lease.claimable, "no claim is made on a lease that is being fenced")
        XCTAssertEqual(lease.leaseID, 7, "but it is still renewed")
        XCTAssertEqual(lease.handle(.timer(now: zero + .seconds(9))), [.lost(id: 7), .grant])
        XCTAssertEqual(lease.fences, 1)
    }

    /// A renewal sent into a moment without a leader times out at the fence point: it is
    /// tried again after the retry delay, not left until the lease is lost at expiry (a 1.2 s
    /// etcd outage lost every host's lease that way in the simulation).
    func testARenewalFailingAtTheFencePoint_isTriedAgainBeforeExpiry() {
        var lease = FleetLease(ttl: .seconds(9))
        held(&lease, sentAt: zero)
        XCTAssertEqual(lease.handle(.timer(now: zero + .seconds(3))).first, .renew(id: 7))
        // Its answer never came: it fails at the fence point (expiry 9 s minus 3 s).
        XCTAssertEqual(lease.handle(.renewalFailed(now: zero + .seconds(6))), [.armTimer(at: zero + .seconds(6))])
        let fencing = lease.handle(.timer(now: zero + .seconds(6)))
        XCTAssertEqual(fencing.last, .armTimer(at: zero + .milliseconds(6_500)), "\(fencing)")
        XCTAssertEqual(lease.handle(.timer(now: zero + .milliseconds(6_500))).first, .renew(id: 7))
        _ = lease.handle(.renewed(ttl: .seconds(9), sentAt: zero + .milliseconds(6_500)))
        XCTAssertEqual(lease.claimable, 7, "renewed before expiry: claimable again")
    }

    /// Issue 35, item 1: jobs may start under a held lease until its fence point, and not
    /// at all once it is being fenced or lost.
    func testJobsMayStartUntilTheFencePoint_andNotWhileTheLeaseIsFenced() {
        var lease = FleetLease(ttl: .seconds(9))
        held(&lease, sentAt: zero)
        XCTAssertEqual(lease.startsAllowed?.lease, 7)
        XCTAssertEqual(lease.startsAllowed?.until, zero + .seconds(6), "expiry (9 s) minus a third of the TTL")
        _ = lease.handle(.timer(now: zero + .seconds(6)))
        XCTAssertNil(lease.startsAllowed)
        _ = lease.handle(.timer(now: zero + .seconds(9)))
        XCTAssertNil(lease.startsAllowed)
    }

    func testARenewalThatComesBackDuringTheFenceMakesTheLeaseClaimableAgain() {
        var lease = FleetLease(ttl: .seconds(9))
        held(&lease, sentAt: zero)
        _ = lease.handle(.timer(now: zero + .seconds(6)))
        XCTAssertNil(lease.claimable)
        let actions = lease.handle(.renewed(ttl: .seconds(9), sentAt: zero + .seconds(7)))
        XCTAssertEqual(actions.first, .available(id: 7))
        XCTAssertEqual(lease.claimable, 7)
    }

    func testALeaseEtcdNoLongerHasFencesAtOnceAndAsksForANewOne() {
        var lease = FleetLease(ttl: .seconds(9))
        held(&lease, sentAt: zero)
        let actions = lease.handle(.leaseGone(now: zero + .seconds(1)))
        guard case .fence = actions.first else { return XCTFail("\(actions)") }
        XCTAssertEqual(Array(actions.dropFirst()), [.lost(id: 7), .grant])
        XCTAssertNil(lease.claimable)
    }

    func testALateTimerPastExpiryStillFences() {
        var lease = FleetLease(ttl: .seconds(9))
        held(&lease, sentAt: zero)
        let actions = lease.handle(.timer(now: zero + .seconds(20)))
        XCTAssertEqual(actions, [.fence(stopBy: zero + .seconds(20)), .lost(id: 7), .grant])
    }

    func testAFailedGrantIsRetried() {
        var lease = FleetLease(ttl: .seconds(9))
        _ = lease.handle(.start)
        XCTAssertEqual(lease.handle(.grantFailed(now: zero)), [.armTimer(at: zero + .seconds(1))])
        XCTAssertEqual(lease.handle(.timer(now: zero + .seconds(1))), [.grant])
    }
}
