// swift-tools-version:5.9
// TOMLKit 0.6.0 (https://github.com/LebJe/TOMLKit, MIT, see LICENSE) with its memory leaks
// fixed for watchkeeper, which parses its configuration again on every reload: see
// PATCHES.md. Only the two library targets; upstream's test and documentation
// dependencies are left out so the package builds offline.
import PackageDescription

let package = Package(
	name: "TOMLKit",
	products: [
		.library(name: "TOMLKit", targets: ["TOMLKit"]),
	],
	targets: [
		.target(
			name: "CTOML",
			cxxSettings: [
				.define("TOML_EXCEPTIONS", to: "1"),
			]
		),
		.target(
			name: "TOMLKit",
			dependencies: ["CTOML"]
		),
	],
	cLanguageStandard: .c99,
	cxxLanguageStandard: .cxx17
)
