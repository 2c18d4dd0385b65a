// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "watchkeeper",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "watchkeeper", targets: ["watchkeeper"]),
    ],
    dependencies: [
        // ArgumentParser 1.8.2 without FoundationEssentials, which linked 140 of its objects and
        // the regex runtime into the daemon (Vendor/swift-argument-parser/PATCHES.md).
        .package(path: "Vendor/swift-argument-parser"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        // TOMLKit 0.6.0 with its leaks fixed (Vendor/TOMLKit/PATCHES.md).
        .package(path: "Vendor/TOMLKit"),
        // Errno and FileDescriptor: one typed error for every syscall (System/).
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        // Prometheus metrics (Metrics/): the engine records through the swift-metrics API,
        // swift-prometheus keeps the values and writes the text exposition format.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    targets: [
        // The syscalls and kernel constants Glibc does not wrap (pidfd, statx, sendmmsg).
        .systemLibrary(name: "CWatchkeeperSystem"),
        // systemd's notification and journal protocols written natively, and sd-journal for
        // `watchkeeper logs` through dlopen: the daemon maps no libsystemd (wk_systemd.h).
        .target(name: "CWatchkeeperSystemd"),
        // Process spawning in C: fork/exec with setsid, credentials, an empty signal mask,
        // default dispositions and closed fds, none of which posix_spawn or Foundation.Process
        // offers all together (docs/architecture.md).
        .target(name: "CWatchkeeperSpawn"),
        // TLS for the etcd client: OpenSSL 3 through dlopen, on first use only, so that a
        // daemon without TLS maps none of it and the build needs no libssl-dev (tls.c).
        .target(name: "CWatchkeeperTLS"),
        // The system's SQLite for the task state and file ledger (Storage/TaskStore.swift):
        // the C API directly, no wrapper package to build in CI (Debian's libsqlite3-dev).
        // No pkgConfig: its -L/usr/lib/x86_64-linux-gnu would come before the build directory,
        // where `make release` puts the libsqlite3.a it compiles from Vendor/SQLite (the same
        // source, a section per function) so that the release binary links SQLite statically
        // (docs/measurements/idle-memory.md); sqlite3.h is in /usr/include.
        .systemLibrary(name: "CSQLite"),
        .target(
            name: "WatchkeeperCore",
            dependencies: [
                "CWatchkeeperSystem",
                "CWatchkeeperSystemd",
                "CWatchkeeperSpawn",
                "CWatchkeeperTLS",
                "CSQLite",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "TOMLKit", package: "TOMLKit"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        // `watchkeeper import` (cron, incron, systemd units to a configuration): a tool of the
        // CLI, not part of the daemon's library.
        .target(name: "WatchkeeperImport", dependencies: ["WatchkeeperCore"]),
        .executableTarget(
            name: "watchkeeper",
            dependencies: [
                "WatchkeeperCore",
                "WatchkeeperImport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "watchkeeper-bench",
            dependencies: ["WatchkeeperCore"]
        ),
        .executableTarget(name: "inotify-spawn-baseline", path: "Sources/inotify-spawn-baseline"),
        // libFuzzer harnesses for the parsers of outside input (`make fuzz`); in an ordinary
        // build, a tool that replays the kept seeds and crashes (Tests/fuzz/).
        .executableTarget(
            name: "watchkeeper-fuzz",
            dependencies: ["WatchkeeperCore"]
        ),
        // The fleet's history checker (issue 35): reads what jobs and the fault injector
        // recorded and finds overlapping runs, runs after an ok one, and items never run.
        // Used by the simulation in memory and, through watchkeeper-fleet-check, by the
        // nemesis against real daemons. Not linked into the daemon.
        .target(name: "FleetCheck", dependencies: ["WatchkeeperCore"]),
        .executableTarget(name: "watchkeeper-fleet-check", dependencies: ["FleetCheck", "WatchkeeperCore"]),
        // The fleet's deterministic simulation (issue 35): the daemon's own fleet code
        // (FleetMember, FleetFires, FleetStarts) against a simulated etcd and clock, under
        // seeded faults, every history read by FleetCheck. Not linked into the daemon;
        // `watchkeeper-sim` runs or replays seeds, Tests/FleetSimulationTests runs 10,000.
        .target(
            name: "FleetSimulation",
            dependencies: ["WatchkeeperCore", "FleetCheck", .product(name: "Logging", package: "swift-log")],
            // Optimized even in debug builds: make test runs 10,000 seeds of it.
            swiftSettings: [.unsafeFlags(["-O"])]
        ),
        .executableTarget(name: "watchkeeper-sim", dependencies: ["FleetSimulation"]),
        // What both test targets share: scratch directories, polling with a deadline, a
        // recorder for events delivered on another queue, configuration and time zone
        // fixtures. A regular target, so `swift build` compiles it too: its files are wrapped
        // in `#if canImport(XCTest)` because `--static-swift-stdlib` (make release) has no
        // XCTest module, and it uses WatchkeeperCore's public API only, because a release
        // build is not compiled for `@testable import`.
        .target(
            name: "WatchkeeperTestSupport",
            dependencies: ["WatchkeeperCore", "CWatchkeeperSystem"],
            path: "Tests/WatchkeeperTestSupport"
        ),
        .testTarget(
            name: "WatchkeeperCoreTests",
            dependencies: [
                "WatchkeeperCore",
                "WatchkeeperTestSupport",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .testTarget(
            name: "WatchkeeperImportTests",
            dependencies: ["WatchkeeperImport", "WatchkeeperCore", "WatchkeeperTestSupport"]
        ),
        .testTarget(
            name: "FleetCheckTests",
            dependencies: ["FleetCheck", "WatchkeeperCore"]
        ),
        .testTarget(
            name: "FleetSimulationTests",
            dependencies: ["FleetSimulation", "FleetCheck", "WatchkeeperCore", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(
            name: "WatchkeeperIntegrationTests",
            dependencies: [
                "WatchkeeperCore", "WatchkeeperTestSupport", "FleetCheck",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ArgumentParserToolInfo", package: "swift-argument-parser"),
            ]
        ),
    ]
)
