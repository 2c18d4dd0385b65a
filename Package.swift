// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "watchkeeper",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "watchkeeper", targets: ["watchkeeper"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
    ],
    targets: [
        // libsystemd (journal, sd_notify) plus the syscalls Glibc does not wrap (pidfd).
        .systemLibrary(
            name: "CWatchkeeperSystem",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        .target(
            name: "WatchkeeperCore",
            dependencies: [
                "CWatchkeeperSystem",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "TOMLKit", package: "TOMLKit"),
            ]
        ),
        .executableTarget(
            name: "watchkeeper",
            dependencies: [
                "WatchkeeperCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "watchkeeper-bench",
            dependencies: ["WatchkeeperCore"]
        ),
        .testTarget(
            name: "WatchkeeperCoreTests",
            dependencies: ["WatchkeeperCore"]
        ),
        .testTarget(
            name: "WatchkeeperIntegrationTests",
            dependencies: ["WatchkeeperCore"]
        ),
    ]
)
