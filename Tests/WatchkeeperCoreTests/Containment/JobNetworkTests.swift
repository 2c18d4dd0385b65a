import XCTest

@testable import WatchkeeperCore

/// What the daemon says about the network its jobs inherit: read from /proc/self/net/dev
/// and from whether an Internet socket can be made.
final class JobNetworkTests: XCTestCase {
    private let privateNetwork = """
        Inter-|   Receive                                                |  Transmit
         face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
            lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
        """
    private let host = """
        Inter-|   Receive                                                |  Transmit
         face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
            lo:  123456     100    0    0    0     0          0         0   123456     100    0    0    0     0       0          0
          eth0: 9876543    7000    0    0    0     0          0         0  1234567    5000    0    0    0     0       0          0
        wlp2s0:       1       1    0    0    0     0          0         0        1       1    0    0    0     0       0          0
        """

    func testInterfaces_leaveOutLoopbackAndTheHeader() {
        XCTAssertEqual(JobNetwork.interfaces(procNetDev: privateNetwork), [])
        XCTAssertEqual(JobNetwork.interfaces(procNetDev: host), ["eth0", "wlp2s0"])
    }

    func testOnlyLoopback_isNoNetwork_namingPrivateNetwork() {
        let network = JobNetwork(interfaces: JobNetwork.interfaces(procNetDev: privateNetwork), internetSockets: true)
        XCTAssertFalse(network.reachable)
        XCTAssertEqual(network.description, "none: only loopback is present (PrivateNetwork=yes in the unit)")
    }

    func testRefusedInternetSockets_areNoNetworkEvenWithInterfaces() {
        let network = JobNetwork(interfaces: ["eth0"], internetSockets: false)
        XCTAssertFalse(network.reachable)
        XCTAssertEqual(network.description, "none: Internet sockets are refused (RestrictAddressFamilies= in the unit)")
    }

    func testInterfacesAndSockets_areTheHostsNetwork() {
        let network = JobNetwork(interfaces: ["eth0", "wlp2s0"], internetSockets: true)
        XCTAssertTrue(network.reachable)
        XCTAssertEqual(network.description, "the host's (eth0, wlp2s0)")
    }

    /// This test process runs with the machine's network: the probe must see it as such.
    func testProbe_readsThisProcesssNamespace() throws {
        let listing = try String(contentsOfFile: "/proc/self/net/dev", encoding: .utf8)
        XCTAssertEqual(JobNetwork.probe().interfaces, JobNetwork.interfaces(procNetDev: listing))
    }
}
