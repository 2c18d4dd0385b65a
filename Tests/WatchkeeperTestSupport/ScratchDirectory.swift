#if canImport(XCTest)
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A test case whose every test gets a fresh, empty directory of its own, mode 0700 (mkdtemp's),
/// named after the test class so that a leftover says whose it is. Subclasses that override
/// setUp or tearDown call super first in setUp and last in tearDown.
open class ScratchDirectoryTestCase: XCTestCase {
    /// The test's directory: an absolute path without a trailing slash.
    public private(set) var directory = ""

    override open func setUpWithError() throws {
        try super.setUpWithError()
        directory = try createScratchDirectory(for: self)
    }

    override open func tearDownWithError() throws {
        try removeScratchDirectory(directory)
        try super.tearDownWithError()
    }
}

extension XCTestCase {
    /// A fresh directory like ScratchDirectoryTestCase's, for tests that need more than one
    /// or only some do; removed when the test ends.
    public func makeScratchDirectory(file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let path = try createScratchDirectory(for: self)
        addTeardownBlock {
            XCTAssertNoThrow(try removeScratchDirectory(path), file: file, line: line)
        }
        return path
    }
}

/// Removes a tree with rm -rf, which walks by descriptor, so paths longer than PATH_MAX go
/// too (FileManager's removal fails on them with ENAMETOOLONG).
public func removeTree(_ path: String) throws {
    let remove = Process()
    remove.executableURL = URL(fileURLWithPath: "/bin/rm")
    remove.arguments = ["-rf", "--", path]
    try remove.run()
    remove.waitUntilExit()
    guard remove.terminationReason == .exit, remove.terminationStatus == 0 else {
        throw ScratchDirectoryError(message: "unable to remove \(path): rm -rf exited with \(remove.terminationStatus)")
    }
}

public struct ScratchDirectoryError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

private func createScratchDirectory(for test: XCTestCase) throws -> String {
    var template = Array((NSTemporaryDirectory() + "watchkeeper-\(type(of: test))-XXXXXX").utf8CString)
    guard let made = mkdtemp(&template) else {
        throw ScratchDirectoryError(message: "unable to create a scratch directory in \(NSTemporaryDirectory()): \(String(cString: strerror(errno)))")
    }
    return String(cString: made)
}

/// A test may leave its directory without write or search permission for its owner (to make
/// a store read-only); mode 0700 is restored first so the removal does not fail for a
/// non-root user.
private func removeScratchDirectory(_ path: String) throws {
    guard !path.isEmpty else { return }
    chmod(path, 0o700)
    try removeTree(path)
}
#endif
