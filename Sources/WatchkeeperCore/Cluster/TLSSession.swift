import CWatchkeeperTLS

/// Why TLS could not be set up or went wrong, in an operator's words: "unable to load
/// client certificate /etc/wk/client.pem: No such file or directory", "unable to complete
/// the TLS handshake with 10.0.0.5: certificate verify failed: unable to get local issuer
/// certificate".
public struct TLSError: Error, Equatable, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}

/// The C calls' error text: long enough for two paths and OpenSSL's reasons.
private let errorCapacity = 1024

/// Runs `body` with a buffer for the C side's error sentence; its result, and the
/// sentence (empty unless the call failed).
private func withErrorText<Result>(_ body: (UnsafeMutablePointer<CChar>, Int) -> Result) -> (Result, TLSError) {
    withUnsafeTemporaryAllocation(of: CChar.self, capacity: errorCapacity) { buffer in
        let base = buffer.baseAddress!
        base[0] = 0
        let result = body(base, errorCapacity)
        return (result, TLSError(String(cString: base)))
    }
}

/// What the etcd client's connections trust and present: the CA certificates the server's
/// certificate must chain to (the system's when no `ca_file` is configured), and the
/// client certificate and key, if any. Made once per configuration; immutable, so
/// sessions on any queue share it (OpenSSL locks what it changes inside, such as its
/// session cache).
///
/// Making the first context loads libssl.so.3 (`wk_tls_load`); a daemon that never makes
/// one never maps OpenSSL.
// @unchecked Sendable: immutable after it is made, and used on the cluster queue only.
public final class TLSContext: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer

    private init(handle: UnsafeMutableRawPointer) {
        self.handle = handle
    }

    /// Fails, naming the file, if a file cannot be read or parsed or the key is not the
    /// certificate's; `certFile` and `keyFile` come together or not at all.
    public static func make(caFile: String?, certFile: String?, keyFile: String?) throws(TLSError) -> TLSContext {
        let (handle, error) = withErrorText { text, capacity in
            withOptionalCString(caFile) { ca in
                withOptionalCString(certFile) { cert in
                    withOptionalCString(keyFile) { key in
                        wk_tls_context_new(ca, cert, key, text, capacity)
                    }
                }
            }
        }
        guard let handle else { throw error }
        return TLSContext(handle: handle)
    }

    deinit {
        wk_tls_context_free(handle)
    }
}

private func withOptionalCString<Result>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> Result) -> Result {
    guard let string else { return body(nil) }
    return string.withCString(body)
}

/// TLS over one connected, non-blocking socket: the caller owns the fd, polls it (dispatch
/// read and write sources) and calls again when a call asks for readiness. Each call may
/// want the other direction than its name says (a handshake message, a key update), so
/// the caller waits for whichever `Progress` names.
///
/// Not thread-safe: one connection's queue uses it. The server's certificate is verified
/// against the context's CA certificates and must name `serverName`, a host name (also
/// sent as SNI) or an IP address (etcd's certificates for 127.0.0.1 name it as an IP).
public final class TLSSession {
    public enum Progress: Equatable {
        /// Handshake complete (`.done(0)`), or this many bytes read or written (never 0).
        case done(Int)
        case wantRead
        case wantWrite
        /// The server ended the TLS session cleanly (close_notify): no more bytes to read.
        case closed
    }

    private let context: TLSContext
    private let handle: UnsafeMutableRawPointer

    public init(context: TLSContext, fd: Int32, serverName: String) throws(TLSError) {
        let (handle, error) = withErrorText { text, capacity in
            wk_tls_session_new(context.handle, fd, serverName, text, capacity)
        }
        guard let handle else { throw error }
        self.context = context
        self.handle = handle
    }

    /// `.done(0)` once the handshake is complete (again at once if called after that).
    public func handshake() throws(TLSError) -> Progress {
        let (result, error) = withErrorText { text, capacity in
            wk_tls_handshake(handle, text, capacity)
        }
        return try Self.progress(Int(result), done: 0, error)
    }

    /// Decrypted bytes into `buffer` (`.done(count)`), or what to wait for, or `.closed`.
    /// Under TLS 1.3 the server judges our certificate after our handshake has completed,
    /// so its refusal ("tlsv13 alert certificate required") arrives here, as an error.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> Progress {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return .done(0) }
        let (result, error) = withErrorText { text, capacity in
            wk_tls_read(handle, base, buffer.count, text, capacity)
        }
        return try Self.progress(result, done: result, error)
    }

    /// Encrypts and sends some of `bytes` (`.done(count)`, maybe fewer than all), or says
    /// what to wait for. After `.wantRead` or `.wantWrite` call again with the same bytes:
    /// OpenSSL has taken them already and sends them when the socket allows.
    public func write(_ bytes: UnsafeRawBufferPointer) throws(TLSError) -> Progress {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return .done(0) }
        let (result, error) = withErrorText { text, capacity in
            wk_tls_write(handle, base, bytes.count, text, capacity)
        }
        return try Self.progress(result, done: result, error)
    }

    private static func progress(_ result: Int, done count: Int, _ error: TLSError) throws(TLSError) -> Progress {
        if result > 0 { return .done(count) }
        switch Int32(truncatingIfNeeded: result) {
        case WK_TLS_CLOSED.rawValue: return .closed
        case WK_TLS_WANT_READ.rawValue: return .wantRead
        case WK_TLS_WANT_WRITE.rawValue: return .wantWrite
        default: throw error
        }
    }

    /// Sends close_notify if the socket takes it now, and frees OpenSSL's session; the fd
    /// stays open, its owner closes it.
    deinit {
        wk_tls_session_free(handle)
    }
}
