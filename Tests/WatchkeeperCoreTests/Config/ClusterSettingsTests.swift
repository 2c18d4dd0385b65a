import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// `[cluster]` and `fleet`: what loads, and each mistake at its LINE:COLUMN.
final class ClusterSettingsTests: XCTestCase {
    func testAClusterWithDefaults_loadsWithTheHostNameAndTheDefaultPrefixAndTTL() throws {
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [cluster]
            etcd = ["http://127.0.0.1:2379", "https://[::1]:12379"]
            """))
        let cluster = try XCTUnwrap(configuration.cluster)
        XCTAssertEqual(cluster.endpoints.map(\.description), ["http://127.0.0.1:2379", "https://[::1]:12379"])
        XCTAssertEqual(cluster.name, ClusterSettings.hostName())
        XCTAssertEqual(cluster.prefix, "/watchkeeper/default")
        XCTAssertEqual(cluster.leaseTTL, .seconds(10))
    }

    func testNoClusterSection_meansNoCluster() throws {
        XCTAssertNil(try XCTUnwrap(parsedConfiguration("[daemon]\n")).cluster)
    }

    func testAClusterWithoutEtcd_isRefusedAtItsHeader() {
        assertSingleConfigError("[cluster]\nname = \"a\"\n", at: (1, 2),
                                #"[cluster] needs etcd = ["http://10.0.0.1:2379", ...]: the client URLs of the etcd cluster"#)
    }

    func testAnEndpointThatIsNotAClientURL_isNamed() {
        assertSingleConfigError("[cluster]\netcd = [\"10.0.0.1:2379\"]\n", at: (2, 8),
                                #"cluster.etcd: "10.0.0.1:2379": an etcd endpoint starts with http:// or https://"#)
    }

    func testAPrefixEndingInASlash_isRefused() {
        assertSingleConfigError("[cluster]\netcd = [\"http://h:2379\"]\nprefix = \"/wk/\"\n", at: (3, 10),
                                #"cluster.prefix = "/wk/" must start with '/', not end with one, and hold no '//', spaces or control characters"#)
    }

    func testACertificateWithoutItsKey_isRefused() throws {
        let directory = try makeScratchDirectory()
        FileManager.default.createFile(atPath: directory + "/c.pem", contents: Data(Self.certificate.utf8))
        assertSingleConfigError("[cluster]\netcd = [\"https://h:2379\"]\ncert_file = \"\(directory)/c.pem\"\n", at: (3, 13),
                                "cert_file and key_file go together: the client certificate and its private key")
    }

    func testTLSFilesWithOnlyHTTPEndpoints_areRefused() throws {
        let directory = try makeScratchDirectory()
        FileManager.default.createFile(atPath: directory + "/ca.pem", contents: Data(Self.certificate.utf8))
        assertSingleConfigError("[cluster]\netcd = [\"http://h:2379\"]\nca_file = \"\(directory)/ca.pem\"\n", at: (3, 11),
                                "cluster.ca_file is set but no etcd endpoint is https://: use https:// endpoints, or remove it")
    }

    func testThePasswordIsReadFromItsFile_andNeverDescribed() throws {
        let directory = try makeScratchDirectory()
        FileManager.default.createFile(atPath: directory + "/pw", contents: Data("s3cret\n".utf8))
        let configuration = try XCTUnwrap(parsedConfiguration("""
            [cluster]
            etcd = ["http://h:2379"]
            username = "wk"
            password_file = "\(directory)/pw"
            """))
        let cluster = try XCTUnwrap(configuration.cluster)
        XCTAssertEqual(cluster.password, "s3cret")
        XCTAssertFalse(DumpValue.object(cluster.describedFields).json.contains("s3cret"))
    }

    func testAFleetTaskWithoutACluster_isRefusedAtItsFleetKey() {
        assertSingleConfigError("""
            [[task]]
            name = "t"
            every = "1m"
            fleet = "one"
            command = ["/bin/true"]
            """, at: (4, 9), #"task "t": fleet = "one" needs a [cluster] section: the etcd cluster the hosts decide through"#)
    }

    func testAFleetTaskWithQueueOverlap_isRefused() {
        assertSingleConfigError("""
            [cluster]
            etcd = ["http://h:2379"]
            [[task]]
            name = "t"
            every = "1m"
            fleet = "one"
            overlap = "queue"
            command = ["/bin/true"]
            """, at: (7, 11),
            #"task "t": overlap = "queue" is not available with fleet = "one" (skip or allow): a fire waiting or replacing on one host would not be seen by the others"#)
    }

    func testAFleetWatchWithBatch_isRefused() {
        let diagnostics = configErrors("""
            [cluster]
            etcd = ["http://h:2379"]
            [[watch]]
            name = "w"
            path = "/tmp"
            fleet = "one"
            batch = true
            command = ["/bin/true", "{paths}"]
            """)
        XCTAssertTrue(diagnostics.contains { $0.message.contains("not available with batch") }, "\(diagnostics)")
    }

    static let certificate = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUXJ\n-----END CERTIFICATE-----\n"
    static let key = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49\n-----END PRIVATE KEY-----\n"

    /// Issue 35, item 8: what OpenSSL could never load is refused by check-config, at its
    /// line, instead of a daemon that then holds every fleet fire.
    func testATLSFileThatIsADirectoryDevNullOrNotPEM_isRefusedWithWhatItIs() throws {
        let directory = try makeScratchDirectory()
        FileManager.default.createFile(atPath: directory + "/cert.pem", contents: Data(Self.certificate.utf8))
        FileManager.default.createFile(atPath: directory + "/key.pem", contents: Data(Self.key.utf8))
        FileManager.default.createFile(atPath: directory + "/ca.der", contents: Data([0x30, 0x82, 0x01, 0x0a, 0x02]))
        FileManager.default.createFile(atPath: directory + "/empty.pem", contents: Data())
        func source(ca: String, cert: String = directory + "/cert.pem", key: String = directory + "/key.pem") -> String {
            "[cluster]\netcd = [\"https://h:2379\"]\nca_file = \"\(ca)\"\ncert_file = \"\(cert)\"\nkey_file = \"\(key)\"\n"
        }
        XCTAssertNotNil(parsedConfiguration(source(ca: directory + "/cert.pem")), "PEM files load")
        assertSingleConfigError(source(ca: directory), at: (3, 11),
                                "cluster.ca_file = \"\(directory)\" is a directory: give the CA certificate that signed etcd's in PEM form")
        assertSingleConfigError(source(ca: "/dev/null"), at: (3, 11),
                                "cluster.ca_file = \"/dev/null\" is not a regular file: give the CA certificate that signed etcd's in PEM form")
        assertSingleConfigError(source(ca: directory + "/ca.der"), at: (3, 11),
                                "cluster.ca_file = \"\(directory)/ca.der\" holds no PEM CERTIFICATE (-----BEGIN ...CERTIFICATE-----): give the CA certificate that signed etcd's in PEM form")
        assertSingleConfigError(source(ca: directory + "/cert.pem", cert: directory + "/empty.pem"), at: (4, 13),
                                "cluster.cert_file = \"\(directory)/empty.pem\" is empty: give the client certificate in PEM form")
        // A certificate given as the key: no private key in it.
        assertSingleConfigError(source(ca: directory + "/cert.pem", key: directory + "/cert.pem"), at: (5, 12),
                                "cluster.key_file = \"\(directory)/cert.pem\" holds no PEM PRIVATE KEY (-----BEGIN ...PRIVATE KEY-----): give the client's private key in PEM form")
    }

    func testAFleetTasksJitterComesFromItsNameAlone() {
        // Every host must compute the same instants: two schedulers with different machine
        // seeds give a fleet task the same offset.
        var settings = TaskSettings(name: "report", schedule: .every(.seconds(60)), job: JobSettings(command: .arguments(["/bin/true"])))
        settings.jitter = .seconds(30)
        settings.fleet = .one
        let offset = FleetJitter.offset(for: settings)
        XCTAssertEqual(offset, FleetJitter.offset(for: settings))
        XCTAssertLessThan(offset, .seconds(30))
        XCTAssertEqual(offset.nanosecondsClamped % 1_000_000, 0, "whole milliseconds: the instant names the key")
    }
}
