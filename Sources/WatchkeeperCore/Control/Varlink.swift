/// The Varlink wire protocol (https://varlink.org), which systemd's own services speak:
/// each message is one JSON object followed by a NUL byte. A call names
/// `interface.Method` and carries `parameters`; the reply carries `parameters`, or `error`
/// (a qualified error name) and its parameters. `oneway` asks for no reply.
public struct VarlinkCall: Sendable, Equatable {
    public var method: String
    public var parameters: DumpValue
    public var oneway: Bool
    public var more: Bool

    public init(method: String, parameters: [DumpField] = [], oneway: Bool = false, more: Bool = false) {
        self.method = method
        self.parameters = .object(parameters)
        self.oneway = oneway
        self.more = more
    }

    /// The interface part of `method`: "io.watchkeeper.Control" for "io.watchkeeper.Control.Status".
    public var interface: String {
        guard let dot = method.lastIndex(of: ".") else { return "" }
        return String(method[..<dot])
    }

    public var methodName: String {
        guard let dot = method.lastIndex(of: ".") else { return method }
        return String(method[method.index(after: dot)...])
    }

    /// One message without its NUL. A message that is not a call is refused with the
    /// error to send back.
    public static func decode(_ message: some Collection<UInt8>) -> Result<VarlinkCall, VarlinkError> {
        let value: DumpValue
        do {
            value = try DumpValue.parse(json: message)
        } catch {
            return .failure(.invalidMessage("\(error)"))
        }
        guard case .object = value else { return .failure(.invalidMessage("a call must be a JSON object")) }
        guard let method = value["method"]?.stringValue, !method.isEmpty else {
            return .failure(.invalidMessage("a call needs a \"method\" string"))
        }
        var call = VarlinkCall(method: method)
        switch value["parameters"] {
        case nil, .null?: break
        case .object(let fields)?: call.parameters = .object(fields)
        default: return .failure(.invalidParameter("parameters"))
        }
        call.oneway = value["oneway"]?.boolValue ?? false
        call.more = value["more"]?.boolValue ?? false
        return .success(call)
    }

    public var encoded: [UInt8] {
        var fields: [DumpField] = [.init("method", .string(method))]
        if case .object(let parameters) = parameters, !parameters.isEmpty { fields.append(.init("parameters", self.parameters)) }
        if oneway { fields.append(.init("oneway", .bool(true))) }
        if more { fields.append(.init("more", .bool(true))) }
        return Array(DumpValue.object(fields).json.utf8) + [0]
    }
}

/// A qualified error and its parameters: what a method answers instead of a result.
public struct VarlinkError: Error, Sendable, Equatable, CustomStringConvertible {
    public var name: String
    public var parameters: [DumpField]

    public init(_ name: String, _ parameters: [DumpField] = []) {
        self.name = name
        self.parameters = parameters
    }

    public subscript(key: String) -> DumpValue? { DumpValue.object(parameters)[key] }

    public var description: String {
        parameters.isEmpty ? name : "\(name) \(DumpValue.object(parameters).json)"
    }

    // org.varlink.service, which every Varlink service implements.
    public static func interfaceNotFound(_ interface: String) -> VarlinkError {
        VarlinkError("org.varlink.service.InterfaceNotFound", [.init("interface", .string(interface))])
    }
    public static func methodNotFound(_ method: String) -> VarlinkError {
        VarlinkError("org.varlink.service.MethodNotFound", [.init("method", .string(method))])
    }
    public static func invalidParameter(_ parameter: String) -> VarlinkError {
        VarlinkError("org.varlink.service.InvalidParameter", [.init("parameter", .string(parameter))])
    }
    /// Not JSON, or not a call: the service interface has no error for it, so ours says why.
    public static func invalidMessage(_ reason: String) -> VarlinkError {
        VarlinkError(ControlInterface.name + ".InvalidMessage", [.init("reason", .string(reason))])
    }
}

/// A reply as it goes on the wire.
public enum VarlinkReply: Sendable, Equatable {
    case parameters([DumpField], continues: Bool = false)
    case error(VarlinkError)

    public var encoded: [UInt8] {
        let message: DumpValue
        switch self {
        case .parameters(let fields, let continues):
            var top: [DumpField] = [.init("parameters", .object(fields))]
            if continues { top.append(.init("continues", .bool(true))) }
            message = .object(top)
        case .error(let error):
            message = .object([.init("error", .string(error.name)), .init("parameters", .object(error.parameters))])
        }
        return Array(message.json.utf8) + [0]
    }

    /// A reply read by the client.
    public static func decode(_ message: some Collection<UInt8>) throws(DumpValue.ParseError) -> VarlinkReply {
        let value = try DumpValue.parse(json: message)
        let parameters = value["parameters"]?.fields ?? []
        if let name = value["error"]?.stringValue {
            return .error(VarlinkError(name, parameters))
        }
        return .parameters(parameters, continues: value["continues"]?.boolValue ?? false)
    }
}

/// Reading the parameters of a call, with the service interface's error for a wrong one.
extension DumpValue {
    public func requiredString(_ name: String) throws(VarlinkError) -> String {
        guard let value = self[name]?.stringValue, !value.isEmpty else { throw .invalidParameter(name) }
        return value
    }

    public func optionalInt(_ name: String, in range: ClosedRange<Int64>) throws(VarlinkError) -> Int64? {
        switch self[name] {
        case nil, .null?: return nil
        case let value?:
            guard let number = value.intValue, range.contains(number) else { throw .invalidParameter(name) }
            return number
        }
    }
}
