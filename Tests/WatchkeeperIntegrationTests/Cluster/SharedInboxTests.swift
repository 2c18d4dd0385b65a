import Foundation
import XCTest
import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// `fleet = "one"` on a watch rule: three daemons on one directory, each file claimed in
/// etcd before its job starts.
final class SharedInboxTests: XCTestCase {
    /// The issue's 10,000 files in `make reliability` (WATCHKEEPER_TEST_INBOX_FILES); fewer
    /// in `make test`.
    func testEveryFileIsHandled_andTwiceOnlyForTheJobsOfAHostKilledMidBurst() throws {
        let count = Int(ProcessInfo.processInfo.environment["WATCHKEEPER_TEST_INBOX_FILES"] ?? "") ?? 1_000
        let etcd = try EtcdTestCluster(directory: try makeScratchDirectory())
        let shared = try makeScratchDirectory()
        let inbox = shared + "/inbox"
        try FileManager.default.createDirectory(atPath: inbox + "/done", withIntermediateDirectories: true)
        // Each job records its start and end; a success moves the file to done/.
        let fleet = try FleetHosts(count: 3, endpoints: etcd.endpoints, shared: shared, tasks: """
            [daemon]
            max_jobs = 8

            [[watch]]
            name = "inbox"
            path = "\(inbox)"
            events = ["closed_write", "moved_in"]
            settle = "100ms"
            fleet = "one"
            shell = true
            command = 'mkdir -p @SHARED@/pids; touch @SHARED@/pids/@HOST@.$$; echo "$WATCHKEEPER_NAME @HOST@ $WATCHKEEPER_RUN_ID start" >> @SHARED@/files; sleep 0.05; mv -- "$WATCHKEEPER_PATH" @SHARED@/inbox/done/ && echo "$WATCHKEEPER_NAME @HOST@ $WATCHKEEPER_RUN_ID end" >> @SHARED@/files'
            """.replacingOccurrences(of: "[daemon]\nmax_jobs = 8\n", with: ""), cluster: "lease_ttl = \"4s\"")
        try fleet.startAll()
        var victimName = ""
        // Files written under a temporary name and renamed in, as producers do.
        for index in 0..<count {
            let name = String(format: "f%05d.dat", index)
            FileManager.default.createFile(atPath: inbox + "/.\(name).part", contents: Data("payload \(index)\n".utf8))
            rename(inbox + "/.\(name).part", inbox + "/" + name)
            if index == count / 3 {
                // Mid-burst: the host with the most jobs started so far loses power.
                Thread.sleep(forTimeInterval: 1)
                let starts = Dictionary(grouping: lines(shared + "/files").filter { $0.count == 4 && $0[3] == "start" }, by: { $0[1] })
                let victim = fleet.hosts.max { (starts[$0.name]?.count ?? 0) < (starts[$1.name]?.count ?? 0) }!
                victimName = victim.name
                fleet.powerOff(victim)
            }
        }
        XCTAssertTrue(waitFor(Double(count) / 10 + 60) {
            (try? FileManager.default.contentsOfDirectory(atPath: inbox + "/done").count) == count
        }, "handled \((try? FileManager.default.contentsOfDirectory(atPath: inbox + "/done").count) ?? 0) of \(count)")
        var records: [[String]] = []
        var ended = Set<String>()
        var killedMidLine = Set<String>()
        func tally() {
            records = lines(shared + "/files").filter { $0.count == 4 }
            ended = Set(records.filter { $0[3] == "end" }.map { $0[0] })
            // A job killed with its host between its move and its line moved the file without
            // saying so: it is in done/ (checked above), and only that host ever started it.
            killedMidLine = Set(records.filter { $0[3] == "start" && $0[1] == victimName }.map { $0[0] })
                .subtracting(ended).filter { name in records.allSatisfy { $0[0] != name || $0[1] == victimName } }
        }
        // A job writes its end line just after its move: the last file's (often one taken over
        // from the killed host, seconds after the rest) can still be on its way at the last move.
        _ = waitFor(10) {
            tally()
            return ended.count + killedMidLine.count == count
        }
        XCTAssertEqual(ended.count + killedMidLine.count, count, "files whose job ended")
        if ended.count + killedMidLine.count != count {
            let missing = (0..<count).map { String(format: "f%05d.dat", $0) }.filter { !ended.contains($0) }
            let first = missing.prefix(3)
            for name in first {
                let key = try? etcd.get(fleet.prefix + "/watches/inbox/files/" + name)
                print("missing \(name): etcd \(key ?? "none"); starts \(records.filter { $0[0] == name })")
                for host in fleet.hosts {
                    let mentions = host.sandbox.root + "/stderr.log"
                    let text = (try? String(contentsOfFile: mentions, encoding: .utf8)) ?? ""
                    for line in text.split(separator: "\n") where line.contains(name) { print("  \(host.name): \(line.prefix(300))") }
                }
            }
        }
        let startsByFile = Dictionary(grouping: records.filter { $0[3] == "start" }, by: { $0[0] })
        let endedRuns = Set(records.filter { $0[3] == "end" }.map { $0[2] })
        for (file, starts) in startsByFile where starts.count > 1 {
            // Run twice: only if all but one run never ended (the dead host's, in flight).
            let unfinished = starts.filter { !endedRuns.contains($0[2]) }
            XCTAssertEqual(unfinished.count, starts.count - 1, "\(file) ran \(starts.count) times: \(starts)")
        }
        let twice = startsByFile.values.filter { $0.count > 1 }.count
        print("shared inbox: \(count) files, \(twice) run twice (in flight on the killed host), hosts: \(Dictionary(grouping: records.filter { $0[3] == "end" }, by: { $0[1] }).mapValues(\.count))")
        for host in fleet.hosts { host.daemon?.stop(within: 20) }
    }

    private func lines(_ path: String) -> [[String]] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
    }
}
