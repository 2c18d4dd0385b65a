// swift-tools-version:6.0
// swift-argument-parser 1.8.2 (436bde4bb9489201ca6662f5cf94ec45fa8e244e) without
// FoundationEssentials (PATCHES.md): the two library targets, no plugins, tests or docs.

import PackageDescription

let package = Package(
  name: "swift-argument-parser",
  products: [
    .library(name: "ArgumentParser", targets: ["ArgumentParser"]),
    .library(name: "ArgumentParserToolInfo", targets: ["ArgumentParserToolInfo"]),
  ],
  targets: [
    .target(name: "ArgumentParser", dependencies: ["ArgumentParserToolInfo"]),
    .target(name: "ArgumentParserToolInfo"),
  ]
)
