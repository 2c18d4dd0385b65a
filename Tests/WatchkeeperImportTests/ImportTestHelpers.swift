import XCTest

@testable import WatchkeeperCore
@testable import WatchkeeperImport

/// What an importer made of a source text, loaded back as check-config loads it.
struct Imported {
    var config: ImportedConfig
    var toml: String

    func entry(_ name: String, file: StaticString = #filePath, line: UInt = #line) -> ImportedEntry? {
        let found = config.entries.first { $0.name == name }
        if found == nil { XCTFail("no entry \(name) in:\n\(toml)", file: file, line: line) }
        return found
    }

    /// The configuration, failing the test with check-config's messages if it does not load.
    func loaded(file: StaticString = #filePath, line: UInt = #line) -> Configuration? {
        switch ConfigLoader.parse(source: toml, path: "/import.toml", environment: [:]) {
        case .success(let configuration): return configuration
        case .failure(let errors):
            XCTFail("check-config refuses the translation:\n\(toml)\n\(errors.description)", file: file, line: line)
            return nil
        }
    }
}

/// The keys only the parts merged with this one add (calendar, on_failure): tests of
/// translations that use them skip until the loader knows them.
func requireConfigKey(_ key: String) throws {
    guard ConfigLoader.acceptedKeys()["task"]?.contains(key) == true else {
        throw XCTSkip("this build's loader has no task key \"\(key)\" yet (added by another part of issue 26)")
    }
}

/// A table as a file holds it: with the newline its last line needs (`finalNewline: false`
/// for one without), read by `cron`'s rules.
func importCron(_ text: String, path: String = "/var/spool/cron/crontabs/root", system: Bool? = nil, mail: Bool = false,
                cron: CronFlavor = .debian, owner: String? = nil, asCronRuns: Bool = false, finalNewline: Bool = true,
                facts: CronFileFacts? = nil) -> Imported {
    var config = ImportedConfig()
    config.sources = [path]
    let complete = finalNewline && !text.isEmpty && !text.hasSuffix("\n") ? text + "\n" : text
    CrontabImporter(systemFormat: system ?? CrontabImporter.isSystemPath(path), flavor: cron, mail: mail, sendmailInstalled: false,
                    owner: owner, asCronRuns: asCronRuns)
        .importFile(path: path, text: complete, facts: facts, into: &config)
    return Imported(config: config, toml: config.toml())
}

func importIncron(_ text: String, path: String = "/etc/incron.d/test") -> Imported {
    var config = ImportedConfig()
    config.sources = [path]
    IncrontabImporter().importFile(path: path, text: text, into: &config)
    return Imported(config: config, toml: config.toml())
}
