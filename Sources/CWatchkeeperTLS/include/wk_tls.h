#ifndef WK_TLS_H
#define WK_TLS_H

// TLS for the etcd client, over OpenSSL 3 loaded at run time: libssl.so.3 is dlopen'ed the
// first time a context is made, so a daemon without TLS configured maps none of it (idle
// RSS is measured) and the build needs no libssl-dev. See tls.c for the symbols used.
//
// Every call that can fail takes `err`/`errlen` and writes an operator's sentence there
// ("unable to load client certificate /etc/wk/client.pem: No such file or directory").
// Contexts are immutable once made and may be shared; a session belongs to one caller at
// a time (the client's serial queue).

#include <stddef.h>

// What a handshake, read or write came to. Reads and writes return a byte count (> 0)
// instead of WK_TLS_DONE.
enum wk_tls_result {
    WK_TLS_DONE = 1,        // handshake: complete
    WK_TLS_CLOSED = 0,      // read: the server ended the TLS session (close_notify)
    WK_TLS_WANT_READ = -1,  // try again once the fd is readable
    WK_TLS_WANT_WRITE = -2, // try again once the fd is writable
    WK_TLS_FAILED = -3,     // the session is unusable; `err` says why
};

// 0 once libssl.so.3 is loaded with every symbol needed (the first call loads it; later
// calls, from any thread, return the first call's answer); -1 and the reason otherwise.
int wk_tls_load(char *err, size_t errlen);

// A client context: TLS 1.2 or later, the server's certificate verified against `ca_file`
// (NULL: the system's default CA paths), and a client certificate chain and its key when
// `cert_file` and `key_file` are given (both or neither). NULL on failure.
void *wk_tls_context_new(const char *ca_file, const char *cert_file, const char *key_file, char *err, size_t errlen);
void wk_tls_context_free(void *context);

// A session over `fd`, a connected non-blocking socket the caller keeps owning. The
// server's certificate must name `server_name`: a host name (also sent as SNI) or an IP
// literal (matched against the certificate's IP addresses; no SNI, which RFC 6066 forbids
// for addresses). NULL on failure.
void *wk_tls_session_new(void *context, int fd, const char *server_name, char *err, size_t errlen);

// WK_TLS_DONE, WK_TLS_WANT_READ, WK_TLS_WANT_WRITE or WK_TLS_FAILED.
int wk_tls_handshake(void *session, char *err, size_t errlen);

// Bytes read (> 0), WK_TLS_CLOSED, WK_TLS_WANT_READ, WK_TLS_WANT_WRITE or WK_TLS_FAILED.
long wk_tls_read(void *session, void *buffer, size_t length, char *err, size_t errlen);

// Bytes written (> 0; may be fewer than `length`), WK_TLS_WANT_READ, WK_TLS_WANT_WRITE or
// WK_TLS_FAILED. After a want, call again with the same bytes (at least as many): OpenSSL
// has already encrypted them. The buffer may move in between.
long wk_tls_write(void *session, const void *bytes, size_t length, char *err, size_t errlen);

// Sends close_notify if it can without waiting, and frees the session; never closes the fd.
void wk_tls_session_free(void *session);

#endif
