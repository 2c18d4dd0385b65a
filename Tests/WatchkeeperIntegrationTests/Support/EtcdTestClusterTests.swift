import Foundation
import WatchkeeperCore
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The etcd harness the cluster tests of issue 25 stand on, checked against real etcd 3.4
/// processes: what each fault it offers does to the cluster, that TLS refuses what it should,
/// and that a partition cuts and heals. Timings are printed for the record.

private func seconds(since start: MonotonicInstant) -> Double {
    let (whole, attoseconds) = (MonotonicInstant.now - start).components
    return Double(whole) + Double(attoseconds) / 1e18
}

final class EtcdTestClusterTests: XCTestCase {
    func testThreeMembers_becomeHealthy_andAcceptPutsAndGets() throws {
        let start = MonotonicInstant.now
        let cluster = try EtcdTestCluster(directory: try makeScratchDirectory())
        print("etcd harness: 3 plaintext members healthy in \(String(format: "%.2f", seconds(since: start))) s")
        XCTAssertEqual(cluster.runningMembers, [0, 1, 2])
        XCTAssertEqual(cluster.endpoints.count, 3)
        XCTAssertTrue(cluster.endpoints.allSatisfy { $0.hasPrefix("http://127.0.0.1:") }, "\(cluster.endpoints)")

        try cluster.put("/wk/a", "one value\nwith a newline")
        try cluster.put("/wk/b", "-starts with a dash")
        try cluster.put("/other", "x")
        XCTAssertEqual(try cluster.get("/wk/a"), "one value\nwith a newline")
        XCTAssertNil(try cluster.get("/wk/none"))
        let listed = try cluster.getPrefix("/wk/")
        XCTAssertEqual(listed.map(\.key), ["/wk/a", "/wk/b"])
        XCTAssertEqual(listed.map(\.value), ["one value\nwith a newline", "-starts with a dash"])
        // Each member answers on its own.
        for member in 0..<3 {
            let result = cluster.etcdctl(["get", "--print-value-only", "/other"], endpoints: [cluster.clientURL(member: member)])
            XCTAssertEqual(result.stdout, "x\n", "\(result)")
        }
    }

    func testWithOneMemberKilled_aPutStillSucceeds() throws {
        let cluster = try EtcdTestCluster(directory: try makeScratchDirectory())
        let leader = try XCTUnwrap(cluster.leader())
        cluster.kill(member: leader)
        XCTAssertFalse(cluster.isRunning(member: leader))
        let start = MonotonicInstant.now
        let successor = waitForValue(10, every: .milliseconds(10)) { cluster.leader(timeout: 0.5) }
        print("etcd harness: leader killed, member\(successor.map(String.init) ?? "?") leader after \(String(format: "%.2f", seconds(since: start))) s")
        XCTAssertNotNil(successor)
        XCTAssertNotEqual(successor, leader)
        // The first put may wait out the election that follows the leader's death.
        XCTAssertTrue(waitFor(10, every: .milliseconds(50)) {
            cluster.etcdctl(["put", "--command-timeout=500ms", "k", "v"], timeout: 5).succeeded
        })
        print("etcd harness: leader killed, a put succeeded after \(String(format: "%.2f", seconds(since: start))) s")
        XCTAssertEqual(try cluster.get("k"), "v")
        XCTAssertNotNil(cluster.leader())
    }

    func testWithTwoOfThreeKilled_aPutFailsAtItsDeadline_andAfterARestartWorksWithTheDataKept() throws {
        let cluster = try EtcdTestCluster(directory: try makeScratchDirectory())
        try cluster.put("kept", "before")
        cluster.kill(member: 1)
        cluster.kill(member: 2)
        let start = MonotonicInstant.now
        let refused = cluster.etcdctl(["put", "--command-timeout=2s", "k", "v"], timeout: 10)
        let took = seconds(since: start)
        XCTAssertEqual(refused.status, 1, "\(refused)")
        // Either the client's deadline, or the server giving up on the proposal first (seen
        // when the member left alone was the leader and stepped down).
        XCTAssertTrue(refused.stderr.contains("context deadline exceeded") || refused.stderr.contains("etcdserver: request timed out"),
                      refused.stderr)
        XCTAssertGreaterThan(took, 1.9)
        XCTAssertLessThan(took, 5 * testDeadlineScale)

        let restart = MonotonicInstant.now
        try cluster.restart(member: 1)
        print("etcd harness: quorum back, healthy \(String(format: "%.2f", seconds(since: restart))) s after restarting a SIGKILLed member")
        try cluster.put("k", "after")
        XCTAssertEqual(try cluster.get("kept"), "before")
        try cluster.restart(member: 2)
        XCTAssertEqual(cluster.runningMembers, [0, 1, 2])
        let fromTheRestarted = cluster.etcdctl(["get", "--print-value-only", "k"], endpoints: [cluster.clientURL(member: 2)])
        XCTAssertEqual(fromTheRestarted.stdout, "after\n", "\(fromTheRestarted)")
    }

    func testAFrozenLeader_isReplaced_andRejoinsWhenContinued() throws {
        let cluster = try EtcdTestCluster(directory: try makeScratchDirectory())
        let leader = try XCTUnwrap(cluster.leader())
        cluster.stop(member: leader)
        let others = (0..<3).filter { $0 != leader }.map { cluster.clientURL(member: $0) }
        let start = MonotonicInstant.now
        XCTAssertTrue(waitFor(10, every: .milliseconds(50)) {
            cluster.etcdctl(["put", "--command-timeout=500ms", "k", "v"], timeout: 5, endpoints: others).succeeded
        })
        print("etcd harness: leader frozen, a put succeeded after \(String(format: "%.2f", seconds(since: start))) s")
        let frozen = cluster.etcdctl(["get", "--command-timeout=1s", "k"], timeout: 5, endpoints: [cluster.clientURL(member: leader)])
        XCTAssertFalse(frozen.succeeded, "a stopped member answered: \(frozen)")
        cluster.cont(member: leader)
        try cluster.waitUntilHealthy()
        let caughtUp = cluster.etcdctl(["get", "--print-value-only", "k"], endpoints: [cluster.clientURL(member: leader)])
        XCTAssertEqual(caughtUp.stdout, "v\n", "\(caughtUp)")
    }

    func testStopAll_leavesNoMemberRunning() throws {
        let cluster = try EtcdTestCluster(directory: try makeScratchDirectory(), members: 1)
        let pid = try XCTUnwrap(cluster.pid(member: 0))
        cluster.stop(member: 0)
        cluster.stopAll()
        XCTAssertEqual(cluster.runningMembers, [])
        XCTAssertEqual(Glibc.kill(pid, 0), -1, "member \(pid) still exists")
    }

    func testAuth_limitsTheUserToItsPrefix() throws {
        let cluster = try EtcdTestCluster(directory: try makeScratchDirectory(), members: 1)
        let auth = try cluster.enableAuth(prefix: "/wk/")
        XCTAssertEqual(try String(contentsOfFile: auth.passwordFile, encoding: .utf8), auth.password)
        let user = "--user=\(auth.user):\(auth.password)"
        XCTAssertTrue(cluster.etcdctl([user, "put", "/wk/mine", "1"]).succeeded)
        let outside = cluster.etcdctl([user, "put", "/elsewhere", "1"])
        XCTAssertFalse(outside.succeeded)
        XCTAssertTrue(outside.stderr.contains("permission denied"), outside.stderr)
        let anonymous = cluster.etcdctl(["--user=nobody:wrong", "get", "/wk/mine"])
        XCTAssertFalse(anonymous.succeeded)
        // The helpers act as root.
        try cluster.put("/elsewhere", "root may")
        XCTAssertEqual(try cluster.get("/wk/mine"), "1")
    }
}

final class EtcdTestClusterTLSTests: XCTestCase {
    func testAClientCertificateOfTheClustersCA_isAccepted_andAForeignOneOrNoneRefused() throws {
        let start = MonotonicInstant.now
        let cluster = try EtcdTestCluster(directory: try makeScratchDirectory(), tls: true)
        print("etcd harness: 3 TLS members (certificates included) healthy in \(String(format: "%.2f", seconds(since: start))) s")
        let tls = try XCTUnwrap(cluster.tls)
        XCTAssertTrue(cluster.endpoints.allSatisfy { $0.hasPrefix("https://127.0.0.1:") }, "\(cluster.endpoints)")
        for path in [tls.caCertificate, tls.clientCertificate, tls.clientKey, tls.foreignClientCertificate, tls.serverCertificate(member: 2)] {
            XCTAssertTrue(FileManager.default.fileExists(atPath: path), path)
        }
        try cluster.put("k", "v")
        XCTAssertEqual(try cluster.get("k"), "v")

        for identity in [EtcdTestCluster.ClientIdentity.foreign, .none] {
            let refused = cluster.etcdctl(["get", "--command-timeout=2s", "k"], timeout: 10, identity: identity)
            XCTAssertFalse(refused.succeeded, "\(identity): \(refused)")
        }
        // etcdctl only says "context deadline exceeded"; the member says why.
        let log = (0..<3).map { cluster.log(member: $0) }.joined()
        XCTAssertTrue(log.contains("certificate signed by unknown authority"), "no refusal of the foreign certificate logged")
        XCTAssertTrue(log.contains("client didn't provide a certificate"), "no refusal of a missing certificate logged")

        let gateway = cluster.gateway("/v3/kv/range", json: #"{"key":"aw=="}"#)
        XCTAssertTrue(gateway.succeeded && gateway.stdout.contains(#""value":"dg==""#), "\(gateway)")
        XCTAssertFalse(cluster.gateway("/v3/kv/range", json: #"{"key":"aw=="}"#, identity: .foreign).succeeded)
        XCTAssertFalse(cluster.gateway("/v3/kv/range", json: #"{"key":"aw=="}"#, identity: .none).succeeded)
    }
}

/// What the daemon's client will send and parse, checked against the real gateway.
final class EtcdTestClusterGatewayTests: XCTestCase {
    private func json(_ result: CommandResult, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        XCTAssertTrue(result.succeeded, "\(result)", file: file, line: line)
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], result.stdout, file: file, line: line)
    }

    func testTheJSONGateway_answersRangeTxnLeaseAndWatch_inTheShapesRecorded() throws {
        let cluster = try EtcdTestCluster(directory: try makeScratchDirectory(), members: 1)
        let foo = Data("foo".utf8).base64EncodedString(), bar = Data("bar".utf8).base64EncodedString()

        _ = try json(cluster.gateway("/v3/kv/put", json: #"{"key":"\#(foo)","value":"\#(bar)"}"#))
        let range = try json(cluster.gateway("/v3/kv/range", json: #"{"key":"\#(foo)"}"#))
        let kv = try XCTUnwrap((range["kvs"] as? [[String: Any]])?.first)
        XCTAssertEqual(kv["value"] as? String, bar)
        XCTAssertEqual(range["count"] as? String, "1", "int64 fields are strings")
        XCTAssertNotNil((range["header"] as? [String: Any])?["revision"] as? String)
        let missing = try json(cluster.gateway("/v3/kv/range", json: #"{"key":"bm9uZQ=="}"#))
        XCTAssertNil(missing["kvs"], "an empty range has no kvs")
        XCTAssertNil(missing["count"], "an empty range has no count")

        let grant = try json(cluster.gateway("/v3/lease/grant", json: #"{"TTL":10}"#))
        let lease = try XCTUnwrap(grant["ID"] as? String)
        XCTAssertEqual(grant["TTL"] as? String, "10")

        let lock = Data("lock".utf8).base64EncodedString()
        let claim = #"{"compare":[{"target":"CREATE","key":"\#(lock)","createRevision":"0"}],"success":[{"requestPut":{"key":"\#(lock)","value":"\#(bar)","lease":"\#(lease)"}}],"failure":[{"requestRange":{"key":"\#(lock)"}}]}"#
        let won = try json(cluster.gateway("/v3/kv/txn", json: claim))
        XCTAssertEqual(won["succeeded"] as? Bool, true)
        XCTAssertNotNil((won["responses"] as? [[String: Any]])?.first?["response_put"])
        let lost = try json(cluster.gateway("/v3/kv/txn", json: claim))
        XCTAssertNil(lost["succeeded"], "a failed compare leaves succeeded out")
        let holder = ((lost["responses"] as? [[String: Any]])?.first?["response_range"] as? [String: Any])?["kvs"] as? [[String: Any]]
        XCTAssertEqual(holder?.first?["lease"] as? String, lease)

        // Streams: one JSON object per line, each in {"result": …}; curl is cut off at its timeout.
        let keepalive = cluster.gateway("/v3/lease/keepalive", json: #"{"ID":"\#(lease)"}"#, timeout: 1.5)
        let renewed = try XCTUnwrap(keepalive.stdout.split(separator: "\n").first, "\(keepalive)")
        let renewal = try XCTUnwrap((JSONSerialization.jsonObject(with: Data(renewed.utf8)) as? [String: Any])?["result"] as? [String: Any])
        XCTAssertEqual(renewal["TTL"] as? String, "10")
        let unknown = cluster.gateway("/v3/lease/keepalive", json: #"{"ID":"12345"}"#, timeout: 1.5)
        XCTAssertTrue(unknown.stdout.contains(#""ID":"12345""#) && !unknown.stdout.contains("TTL"),
                      "an unknown lease is renewed with no TTL: \(unknown)")

        // The watch stream in the background, as a client keeps it open, while puts are made.
        let streamed = try makeScratchDirectory() + "/watch.out"
        FileManager.default.createFile(atPath: streamed, contents: nil)
        let watch = Process()
        watch.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        watch.arguments = ["-sS", "-N", "--max-time", "3", "--data-binary", #"{"create_request":{"key":"\#(foo)"}}"#, cluster.clientURL(member: 0) + "/v3/watch"]
        watch.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: streamed))
        try watch.run()
        XCTAssertTrue(waitFor(5) { ((try? String(contentsOfFile: streamed, encoding: .utf8)) ?? "").contains("created") })
        _ = cluster.gateway("/v3/kv/put", json: #"{"key":"\#(foo)","value":"YmF6"}"#)
        _ = cluster.gateway("/v3/kv/deleterange", json: #"{"key":"\#(foo)"}"#)
        XCTAssertTrue(waitFor(5) { ((try? String(contentsOfFile: streamed, encoding: .utf8)) ?? "").contains("DELETE") })
        watch.terminate()
        watch.waitUntilExit()
        let lines = try String(contentsOfFile: streamed, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 3, "\(lines)")
        XCTAssertTrue(lines.first?.contains(#""created":true"#) ?? false, "\(lines)")
        XCTAssertTrue(lines.dropFirst().first.map { $0.contains(#""value":"YmF6""#) && !$0.contains(#""type""#) } ?? false, "\(lines)")
        XCTAssertTrue(lines.last?.contains(#""type":"DELETE""#) ?? false, "\(lines)")

        let bad = cluster.gateway("/v3/kv/range", json: #"{"key":"#)
        XCTAssertTrue(bad.stdout.contains(#""code":3"#), "\(bad)")
    }
}

final class EtcdTestClusterPartitionTests: XCTestCase {
    func testAPartition_blocksAProcessInsideFromEtcd_untilHealed() throws {
        let partition = try NetworkPartition()
        let cluster = try EtcdTestCluster(directory: try makeScratchDirectory(), extraListenAddresses: [partition.hostAddress])
        let inside = cluster.endpoints(address: partition.hostAddress).joined(separator: ",")
        let put = { (value: String) in
            partition.run([EtcdTestCluster.etcdctlPath, "--endpoints=\(inside)", "--dial-timeout=2s", "--command-timeout=2s", "put", "k", value], timeout: 10)
        }
        let before = put("before")
        XCTAssertTrue(before.succeeded, "\(before)")

        try partition.cut()
        let cutOff = put("cut")
        XCTAssertFalse(cutOff.succeeded, "etcd reached across the cut: \(cutOff)")
        // The host still reaches the cluster, on loopback and on its own end of the link.
        XCTAssertEqual(try cluster.get("k"), "before")
        XCTAssertTrue(cluster.etcdctl(["get", "k"], endpoints: [cluster.clientURL(member: 0, address: partition.hostAddress)]).succeeded)

        try partition.heal()
        let after = put("after")
        XCTAssertTrue(after.succeeded, "\(after)")
        XCTAssertEqual(try cluster.get("k"), "after")

        // The launcher runs a program inside the namespace, in the test's mount namespace.
        let seen = partition.run(["/bin/cat", "/proc/self/net/dev"], timeout: 5)
        XCTAssertTrue(seen.stdout.contains(partition.namespaceInterface), "\(seen)")
        XCTAssertFalse(seen.stdout.contains(partition.hostInterface), "\(seen)")
    }

    func testRemove_deletesTheNamespaceAndTheLink() throws {
        let partition = try NetworkPartition()
        XCTAssertTrue(FileManager.default.fileExists(atPath: "/run/netns/\(partition.name)"))
        partition.remove()
        XCTAssertFalse(FileManager.default.fileExists(atPath: "/run/netns/\(partition.name)"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: "/sys/class/net/\(partition.hostInterface)"))
    }
}
