import XCTest

@testable import WatchkeeperCore

final class Base64Tests: XCTestCase {
    func testEncodesWithPaddingLikeRFC4648() {
        XCTAssertEqual(Base64.encode(""), "")
        XCTAssertEqual(Base64.encode("f"), "Zg==")
        XCTAssertEqual(Base64.encode("fo"), "Zm8=")
        XCTAssertEqual(Base64.encode("foo"), "Zm9v")
        XCTAssertEqual(Base64.encode("foobar"), "Zm9vYmFy")
    }

    func testDecodesWhatItEncodesAndTheURLAlphabet() {
        for text in ["", "a", "ab", "abc", "/watchkeeper/tasks/x/fires/2026", "\u{e9}t\u{e9}"] {
            XCTAssertEqual(Base64.decodeString(Base64.encode(text)), text)
        }
        XCTAssertEqual(Base64.decode("-_8="), [0xfb, 0xff])
    }

    func testRefusesWhatIsNotBase64() {
        XCTAssertNil(Base64.decode("Zm9v!"))
        XCTAssertNil(Base64.decode("Zg==Zg"))
    }
}

final class EtcdEndpointTests: XCTestCase {
    func testReadsSchemeHostAndPort() throws {
        XCTAssertEqual(try EtcdEndpoint.parse("http://127.0.0.1:2379"), EtcdEndpoint(secure: false, host: "127.0.0.1", port: 2379))
        XCTAssertEqual(try EtcdEndpoint.parse("https://etcd-1.example/"), EtcdEndpoint(secure: true, host: "etcd-1.example", port: 2379))
        XCTAssertEqual(try EtcdEndpoint.parse("http://[::1]:12379"), EtcdEndpoint(secure: false, host: "::1", port: 12379))
        XCTAssertEqual(try EtcdEndpoint.parse("http://[::1]:12379").description, "http://[::1]:12379")
    }

    func testRefusesWhatIsNotAClientURL() {
        XCTAssertThrowsError(try EtcdEndpoint.parse("127.0.0.1:2379")) { XCTAssertEqual($0 as? EtcdEndpoint.ParseError, .scheme) }
        XCTAssertThrowsError(try EtcdEndpoint.parse("http://h:0")) { XCTAssertEqual($0 as? EtcdEndpoint.ParseError, .port) }
        XCTAssertThrowsError(try EtcdEndpoint.parse("http://h:2379/v3")) { XCTAssertEqual($0 as? EtcdEndpoint.ParseError, .path) }
        XCTAssertThrowsError(try EtcdEndpoint.parse("http://user@h")) { XCTAssertEqual($0 as? EtcdEndpoint.ParseError, .path) }
        XCTAssertThrowsError(try EtcdEndpoint.parse("http://:2379")) { XCTAssertEqual($0 as? EtcdEndpoint.ParseError, .host) }
    }
}

final class HTTPResponseParserTests: XCTestCase {
    private func feedByteByByte(_ text: String) throws -> [HTTPResponseParser.Event] {
        var parser = HTTPResponseParser(maxBody: 1024)
        var events: [HTTPResponseParser.Event] = []
        for byte in text.utf8 { events += try parser.feed([byte]) }
        return events
    }

    private func body(_ events: [HTTPResponseParser.Event]) -> String {
        String(decoding: events.flatMap { event -> [UInt8] in if case .body(let bytes) = event { return bytes } else { return [] } }, as: UTF8.self)
    }

    func testAContentLengthBodyEndsAtItsLengthWhateverTheSplits() throws {
        let events = try feedByteByByte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}")
        XCTAssertEqual(events.first, .head(status: 200))
        XCTAssertEqual(events.last, .end)
        XCTAssertEqual(body(events), "{\"a\":1}")
    }

    func testAChunkedBodyIsDechunkedWithExtensionsAndTrailers() throws {
        let events = try feedByteByByte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\nX-Trailer: y\r\n\r\n")
        XCTAssertEqual(body(events), "{\"a\":1}")
        XCTAssertEqual(events.last, .end)
    }

    func testAnErrorStatusIsReadLikeAnyOther() throws {
        var parser = HTTPResponseParser(maxBody: 1024)
        let events = try parser.feed(Array("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}".utf8))
        XCTAssertEqual(events, [.head(status: 503), .body(Array("{}".utf8)), .end])
        XCTAssertFalse(parser.keepAlive)
    }

    func testABodyOverTheLimitIsRefused() {
        var parser = HTTPResponseParser(maxBody: 4)
        XCTAssertThrowsError(try parser.feed(Array("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n".utf8)))
        var chunked = HTTPResponseParser(maxBody: 4)
        XCTAssertThrowsError(try chunked.feed(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n".utf8)))
    }

    func testAHeadThatNeverEndsIsRefusedAtItsBound() {
        var parser = HTTPResponseParser(maxBody: 4)
        XCTAssertThrowsError(try parser.feed(Array("HTTP/1.1 200 OK\r\n".utf8) + Array(repeating: UInt8(ascii: "x"), count: 20_000)))
    }

    func testGarbageIsNotAResponse() {
        var parser = HTTPResponseParser(maxBody: 4)
        XCTAssertThrowsError(try parser.feed(Array("SSH-2.0-OpenSSH\r\n\r\n".utf8)))
    }
}

final class JSONObjectSplitterTests: XCTestCase {
    func testSplitsConcatenatedObjectsAcrossArbitraryPieces() {
        let stream = #"{"result":{"a":"}{"}}"# + "\n" + #"{"result":{"b":"\"}"}}{"c":1}"#
        var splitter = JSONObjectSplitter(maxObject: 1024)
        var objects: [String] = []
        for byte in stream.utf8 {
            objects += splitter.feed([byte]).objects.map { String(decoding: $0, as: UTF8.self) }
        }
        XCTAssertEqual(objects, [#"{"result":{"a":"}{"}}"#, #"{"result":{"b":"\"}"}}"#, #"{"c":1}"#])
    }

    func testAnObjectOverTheBoundIsSaid() {
        var splitter = JSONObjectSplitter(maxObject: 8)
        XCTAssertTrue(splitter.feed(Array(#"{"aaaaaaaaaaaa"#.utf8)).tooLarge)
    }
}
