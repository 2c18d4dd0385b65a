import Dispatch
import Foundation
import WatchkeeperTestSupport
import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// What the etcd client makes of answers (issue 35, item 8): a web server's error page at a
/// wrong endpoint becomes one short, escaped line; a watch's long poll is not a call's latency.
final class EtcdClientAnswersTests: XCTestCase {
    /// A server on a loopback port of its own that answers every request with `response`.
    private final class OneAnswerServer: @unchecked Sendable {
        let port: UInt16
        private let listener: Int32

        init(response: String) throws {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            listener = descriptor
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0 }
            }
            guard bound, listen(descriptor, 8) == 0 else { throw XCTSkip("unable to listen on a loopback port") }
            port = UInt16(bigEndian: address.sin_port)
            let listener = self.listener
            Thread.detachNewThread {
                while true {
                    let client = accept(listener, nil, nil)
                    guard client >= 0 else { return }
                    var buffer = [UInt8](repeating: 0, count: 65_536)
                    _ = read(client, &buffer, buffer.count)
                    _ = response.withCString { write(client, $0, strlen($0)) }
                    close(client)
                }
            }
        }

        deinit { shutdown(listener, Int32(SHUT_RDWR)); close(listener) }
    }

    private func call<T>(_ queue: SubsystemQueue, _ body: @escaping @Sendable (@escaping (T) -> Void) -> Void) -> T? {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var value: T?
        queue.async { body { value = $0; done.signal() } }
        _ = done.wait(timeout: .now() + 10)
        return value
    }

    func testAnHTMLErrorPageFromAWrongEndpoint_isSaidOnOneShortEscapedLine() throws {
        let page = "<html>\n<head><title>404 Not\n  Found</title></head>\n<body>\n<h1>Not Found</h1>\n<p>\u{1b}[31mnginx</p>\n</body>\n</html>\n"
        let server = try OneAnswerServer(response: "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: \(page.utf8.count)\r\nConnection: close\r\n\r\n" + page)
        let queue = SubsystemQueue(name: "answers-test")
        let client = EtcdClient(options: .init(endpoints: [try EtcdEndpoint.parse("http://127.0.0.1:\(server.port)")]), queue: queue, sources: SourceRegistry())
        let result = call(queue) { done in client.get("/k", timeout: .seconds(2)) { done($0) } }
        guard case .failure(let error)? = result else { return XCTFail("\(String(describing: result))") }
        XCTAssertEqual(error.description, "etcd at http://127.0.0.1:\(server.port) refused the call: HTTP 404: 404 Not Found (code -404)")
        // Without a title: the text without its tags, one line, escaped, at most 160 characters.
        let long = "<p>\(String(repeating: "bad gateway ", count: 40))</p>\n<p>\u{1b}[0m</p>"
        let summary = EtcdClient.summary(ofBody: Array(long.utf8), status: 502)
        XCTAssertFalse(summary.contains("\n") || summary.contains("\u{1b}") || summary.contains("<"), summary)
        XCTAssertTrue(summary.hasPrefix("HTTP 502: bad gateway bad gateway"), summary)
        XCTAssertLessThanOrEqual(summary.count, 170, summary)
        XCTAssertEqual(EtcdClient.summary(ofBody: Array("line one\nline\u{7}two".utf8), status: 500), "HTTP 500: line one line\\x07two")
    }

    func testAWatchsLongPoll_isNotCountedAsACallsLatency() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/etcd") else { throw XCTSkip("no /usr/bin/etcd") }
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory(), members: 1)
        let queue = SubsystemQueue(name: "latency-test")
        let client = EtcdClient(options: .init(endpoints: [try EtcdEndpoint.parse(etcd.endpoints[0])]), queue: queue, sources: SourceRegistry())
        let watched = DispatchSemaphore(value: 0)
        queue.async {
            client.watch(prefix: "/latency/", fromRevision: 0, timeout: .milliseconds(1500), onEvents: { _, _ in }, onCompacted: { _ in },
                         completion: { _ in watched.signal() })
        }
        for index in 0..<5 {
            let answer = call(queue) { done in client.get("/latency/\(index)", timeout: .seconds(2)) { done($0) } }
            XCTAssertNoThrow(try XCTUnwrap(answer).get())
        }
        XCTAssertEqual(watched.wait(timeout: .now() + 10), .success, "the watch never ended")
        let (count, slowest) = queue.queue.sync { (client.latencies.count, client.latencies.percentile(0.99)) }
        XCTAssertEqual(count, 5, "the watch's 1.5 s stream was counted as a call")
        XCTAssertLessThan(try XCTUnwrap(slowest), .seconds(1))
        queue.queue.sync { client.close() }
    }
}
