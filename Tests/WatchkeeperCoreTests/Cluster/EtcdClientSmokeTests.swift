import Dispatch
import Foundation
import WatchkeeperTestSupport
import XCTest

@testable import WatchkeeperCore

final class EtcdClientSmokeTests: XCTestCase {
    func testCallsAgainstOneMember() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/etcd") else { throw XCTSkip("no /usr/bin/etcd") }
        let scratch = try makeScratchDirectory()
        let port = 23_000 + Int.random(in: 0..<2000)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/etcd")
        process.arguments = ["--data-dir", scratch + "/data", "--listen-client-urls", "http://127.0.0.1:\(port)",
                             "--advertise-client-urls", "http://127.0.0.1:\(port)", "--listen-peer-urls", "http://127.0.0.1:\(port + 1)"]
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        defer { process.terminate(); process.waitUntilExit() }
        let queue = SubsystemQueue(name: "cluster-test")
        let client = EtcdClient(options: .init(endpoints: [try EtcdEndpoint.parse("http://127.0.0.1:\(port)")]), queue: queue, sources: SourceRegistry())
        func run<T>(_ body: @escaping @Sendable (@escaping (T) -> Void) -> Void) -> T? {
            let done = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var value: T?
            queue.async { body { value = $0; done.signal() } }
            _ = done.wait(timeout: .now() + 10)
            return value
        }
        var lease: Int64 = 0
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if case .success(let granted)? = run({ done in client.grantLease(ttl: .seconds(5), timeout: .seconds(1)) { done($0) } }) {
                lease = granted.id
                break
            }
            usleep(100_000)
        }
        XCTAssertNotEqual(lease, 0)
        let granted = lease
        let first = run { done in client.create("/t/a", value: "one", lease: granted, timeout: .seconds(2)) { done($0) } }
        guard case .success(.created)? = first else { return XCTFail("\(String(describing: first))") }
        let second = run { done in client.create("/t/a", value: "two", lease: 0, timeout: .seconds(2)) { done($0) } }
        guard case .success(.exists(let found))? = second, let kv = found.first else { return XCTFail("\(String(describing: second))") }
        XCTAssertEqual(kv.value, "one")
        XCTAssertEqual(kv.lease, granted)
        let renewed = run { done in client.keepAlive(lease: granted, timeout: .seconds(1)) { done($0) } }
        XCTAssertEqual(try renewed?.get(), 5)
        let listed = run { done in client.list(prefix: "/t/", timeout: .seconds(1)) { done($0) } }
        XCTAssertEqual(try listed?.get().kvs.map(\.key), ["/t/a"])
        _ = run { done in client.revokeLease(granted, timeout: .seconds(1)) { done($0) } }
        let gone = run { done in client.get("/t/a", timeout: .seconds(1)) { done($0) } }
        XCTAssertEqual(try gone?.get(), nil)
    }
}
