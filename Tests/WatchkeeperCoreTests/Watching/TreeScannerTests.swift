import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Real trees in a temporary directory. Root ignores directory modes, so listing errors are
/// made for real another way: a directory deleted between levels (ENOENT), a path longer
/// than PATH_MAX (ENAMETOOLONG), and a lowered RLIMIT_NOFILE (EMFILE).
final class TreeScannerTests: ScratchDirectoryTestCase {
    private var scanner: TreeScanner { TreeScanner(root: Array(directory.utf8)) }

    private func make(_ relative: String, file: Bool = true) throws {
        let path = directory + "/" + relative
        if file {
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("x".utf8)))
        } else {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
    }

    private func scanAll(_ scanner: TreeScanner, from start: [[UInt8]] = [[]]) -> (files: [String], summary: TreeScanner.Summary) {
        var files: [String] = []
        let summary = scanner.scan(from: start) { files.append(String(decoding: $0, as: UTF8.self)) }
        return (files.sorted(), summary)
    }

    // MARK: - Types

    func testScan_handsOutOnlyRegularFiles_countsEveryOtherType_andNeverFollowsSymlinks() throws {
        try make("file")
        try make("sub/inner")
        XCTAssertEqual(mkfifo(directory + "/fifo", 0o600), 0)
        XCTAssertEqual(symlink(directory + "/file", directory + "/link-to-file"), 0)
        XCTAssertEqual(symlink(directory + "/sub", directory + "/link-to-dir"), 0)
        XCTAssertEqual(symlink(directory + "/nowhere", directory + "/dangling"), 0)
        let socketDescriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(socketDescriptor, 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let socketPath = Array((directory + "/socket").utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: socketPath) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socketDescriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        XCTAssertEqual(bound, 0, String(cString: strerror(errno)))
        close(socketDescriptor)
        // Device nodes need CAP_MKNOD: /dev/null's and loop0's numbers. Without the
        // capability the test says so and checks the rest.
        let characterMade = mknod(directory + "/null-device", S_IFCHR | 0o600, dev_t((1 << 8) | 3)) == 0
        let blockMade = mknod(directory + "/block-device", S_IFBLK | 0o600, dev_t(7 << 8)) == 0
        if !characterMade || !blockMade {
            print("TreeScannerTests: mknod failed (\(String(cString: strerror(errno)))): device nodes not covered in this run")
        }

        let (files, summary) = scanAll(scanner)
        XCTAssertEqual(files, ["file", "sub/inner"], "link-to-dir/inner would mean a symlink was followed")
        XCTAssertEqual(summary.types[.regular], 2)
        XCTAssertEqual(summary.types[.directory], 1)
        XCTAssertEqual(summary.types[.symlink], 3)
        XCTAssertEqual(summary.types[.fifo], 1)
        XCTAssertEqual(summary.types[.socket], 1)
        XCTAssertEqual(summary.types[.characterDevice], characterMade ? 1 : 0)
        XCTAssertEqual(summary.types[.blockDevice], blockMade ? 1 : 0)
        XCTAssertEqual(summary.types.skipped, 5 + (characterMade ? 1 : 0) + (blockMade ? 1 : 0))
        XCTAssertEqual(summary.failures, [])
        XCTAssertEqual(summary.directoriesListed, 2)
    }

    func testLstatFallback_forDTUnknown_classifiesEachTypeLikeDType() throws {
        try make("file")
        try make("dir", file: false)
        XCTAssertEqual(mkfifo(directory + "/fifo", 0o600), 0)
        XCTAssertEqual(symlink(directory + "/dir", directory + "/link"), 0)
        XCTAssertNil(TreeScanner.EntryType(directoryEntryType: UInt8(DT_UNKNOWN)), "DT_UNKNOWN asks for an lstat")
        XCTAssertEqual(TreeScanner.EntryType(directoryEntryType: UInt8(DT_REG)), .regular)
        let types = ["file", "dir", "fifo", "link", "gone"].map { TreeScanner.lstatType(Array((directory + "/" + $0).utf8)) }
        XCTAssertEqual(types, [.regular, .directory, .fifo, .symlink, nil])
    }

    func testScan_aSymlinkedRoot_isFollowed_butNothingBelowIt() throws {
        try make("real/file")
        XCTAssertEqual(symlink(directory + "/real", directory + "/root-link"), 0)
        let (files, summary) = scanAll(TreeScanner(root: Array((directory + "/root-link").utf8)))
        XCTAssertEqual(files, ["file"])
        XCTAssertEqual(summary.failures, [])
    }

    // MARK: - Failures

    func testScan_aDirectoryDeletedBetweenLevels_isReportedWithENOENT_andTheRestIsScanned() throws {
        try make("doomed/file")
        try make("kept/file")
        var files: [String] = []
        let summary = scanner.scan(visit: { directory in
            if directory == Array("doomed".utf8) {
                XCTAssertEqual(unlink(self.directory + "/doomed/file"), 0)
                XCTAssertEqual(rmdir(self.directory + "/doomed"), 0)
            }
            return true
        }) { files.append(String(decoding: $0, as: UTF8.self)) }
        XCTAssertEqual(files, ["kept/file"])
        XCTAssertEqual(summary.failures, [.init(directory: Array("doomed".utf8), step: .open, errorNumber: ENOENT)])
        XCTAssertEqual(summary.directoriesListed, 2, "the root and kept")
    }

    func testScan_belowPATHMAX_reportsENAMETOOLONG_forTheFirstDirectoryTooDeepToOpen() throws {
        // 20 levels of 250-byte names: about 5,000 bytes, made with mkdirat/openat since no
        // path to the bottom fits in PATH_MAX (4,096).
        let name = String(repeating: "d", count: 250)
        var parent = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(parent, 0)
        var depth = 0
        for _ in 0..<20 {
            XCTAssertEqual(mkdirat(parent, name, 0o700), 0)
            let child = openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            close(parent)
            parent = child
            depth += 1
        }
        let bottom = openat(parent, "file", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(bottom, 0)
        close(bottom)
        close(parent)

        let (files, summary) = scanAll(scanner)
        XCTAssertEqual(files, [], "the file is below the directory that could not be opened")
        XCTAssertEqual(summary.failures.count, 1)
        let failure = try XCTUnwrap(summary.failures.first)
        XCTAssertEqual(failure.errorNumber, ENAMETOOLONG)
        XCTAssertGreaterThan(directory.utf8.count + 1 + failure.directory.count, Int(PATH_MAX) - 1)
        XCTAssertEqual(summary.failureCauses, [.init(errorNumber: ENAMETOOLONG, count: 1, example: failure.directory)])
        XCTAssertEqual(depth, 20)
    }

    func testScan_outOfFileDescriptors_reportsEMFILE_forEveryDirectoryItCouldNotOpen() throws {
        for name in ["a", "b", "c"] { try make("\(name)/file") }
        var saved = rlimit()
        XCTAssertEqual(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &saved), 0)
        // The lowest free descriptor is what open would return: a soft limit there makes the
        // next open fail. The limit is restored before any assertion can stop the test.
        let lowestFree = open("/dev/null", O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(lowestFree, 0)
        close(lowestFree)
        let failures: [TreeScanner.ListingFailure]
        do {
            var lowered = saved
            lowered.rlim_cur = rlim_t(lowestFree)
            XCTAssertEqual(setrlimit(Int32(RLIMIT_NOFILE.rawValue), &lowered), 0)
            defer { setrlimit(Int32(RLIMIT_NOFILE.rawValue), &saved) }
            failures = scanner.scan(file: { _ in }).failures
        }
        XCTAssertEqual(failures, [.init(directory: [], step: .open, errorNumber: EMFILE)], "the root itself could not be opened")
        let again = scanAll(scanner)
        XCTAssertEqual(again.files, ["a/file", "b/file", "c/file"], "the limit is back")
    }

    func testScan_aMissingRoot_isAFailure_notAnEmptyTree() {
        let summary = TreeScanner(root: Array((directory + "/missing").utf8)).scan(file: { _ in XCTFail("a file in a missing tree") })
        XCTAssertEqual(summary.failures, [.init(directory: [], step: .open, errorNumber: ENOENT)])
        XCTAssertEqual(summary.directoriesListed, 0)
    }

    func testFailureCauses_groupByErrno_mostFrequentFirst_withTheFirstDirectoryAsExample() {
        var summary = TreeScanner.Summary()
        summary.failures = [
            .init(directory: Array("x".utf8), step: .open, errorNumber: EACCES),
            .init(directory: Array("y".utf8), step: .open, errorNumber: ENOENT),
            .init(directory: Array("z".utf8), step: .read, errorNumber: EACCES),
        ]
        XCTAssertEqual(summary.failureCauses, [
            .init(errorNumber: EACCES, count: 2, example: Array("x".utf8)),
            .init(errorNumber: ENOENT, count: 1, example: Array("y".utf8)),
        ])
    }

    // MARK: - Levels, filters and budgets

    func testScan_aLevelOf200Directories_goesThroughTheParallelPath_andYieldsEveryFileOnce() throws {
        for index in 0..<200 {
            for file in 0..<3 { try make(String(format: "d%03d/f%d", index, file)) }
        }
        let (files, summary) = scanAll(scanner)
        XCTAssertEqual(summary.parallelRounds, 1, "the root alone is listed on this thread, the 200 in parallel")
        XCTAssertEqual(files.count, 600)
        XCTAssertEqual(Set(files).count, 600)
        XCTAssertEqual(files.first, "d000/f0")
        XCTAssertEqual(files.last, "d199/f2")
        XCTAssertEqual(summary.directoriesListed, 201)
    }

    func testScan_visitAndDescend_decideWhatIsListed_inLevelOrder() throws {
        try make("top")
        try make("a/mid")
        try make("a/deep/bottom")
        try make("skipped/file")
        var visited: [String] = []
        var files: [String] = []
        let summary = scanner.scan(
            visit: { directory in
                visited.append(String(decoding: directory, as: UTF8.self))
                return directory != Array("skipped".utf8)
            },
            descend: { $0 != Array("a/deep".utf8) }
        ) { files.append(String(decoding: $0, as: UTF8.self)) }
        XCTAssertEqual(visited.first, "")
        XCTAssertEqual(Set(visited.dropFirst()), ["a", "skipped"], "a/deep was not descended into, so never visited")
        XCTAssertEqual(files, ["top", "a/mid"], "breadth-first")
        XCTAssertEqual(summary.directoriesListed, 2)

        let flat = scanner.scan(descend: { _ in false }) { _ in }
        XCTAssertEqual(flat.directoriesListed, 1, "a non-recursive rule lists the root only")
    }

    func testBudgetedScan_stopsOnceTheDeadlinePasses_andResumingYieldsEveryFileExactlyOnce() throws {
        for top in 0..<6 {
            for inner in 0..<3 { try make("t\(top)/i\(inner)/file") }
            try make("t\(top)/file")
        }
        let expected = scanAll(scanner).files
        XCTAssertEqual(expected.count, 24)

        // A clock that moves one tick per reading: every round ends past a deadline one tick away.
        var tick = MonotonicInstant(nanoseconds: 0)
        let clock = { () -> MonotonicInstant in
            tick += .nanoseconds(1)
            return tick
        }
        var files: [String] = []
        var start: [[UInt8]] = [[]]
        var passes = 0
        repeat {
            passes += 1
            let summary = scanner.scan(from: start, until: tick + .nanoseconds(1), now: clock, roundLimit: 4) { files.append(String(decoding: $0, as: UTF8.self)) }
            XCTAssertEqual(summary.failures, [])
            start = summary.remaining
            XCTAssertEqual(summary.isComplete, start.isEmpty)
        } while !start.isEmpty && passes < 100
        XCTAssertEqual(files.sorted(), expected)
        XCTAssertEqual(files.count, Set(files).count)
        // The root alone, then 6 t* + 18 i* = 24 directories in rounds of 4, one round per pass.
        XCTAssertEqual(passes, 1 + 6)
    }

    func testBudgetedScan_withTimeLeft_finishesInOnePass() throws {
        try make("a/b/c/file")
        var files: [[UInt8]] = []
        let summary = scanner.scan(from: [[]], until: MonotonicInstant(nanoseconds: .max), roundLimit: 1) { files.append($0) }
        XCTAssertTrue(summary.isComplete)
        XCTAssertEqual(files, [Array("a/b/c/file".utf8)])
    }
}
