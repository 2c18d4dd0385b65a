import Foundation
import XCTest

/// No descriptor that can hang up is a dispatch read or write source (issue 36). When one
/// reports EPOLLHUP, libdispatch's epoll backend deletes its source from the source's own
/// queue while its manager thread is still delivering the event, and the manager thread
/// finalizes it a second time: SIGILL ("Source finalized twice", a connect/close flood on
/// the control socket did it). Sockets (control clients, etcd connections), pipes and
/// pidfds go into a queue's own epoll instead (DescriptorPoller).
///
/// Each file that may make such a source says how many and why its descriptors never hang
/// up; a new one anywhere fails here until it is moved to a DescriptorPoller or added with
/// its reason. Textual, like RawErrnoTests: comments and strings are blanked first.
final class DispatchSourceDescriptorTests: XCTestCase {
    /// File (under Sources/WatchkeeperCore) → sources it makes, and why none can hang up.
    static let allowed: [String: (count: Int, why: String)] = [
        "System/OwnedFileDescriptor.swift": (2, "makeReadSource itself (its declaration and its one DispatchSource), used only by the files below"),
        "System/DescriptorPoller.swift": (1, "its epoll instance: an epoll fd reports readable, never a hang-up"),
        "Scheduling/ClockChangeWatcher.swift": (1, "a timerfd (TFD_TIMER_CANCEL_ON_SET)"),
        "Control/ControlListener.swift": (1, "the listening socket: no peer can shut both of its directions"),
    ]

    func testOnlyDescriptorsThatCannotHangUpAreDispatchSources() throws {
        let sources = RawErrnoTests.repositoryRoot.appendingPathComponent("Sources/WatchkeeperCore")
        let files = try RawErrnoTests.swiftFiles(under: sources)
        XCTAssertGreaterThan(files.count, 50, "the sources were not found under \(sources.path)")
        var found: [String: [String]] = [:]
        for match in try RawErrnoTests.lines(of: files, where: Self.makesDescriptorSource) {
            let relative = String(match.file.dropFirst("Sources/WatchkeeperCore/".count))
            found[relative, default: []].append("\(match.file):\(match.line): \(match.text)")
        }
        var unexpected: [String] = []
        for (file, lines) in found.sorted(by: { $0.key < $1.key }) where lines.count > (Self.allowed[file]?.count ?? 0) {
            unexpected += lines
        }
        XCTAssertTrue(unexpected.isEmpty, """
            dispatch read or write sources on descriptors not known to be safe from hang-ups: a socket, \
            pipe or pidfd goes into a DescriptorPoller (libdispatch crashes on EPOLLHUP); if this one \
            can never hang up, add it with its reason to DispatchSourceDescriptorTests.allowed:
            \(unexpected.joined(separator: "\n"))
            """)
    }

    func testTheCheckSeesEveryWayToMakeOne() {
        XCTAssertTrue(Self.makesDescriptorSource("let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)"))
        XCTAssertTrue(Self.makesDescriptorSource("writer = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: q)"))
        XCTAssertTrue(Self.makesDescriptorSource("reader = owned.makeReadSource(queue: queue)"))
        XCTAssertTrue(Self.makesDescriptorSource("let channel = DispatchIO(type: .stream, fileDescriptor: fd, queue: q) { _ in }"))
        XCTAssertFalse(Self.makesDescriptorSource("let timer = DispatchSource.makeTimerSource(queue: queue.queue)"))
        XCTAssertFalse(Self.makesDescriptorSource("let source = DispatchSource.makeSignalSource(signal: signal, queue: queue.queue)"))
        XCTAssertFalse(Self.makesDescriptorSource("poller.watch(fd, owner: \"control\", target: \"x\") { _ in }"))
    }

    static func makesDescriptorSource(_ line: String) -> Bool {
        line.range(of: #"\bmake(Read|Write)Source\(|\bDispatchIO\("#, options: .regularExpression) != nil
    }
}
