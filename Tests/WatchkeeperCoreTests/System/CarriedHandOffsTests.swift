import Dispatch
import Glibc
import Synchronization
import XCTest
@testable import WatchkeeperCore

final class CarriedHandOffsTests: XCTestCase {
    private func threadID() -> pthread_t { pthread_self() }

    func testAHandOffFromACarriedBlock_runsAfterIt_onTheCarryingThread() {
        let owner = SubsystemQueue(name: "test.owner")
        let other = SubsystemQueue(name: "test.other")
        let seen = Mutex<[String]>([])
        let carrier = threadID()
        let ran = Mutex<(pthread_t, pthread_t)>((0, 0))
        CarriedHandOffs.carry(sync: owner.queue) {
            dispatchPrecondition(condition: .onQueue(owner.queue))
            ran.withLock { $0.0 = pthread_self() }
            other.async {
                dispatchPrecondition(condition: .onQueue(other.queue))
                ran.withLock { $0.1 = pthread_self() }
                seen.withLock { $0.append("handed") }
            }
            seen.withLock { $0.append("owner block ends") }
        }
        // Both ran before carry returned, on this thread: no worker was woken.
        XCTAssertEqual(seen.withLock { $0 }, ["owner block ends", "handed"])
        XCTAssertEqual(ran.withLock { $0.0 }, carrier)
        XCTAssertEqual(ran.withLock { $0.1 }, carrier)
        XCTAssertEqual(other.pendingItems, 0)
    }

    func testHandOffsBeyondTheLimit_goAsUsual_inTheOrderTheyWereMade() {
        let owner = SubsystemQueue(name: "test.owner")
        let other = SubsystemQueue(name: "test.other")
        let order = Mutex<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        CarriedHandOffs.carry(sync: owner.queue, limit: 2) {
            for index in 0..<6 {
                other.async {
                    order.withLock { $0.append(index) }
                    if index == 5 { done.signal() }
                }
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(order.withLock { $0 }, Array(0..<6))
        XCTAssertEqual(other.pendingItems, 0)
    }

    func testAHandOffToTheOwnersOwnQueue_goesBehindWhatItHasWaiting() {
        let owner = SubsystemQueue(name: "test.owner")
        let order = Mutex<[String]>([])
        let done = DispatchSemaphore(value: 0)
        owner.queue.suspend()
        owner.async { order.withLock { $0.append("queued before") } }
        let carried = DispatchSemaphore(value: 0)
        Thread.detach {
            CarriedHandOffs.carry(sync: owner.queue) {
                owner.async {
                    order.withLock { $0.append("handed to itself") }
                    done.signal()
                }
                order.withLock { $0.append("carried block") }
            }
            carried.signal()
        }
        owner.queue.resume()
        XCTAssertEqual(carried.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(order.withLock { $0 }, ["queued before", "carried block", "handed to itself"])
    }

    func testOutsideACarriedBlock_aHandOffRunsOnAWorker() {
        let other = SubsystemQueue(name: "test.other")
        let ranOn = Mutex<pthread_t>(0)
        let done = DispatchSemaphore(value: 0)
        other.async {
            ranOn.withLock { $0 = pthread_self() }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertNotEqual(ranOn.withLock { $0 }, pthread_self())
        XCTAssertNil(CarriedHandOffs.current)
    }
}

private enum Thread {
    static func detach(_ body: @escaping @Sendable () -> Void) {
        var thread = pthread_t()
        let box = Unmanaged.passRetained(Box(body))
        let status = pthread_create(&thread, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            box.body()
            return nil
        }, box.toOpaque())
        precondition(status == 0)
        pthread_detach(thread)
    }

    final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
}

final class CarriedHandOffsHandOverTests: XCTestCase {
    func testHandingOver_sendsWhatIsHeld_andHoldsNothingMore() {
        let owner = SubsystemQueue(name: "test.owner")
        let other = SubsystemQueue(name: "test.other")
        let order = Mutex<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        let carriedAfter = Mutex<Bool>(false)
        CarriedHandOffs.carry(sync: owner.queue) {
            other.async { order.withLock { $0.append(1) } }
            CarriedHandOffs.current?.handOver()
            other.async {
                order.withLock { $0.append(2) }
                done.signal()
            }
            carriedAfter.withLock { $0 = CarriedHandOffs.current?.held.isEmpty == false }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(order.withLock { $0 }, [1, 2])
        XCTAssertFalse(carriedAfter.withLock { $0 })
    }
}
