/// Which answer a call gets: the Varlink service interface's, an error for an unknown
/// interface or method or a method the peer may not call, or the daemon's (ControlBackend).
enum ControlDispatch {
    /// The service interface is answered here; io.watchkeeper.Control's methods by `backend`,
    /// once `access` lets the peer call them (read_group: the door let the peer in to read;
    /// what acts is refused here). `reply` may come on any queue, once.
    static func dispatch(_ call: VarlinkCall, peer: ControlPeer, access: ControlAccess, backend: ControlBackend, reply: @escaping ControlReply) {
        switch call.interface {
        case ControlInterface.serviceName:
            reply(ControlInterface.serviceReply(call))
        case ControlInterface.name:
            guard let method = ControlInterface.Method(rawValue: call.methodName) else {
                reply(.failure(.methodNotFound(call.method)))
                return
            }
            guard access.permits(method, for: peer) else {
                reply(.failure(ControlInterface.ErrorName.permissionDenied.error([
                    .init("uid", .int(Int64(peer.uid))), .init("group", access.group.map { .string($0.name) } ?? .null),
                    .init("method", .string(method.rawValue)),
                ])))
                return
            }
            guard method == .status else {
                backend.handle(method, parameters: call.parameters, peer: peer, reply: reply)
                return
            }
            let caller = DumpField("access", access.describe(for: peer))
            backend.handle(method, parameters: call.parameters, peer: peer) { reply($0.map { $0 + [caller] }) }
        default:
            reply(.failure(.interfaceNotFound(call.interface)))
        }
    }
}
