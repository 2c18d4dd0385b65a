#if canImport(XCTest)
import Foundation
import WatchkeeperCore
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A network namespace of the test's own (`wk-test-<random>`) joined to this one by a veth
/// pair on a private /30 in 10.213.0.0/16 that nothing else on the machine uses: a process
/// started with `launcher` reaches this host only at `hostAddress`, and `cut()` takes the host
/// side of the link down, so that it reaches nothing until `heal()`.
///
/// What a cut looks like from inside: the namespace's side loses its carrier, its packets
/// go nowhere (ARP for hostAddress stays unanswered), so a new connection hangs until its
/// own timeout (after ~3 s of failed ARP, the kernel may refuse at once with "no route to
/// host" instead), and a connection already open stalls until heal(), when TCP retransmits
/// and carries on. Processes on the host still reach hostAddress (a local
/// address answers on any link state).
///
/// Needs root and iproute2's `ip netns`; the test is skipped with the reason otherwise.
/// `remove()` (and deinit) deletes the namespace, which takes the veth pair with it; stop
/// what runs inside first, or the namespace lives on (nameless) as long as it does.
public final class NetworkPartition {
    /// The namespace's name, under /run/netns.
    public let name: String
    public let hostInterface: String
    public let namespaceInterface: String
    /// This host's end of the link, for servers a process inside must reach (an etcd
    /// cluster's extraListenAddresses).
    public let hostAddress: String
    public let namespaceAddress: String
    public private(set) var isCut = false
    private var removed = false

    private static let ipPath = ([String])(["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]).first { access($0, X_OK) == 0 }
    private static let nsenterPath = ([String])(["/usr/bin/nsenter", "/bin/nsenter"]).first { access($0, X_OK) == 0 }

    /// A command the program to run inside is appended to (absolute paths, for posix_spawn,
    /// DaemonProcess's `launcher`): nsenter into the network namespace only, which execs the
    /// program under its own pid. Unlike `ip netns exec` it leaves the mount namespace alone:
    /// `ip netns exec` runs the program in a mount namespace of its own with a fresh sysfs
    /// mounted on /sys, in which /sys/fs/cgroup is empty (no cgroup2 for the daemon) and
    /// nothing the program mounts is seen by the test.
    public var launcher: [String] {
        if let nsenter = Self.nsenterPath { return [nsenter, "--net=/run/netns/\(name)", "--"] }
        return ipNetnsExecLauncher
    }

    /// `ip netns exec NAME`, with the mount namespace and sysfs of its own described above.
    public var ipNetnsExecLauncher: [String] { [Self.ipPath ?? "/usr/sbin/ip", "netns", "exec", name] }

    public init() throws {
        guard geteuid() == 0 else { throw XCTSkip("a network namespace needs root") }
        guard let ip = Self.ipPath else { throw XCTSkip("no ip command: apt-get install iproute2 (make deps does)") }
        let tag = EtcdTestCluster.randomHex(4)
        name = "wk-test-\(tag)"
        // IFNAMSIZ: at most 15 characters.
        hostInterface = "wkh\(tag)"
        namespaceInterface = "wkn\(tag)"
        let base = try Self.unusedSubnet()
        hostAddress = Self.dotted(base + 1)
        namespaceAddress = Self.dotted(base + 2)

        let added = Self.ip(["netns", "add", name])
        guard added.succeeded else {
            throw XCTSkip("unable to create a network namespace with `\(ip) netns add`: \(added.stderr)")
        }
        do {
            for step in [
                ["link", "add", hostInterface, "type", "veth", "peer", "name", namespaceInterface, "netns", name],
                ["address", "add", "\(hostAddress)/30", "dev", hostInterface],
                ["link", "set", hostInterface, "up"],
                ["-n", name, "address", "add", "\(namespaceAddress)/30", "dev", namespaceInterface],
                ["-n", name, "link", "set", namespaceInterface, "up"],
                ["-n", name, "link", "set", "lo", "up"],
            ] {
                let result = Self.ip(step)
                guard result.succeeded else { throw HarnessError("unable to set up \(name): ip \(step.joined(separator: " ")): \(result.stderr)") }
            }
            // Two tests that picked the same /30 at the same moment: the second one to look
            // sees two interfaces holding addresses in it.
            let holders = Self.ip(["-o", "-4", "address", "show"]).stdout.split(separator: "\n")
                .filter { $0.contains(" \(hostAddress)/") || $0.contains(" \(namespaceAddress)/") }
            guard holders.count == 1 else { throw HarnessError("unable to own \(hostAddress)/30: also on \(holders)") }
            try waitForCarrier()
        } catch {
            remove()
            throw error
        }
    }

    deinit {
        remove()
    }

    /// The host side of the link down: nothing inside reaches anything outside.
    public func cut() throws {
        let result = Self.ip(["link", "set", hostInterface, "down"])
        guard result.succeeded else { throw HarnessError("unable to cut \(hostInterface): \(result.stderr)") }
        isCut = true
    }

    /// The link up again; returns once the namespace's side has its carrier back.
    ///
    /// Both sides' neighbour (ARP) entries are flushed: an entry left INCOMPLETE by a
    /// connection tried during the cut keeps its 1 s retransmit timer, and a new connection
    /// queued behind it waited up to 1.5 s after the heal (an etcdctl with a 2 s dial timeout
    /// across three endpoints then failed); with the entries gone it connects in ~20 ms. A
    /// connection attempt already in flight still waits for its SYN to be sent again.
    public func heal() throws {
        let result = Self.ip(["link", "set", hostInterface, "up"])
        guard result.succeeded else { throw HarnessError("unable to heal \(hostInterface): \(result.stderr)") }
        try waitForCarrier()
        _ = Self.ip(["-n", name, "neighbour", "flush", "dev", namespaceInterface])
        _ = Self.ip(["neighbour", "flush", "dev", hostInterface])
        isCut = false
    }

    /// `arguments` run inside the namespace (the first one an absolute path), killed after
    /// `timeout` seconds (times testDeadlineScale).
    public func run(_ arguments: [String], timeout: TimeInterval) -> CommandResult {
        runCommand(launcher + arguments, timeout: timeout)
    }

    public func remove() {
        guard !removed else { return }
        removed = true
        _ = Self.ip(["netns", "delete", name])
        // Gone with its peer already, unless the namespace outlives its name (a process in it).
        _ = Self.ip(["link", "delete", hostInterface])
    }

    private func waitForCarrier() throws {
        let up = waitFor(5) {
            Self.ip(["-n", self.name, "-o", "link", "show", self.namespaceInterface]).stdout.contains("LOWER_UP")
        }
        guard up else { throw HarnessError("unable to bring up the link to \(name): \(namespaceInterface) has no carrier after 5 s") }
    }

    private static func ip(_ arguments: [String]) -> CommandResult {
        runCommand([ipPath ?? "/usr/sbin/ip"] + arguments, timeout: 10)
    }

    /// A /30 in 10.213.0.0/16 that no address or route on this host overlaps.
    private static func unusedSubnet() throws -> UInt32 {
        let listed = ip(["-o", "-4", "address", "show"]).stdout + "\n" + ip(["-4", "route", "show", "table", "all"]).stdout
        // Every "a.b.c.d/len" and bare "a.b.c.d" mentioned, as (network, mask).
        let taken: [(UInt32, UInt32)] = listed.split(whereSeparator: { " \n".contains($0) }).compactMap { word in
            let parts = word.split(separator: "/")
            guard let address = parts.first.flatMap({ parse(String($0)) }) else { return nil }
            let length = parts.count == 2 ? min(32, Int(parts[1]) ?? 32) : 32
            let mask: UInt32 = length == 0 ? 0 : ~UInt32(0) << (32 - length)
            return (address & mask, mask)
        }
        for _ in 0..<64 {
            let base = (10 << 24) | (213 << 16) | (UInt32.random(in: 0...255) << 8) | (UInt32.random(in: 0...63) << 2)
            // Overlap: either network contains the other's base. 0.0.0.0/0 (default) is no claim.
            let clash = taken.contains { network, mask in
                mask != 0 && ((base & mask) == network || (network & 0xffff_fffc) == base)
            }
            if !clash { return base }
        }
        throw HarnessError("unable to find a free /30 in 10.213.0.0/16")
    }

    private static func parse(_ text: String) -> UInt32? {
        let octets = text.split(separator: ".", omittingEmptySubsequences: false).compactMap { UInt8($0) }
        guard octets.count == 4, text.split(separator: ".", omittingEmptySubsequences: false).count == 4 else { return nil }
        return octets.reduce(0) { $0 << 8 | UInt32($1) }
    }

    private static func dotted(_ address: UInt32) -> String {
        [24, 16, 8, 0].map { String((address >> UInt32($0)) & 0xff) }.joined(separator: ".")
    }
}
#endif
