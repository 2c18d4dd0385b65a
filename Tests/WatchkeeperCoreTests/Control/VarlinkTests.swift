import XCTest
@testable import WatchkeeperCore

/// The Varlink messages and the service interface every Varlink client starts with.
final class VarlinkTests: XCTestCase {
    func testCallDecoding_readsMethodParametersOnewayAndMore() throws {
        let call = try VarlinkCall.decode(Array(#"{"method":"io.watchkeeper.Control.Trigger","parameters":{"task":"backup"},"more":true}"#.utf8)).get()
        XCTAssertEqual(call.interface, "io.watchkeeper.Control")
        XCTAssertEqual(call.methodName, "Trigger")
        XCTAssertEqual(call.parameters["task"], .string("backup"))
        XCTAssertTrue(call.more)
        XCTAssertFalse(call.oneway)
    }

    func testCallDecoding_refusesWhatIsNotACall() {
        func error(_ text: String) -> VarlinkError? {
            if case .failure(let error) = VarlinkCall.decode(Array(text.utf8)) { return error }
            return nil
        }
        XCTAssertEqual(error("not json")?.name, "io.watchkeeper.Control.InvalidMessage")
        XCTAssertEqual(error("[1]")?.name, "io.watchkeeper.Control.InvalidMessage")
        XCTAssertEqual(error(#"{"parameters":{}}"#)?.name, "io.watchkeeper.Control.InvalidMessage")
        XCTAssertEqual(error(#"{"method":"a.B","parameters":[]}"#), .invalidParameter("parameters"))
    }

    func testEncodedMessages_endWithOneNUL_andRoundTrip() throws {
        let call = VarlinkCall(method: "io.watchkeeper.Control.Cancel", parameters: [.init("run_id", .string("00000000000000ff"))])
        XCTAssertEqual(call.encoded.last, 0)
        XCTAssertEqual(call.encoded.filter { $0 == 0 }.count, 1)
        XCTAssertEqual(try VarlinkCall.decode(call.encoded.dropLast()).get(), call)
        let error = VarlinkReply.error(ControlInterface.ErrorName.noSuchRun.error([.init("run_id", .string("x"))]))
        XCTAssertEqual(try VarlinkReply.decode(error.encoded.dropLast()), error)
        let reply = VarlinkReply.parameters([.init("generation", .int(3))])
        XCTAssertEqual(String(decoding: reply.encoded.dropLast(), as: UTF8.self), #"{"parameters":{"generation":3}}"#)
    }

    func testServiceInterface_describesBothInterfaces_andRefusesOthers() throws {
        let info = try ControlInterface.serviceReply(VarlinkCall(method: "org.varlink.service.GetInfo")).get()
        XCTAssertEqual(DumpValue.object(info)["interfaces"], .array([.string("org.varlink.service"), .string("io.watchkeeper.Control")]))
        let description = try ControlInterface.serviceReply(VarlinkCall(method: "org.varlink.service.GetInterfaceDescription",
                                                                        parameters: [.init("interface", .string("io.watchkeeper.Control"))])).get()
        XCTAssertEqual(DumpValue.object(description)["description"]?.stringValue, ControlInterface.description)
        XCTAssertEqual(ControlInterface.serviceReply(VarlinkCall(method: "org.varlink.service.GetInterfaceDescription",
                                                                 parameters: [.init("interface", .string("com.example.X"))])),
                       .failure(.interfaceNotFound("com.example.X")))
    }

    /// What the description promises is what the code answers: every method and error.
    func testInterfaceDescription_declaresEveryMethodAndError() {
        let lines = ControlInterface.description.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        let methods = Set(lines.filter { $0.hasPrefix("method ") }.map { String($0.dropFirst(7).prefix { $0 != "(" }) })
        XCTAssertEqual(methods, Set(ControlInterface.Method.allCases.map(\.rawValue)))
        let errors = Set(lines.filter { $0.hasPrefix("error ") }.map { String($0.dropFirst(6).prefix { $0 != " " && $0 != "(" }) })
        XCTAssertEqual(errors, Set(ControlInterface.ErrorName.allCases.map(\.rawValue)))
    }
}
