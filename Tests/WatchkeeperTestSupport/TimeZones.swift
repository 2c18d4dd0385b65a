#if canImport(XCTest)
import WatchkeeperCore
import XCTest

extension XCTestCase {
    /// The system's rules for `identifier`; a zone that does not load fails the test at the
    /// caller's line with the loader's message, as well as throwing.
    public func zone(_ identifier: String, file: StaticString = #filePath, line: UInt = #line) throws -> TimeZoneRules {
        do {
            return try TimeZoneRules.load(identifier: identifier)
        } catch {
            XCTFail("\(error)", file: file, line: line)
            throw error
        }
    }
}
#endif
