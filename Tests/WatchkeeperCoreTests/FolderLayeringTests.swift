import Foundation
import XCTest

/// The folders of Sources/WatchkeeperCore are layers (docs/architecture.md, "Layers"): a
/// file may name the types of its own folder and of the folders below it, never of one
/// above. So no two folders use each other, a newcomer can read the core from the bottom
/// up, and a lower layer that needs something of a higher one says so with a protocol of
/// its own (`ControlBackend`, `FleetJobStarts`, `CgroupRemovalContext`) that the higher one
/// implements.
///
/// The check is textual and rough, like RawErrnoTests: comments and strings are blanked,
/// every type declared at the top of a file (class, struct, enum, protocol, actor,
/// typealias) belongs to its folder, and every capitalised word of a file that is the name
/// of another folder's type is a use of that folder.
final class FolderLayeringTests: XCTestCase {
    /// From the bottom up: each folder may use the ones before it.
    static let layers = [
        "Support", "System", "Signals", "Systemd", "Logging", "Scheduling", "Config", "Diagnostics", "Control",
        "Containment", "Jobs", "Cluster", "Storage", "Tasks", "Watching", "Metrics", "Daemon",
    ]

    func testEveryFolderOfTheCore_usesOnlyTheFoldersBelowIt() throws {
        let core = RawErrnoTests.repositoryRoot.appendingPathComponent("Sources/WatchkeeperCore")
        var sources: [String: [String]] = [:]
        for file in try RawErrnoTests.swiftFiles(under: core) {
            let folder = String(file.path.dropFirst(core.path.count + 1).prefix { $0 != "/" })
            sources[folder, default: []].append(try String(contentsOf: file, encoding: .utf8))
        }
        XCTAssertGreaterThan(sources.count, 10, "the sources were not found under \(core.path)")
        XCTAssertEqual(Set(sources.keys).subtracting(Self.layers).sorted(), [],
                       "folders without a place in FolderLayeringTests.layers (and docs/architecture.md's layers)")
        let violations = Self.violations(sources: sources, layers: Self.layers)
        XCTAssertTrue(violations.isEmpty, """
            a folder names the types of a folder above it (move the type down to where both \
            may use it, or give the lower folder a protocol the higher one implements):
            \(violations.joined(separator: "\n"))
            """)
    }

    func testTheCheckSeesAUseUpward_andNotComments_stringsOrItsOwnNames() {
        let sources = [
            "Low": ["public struct Base {}\nfinal class Helper { struct Inner {} }\n// Top in a comment\nlet s = \"Top\""],
            "High": ["struct Top { let base: Base }\nprotocol Seam {}"],
        ]
        XCTAssertEqual(Self.violations(sources: sources, layers: ["Low", "High"]), [])
        let upward = ["Low": sources["Low"]! + ["extension Helper { func f(_ seam: any Seam) {} }"], "High": sources["High"]!]
        XCTAssertEqual(Self.violations(sources: upward, layers: ["Low", "High"]), ["Low uses High: Seam"])
        XCTAssertEqual(Self.violations(sources: upward, layers: ["High", "Low"]), ["High uses Low: Base"])
    }

    /// Each use of a folder at the same place in `layers` or above, as "A uses B: T, U".
    static func violations(sources: [String: [String]], layers: [String]) -> [String] {
        let declaration = /^(?:(?:public|package|internal|private|fileprivate|final|open|indirect|@\w+)\s+)*(?:class|struct|enum|protocol|actor|typealias)\s+([A-Z]\w*)/.anchorsMatchLineEndings()
        let code = sources.mapValues { $0.map(RawErrnoTests.blankingCommentsAndStrings) }
        var owners: [String: Set<String>] = [:]
        for (folder, texts) in code {
            for text in texts {
                for match in text.matches(of: declaration) { owners[String(match.1), default: []].insert(folder) }
            }
        }
        let rank = Dictionary(uniqueKeysWithValues: layers.enumerated().map { ($1, $0) })
        var uses: [String: [String: Set<String>]] = [:]
        for (folder, texts) in code {
            for text in texts {
                for match in text.matches(of: /\b[A-Z]\w*\b/) {
                    let name = String(match.0)
                    guard let declaredIn = owners[name], !declaredIn.contains(folder) else { continue }
                    for other in declaredIn where (rank[other] ?? .max) >= (rank[folder] ?? .max) {
                        uses[folder, default: [:]][other, default: []].insert(name)
                    }
                }
            }
        }
        return uses.keys.sorted().flatMap { folder in
            uses[folder]!.keys.sorted().map { "\(folder) uses \($0): \(uses[folder]![$0]!.sorted().joined(separator: ", "))" }
        }
    }
}
