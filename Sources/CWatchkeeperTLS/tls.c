// TLS for the etcd client over OpenSSL 3, loaded with dlopen on first use.
//
// Why dlopen: most daemons run without a [cluster] section, and linking libssl and
// libcrypto would map both (about 5 MB of code) and run their constructors in every one
// of them. Why our own declarations: the build must not need libssl-dev. Everything below
// is declared from the OpenSSL 3.0 headers with opaque pointers; the constants are checked
// against those headers (ssl.h, tls1.h, err.h, x509_vfy.h of 3.0) and are part of the ABI,
// which OpenSSL keeps stable across 3.x.
//
// libssl depends on libcrypto, so dlsym on libssl's handle also finds libcrypto's symbols
// (ERR_*, X509_*): dlsym searches the handle's dependencies too.

#define _GNU_SOURCE
#include "wk_tls.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// ssl.h
#define SSL_ERROR_NONE 0
#define SSL_ERROR_SSL 1
#define SSL_ERROR_WANT_READ 2
#define SSL_ERROR_WANT_WRITE 3
#define SSL_ERROR_SYSCALL 5
#define SSL_ERROR_ZERO_RETURN 6
#define SSL_VERIFY_PEER 0x01
#define SSL_FILETYPE_PEM 1
#define SSL_CTRL_MODE 33
#define SSL_CTRL_SET_TLSEXT_HOSTNAME 55
#define SSL_CTRL_SET_MIN_PROTO_VERSION 123
#define SSL_MODE_ENABLE_PARTIAL_WRITE 0x00000001U
#define SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER 0x00000002U
// prov_ssl.h, tls1.h
#define TLS1_2_VERSION 0x0303
#define TLSEXT_NAMETYPE_host_name 0
// x509_vfy.h
#define X509_V_OK 0
#define X509_V_ERR_HOSTNAME_MISMATCH 62
#define X509_V_ERR_IP_ADDRESS_MISMATCH 64
// err.h: the "<library> lib" reasons that only say which layer passed an error up, and
// the libraries and reasons told apart here.
#define ERR_TXT_STRING 0x02
#define ERR_SYSTEM_FLAG ((unsigned long)INT32_MAX + 1)
#define ERR_LIB_OFFSET 23
#define ERR_LIB_MASK 0xFFUL
#define ERR_RFLAG_COMMON (0x2UL << 18)
#define ERR_RFLAGS_AND_REASON_MASK 0x7FFFFFUL
#define ERR_REASON_MASK 0x3FFFFUL
#define ERR_LIB_X509 11
#define ERR_LIB_OSSL_DECODER 60
// x509err.h
#define X509_R_KEY_TYPE_MISMATCH 115
#define X509_R_KEY_VALUES_MISMATCH 116

typedef struct ssl_method_st SSL_METHOD;
typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct X509_VERIFY_PARAM_st X509_VERIFY_PARAM;

// The table of what is used, filled once by load_library.
static struct {
    const SSL_METHOD *(*TLS_client_method)(void);
    SSL_CTX *(*SSL_CTX_new)(const SSL_METHOD *);
    void (*SSL_CTX_free)(SSL_CTX *);
    long (*SSL_CTX_ctrl)(SSL_CTX *, int, long, void *);
    void (*SSL_CTX_set_verify)(SSL_CTX *, int, void *);
    int (*SSL_CTX_load_verify_locations)(SSL_CTX *, const char *, const char *);
    int (*SSL_CTX_set_default_verify_paths)(SSL_CTX *);
    int (*SSL_CTX_use_certificate_chain_file)(SSL_CTX *, const char *);
    int (*SSL_CTX_use_PrivateKey_file)(SSL_CTX *, const char *, int);
    int (*SSL_CTX_check_private_key)(const SSL_CTX *);
    SSL *(*SSL_new)(SSL_CTX *);
    void (*SSL_free)(SSL *);
    int (*SSL_set_fd)(SSL *, int);
    long (*SSL_ctrl)(SSL *, int, long, void *);
    int (*SSL_set1_host)(SSL *, const char *);
    X509_VERIFY_PARAM *(*SSL_get0_param)(SSL *);
    int (*SSL_connect)(SSL *);
    int (*SSL_read)(SSL *, void *, int);
    int (*SSL_write)(SSL *, const void *, int);
    int (*SSL_get_error)(const SSL *, int);
    long (*SSL_get_verify_result)(const SSL *);
    int (*SSL_shutdown)(SSL *);
    int (*X509_VERIFY_PARAM_set1_ip_asc)(X509_VERIFY_PARAM *, const char *);
    const char *(*X509_verify_cert_error_string)(long);
    unsigned long (*ERR_get_error_all)(const char **, int *, const char **, const char **, int *);
    unsigned long (*ERR_peek_error)(void);
    const char *(*ERR_reason_error_string)(unsigned long);
    void (*ERR_error_string_n)(unsigned long, char *, size_t);
    void (*ERR_clear_error)(void);
} ossl;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status = -1;
static char load_error[512];

static void format(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void format(char *err, size_t errlen, const char *fmt, ...) {
    if (err == NULL || errlen == 0) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(err, errlen, fmt, args);
    va_end(args);
}

static void load_library(void) {
    // RTLD_LOCAL: nothing else in the process resolves against these symbols by accident.
    void *handle = dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        format(load_error, sizeof load_error, "unable to load libssl.so.3 (Debian package libssl3): %s",
               why ? why : "unknown dlopen error");
        return;
    }
#define RESOLVE(name)                                                                                        \
    do {                                                                                                     \
        *(void **)&ossl.name = dlsym(handle, #name);                                                         \
        if (ossl.name == NULL) {                                                                             \
            format(load_error, sizeof load_error, "unable to use libssl.so.3: it has no symbol " #name        \
                   " (OpenSSL 3.0 or later is needed)");                                                     \
            return;                                                                                          \
        }                                                                                                    \
    } while (0)
    RESOLVE(TLS_client_method);
    RESOLVE(SSL_CTX_new);
    RESOLVE(SSL_CTX_free);
    RESOLVE(SSL_CTX_ctrl);
    RESOLVE(SSL_CTX_set_verify);
    RESOLVE(SSL_CTX_load_verify_locations);
    RESOLVE(SSL_CTX_set_default_verify_paths);
    RESOLVE(SSL_CTX_use_certificate_chain_file);
    RESOLVE(SSL_CTX_use_PrivateKey_file);
    RESOLVE(SSL_CTX_check_private_key);
    RESOLVE(SSL_new);
    RESOLVE(SSL_free);
    RESOLVE(SSL_set_fd);
    RESOLVE(SSL_ctrl);
    RESOLVE(SSL_set1_host);
    RESOLVE(SSL_get0_param);
    RESOLVE(SSL_connect);
    RESOLVE(SSL_read);
    RESOLVE(SSL_write);
    RESOLVE(SSL_get_error);
    RESOLVE(SSL_get_verify_result);
    RESOLVE(SSL_shutdown);
    RESOLVE(X509_VERIFY_PARAM_set1_ip_asc);
    RESOLVE(X509_verify_cert_error_string);
    RESOLVE(ERR_get_error_all);
    RESOLVE(ERR_peek_error);
    RESOLVE(ERR_reason_error_string);
    RESOLVE(ERR_error_string_n);
    RESOLVE(ERR_clear_error);
#undef RESOLVE
    // The handle is never closed: OpenSSL registers exit handlers that must find it mapped.
    load_status = 0;
}

int wk_tls_load(char *err, size_t errlen) {
    pthread_once(&load_once, load_library);
    if (load_status != 0) format(err, errlen, "%s", load_error);
    return load_status;
}

// OpenSSL's queued errors for this thread, oldest (the cause) first, as reason text only:
// "No such file or directory", "key values mismatch". The "<library> lib" entries that
// only pass an error up are left out, as is a reason already given; a decoder's reason
// ("unsupported") comes with its detail ("No supported data to decode. Input type: PEM").
// Empties the queue.
static void describe_queued_errors(char *out, size_t outlen, const char *nothing_queued) {
    size_t used = 0;
    out[0] = '\0';
    const char *data = NULL;
    int flags = 0;
    unsigned long code;
    while ((code = ossl.ERR_get_error_all(NULL, NULL, NULL, &data, &flags)) != 0) {
        char text[384];
        if (code & ERR_SYSTEM_FLAG) {
            // errno, which OpenSSL 3 keeps in the code and has no reason string for.
            snprintf(text, sizeof text, "%s", strerror((int)(code & INT32_MAX)));
        } else {
            unsigned long reason = code & ERR_RFLAGS_AND_REASON_MASK;
            if ((reason & ERR_RFLAG_COMMON) && (reason & ~ERR_RFLAG_COMMON) < 256 && used > 0) continue;
            const char *known = ossl.ERR_reason_error_string(code);
            if (known == NULL) {
                ossl.ERR_error_string_n(code, text, sizeof text);
            } else if (((code >> ERR_LIB_OFFSET) & ERR_LIB_MASK) == ERR_LIB_OSSL_DECODER && (flags & ERR_TXT_STRING) &&
                       data != NULL && data[0] != '\0') {
                snprintf(text, sizeof text, "%s (%s)", known, data);
            } else {
                snprintf(text, sizeof text, "%s", known);
            }
        }
        if (strcasestr(out, text) != NULL) continue;
        int wrote = snprintf(out + used, outlen - used, "%s%s", used > 0 ? ": " : "", text);
        if (wrote < 0 || (size_t)wrote >= outlen - used) {
            used = outlen - 1;
            continue;
        }
        used += (size_t)wrote;
    }
    if (used == 0) snprintf(out, outlen, "%s", nothing_queued);
}

// A file OpenSSL is about to read, checked first: OpenSSL reads a directory as an empty
// file ("no start line"), and its text for a missing file depends on which loader ran.
static int check_readable(const char *path, const char *what, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        format(err, errlen, "unable to load %s %s: %s", what, path, strerror(errno));
        return -1;
    }
    struct stat status;
    int directory = fstat(fd, &status) == 0 && S_ISDIR(status.st_mode);
    close(fd);
    if (directory) {
        format(err, errlen, "unable to load %s %s: %s", what, path, strerror(EISDIR));
        return -1;
    }
    return 0;
}

// Whether the oldest queued error says a private key is not its certificate's.
static int key_mismatch_queued(void) {
    unsigned long code = ossl.ERR_peek_error();
    if (code == 0 || (code & ERR_SYSTEM_FLAG) || ((code >> ERR_LIB_OFFSET) & ERR_LIB_MASK) != ERR_LIB_X509) return 0;
    unsigned long reason = code & ERR_REASON_MASK;
    return reason == X509_R_KEY_VALUES_MISMATCH || reason == X509_R_KEY_TYPE_MISMATCH;
}

struct wk_tls_context {
    SSL_CTX *ctx;
};

void *wk_tls_context_new(const char *ca_file, const char *cert_file, const char *key_file, char *err, size_t errlen) {
    if (wk_tls_load(err, errlen) != 0) return NULL;
    if ((cert_file == NULL) != (key_file == NULL)) {
        format(err, errlen, "unable to use a client certificate: %s is given without %s",
               cert_file ? "a certificate" : "a key", cert_file ? "its key" : "a certificate");
        return NULL;
    }
    char why[512];
    ossl.ERR_clear_error();
    SSL_CTX *ctx = ossl.SSL_CTX_new(ossl.TLS_client_method());
    if (ctx == NULL) {
        describe_queued_errors(why, sizeof why, "unknown error");
        format(err, errlen, "unable to create a TLS context: %s", why);
        return NULL;
    }
    // SSL_CTX_set_min_proto_version, SSL_CTX_set_mode: macros over SSL_CTX_ctrl.
    ossl.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, NULL);
    // Partial writes: a write returns what fit, like write(2). A moving buffer: the Swift
    // caller's bytes after a want-write need not be at the same address, only the same.
    ossl.SSL_CTX_ctrl(ctx, SSL_CTRL_MODE, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, NULL);
    ossl.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);

    if (ca_file != NULL) {
        if (check_readable(ca_file, "CA certificates", err, errlen) != 0) goto fail;
        if (ossl.SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
            describe_queued_errors(why, sizeof why, "no certificate found");
            format(err, errlen, "unable to load CA certificates %s: %s", ca_file, why);
            goto fail;
        }
    } else if (ossl.SSL_CTX_set_default_verify_paths(ctx) != 1) {
        describe_queued_errors(why, sizeof why, "unknown error");
        format(err, errlen, "unable to load the system's CA certificates: %s", why);
        goto fail;
    }
    if (cert_file != NULL) {
        if (check_readable(cert_file, "client certificate", err, errlen) != 0) goto fail;
        if (check_readable(key_file, "client key", err, errlen) != 0) goto fail;
        if (ossl.SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
            describe_queued_errors(why, sizeof why, "no certificate found");
            format(err, errlen, "unable to load client certificate %s: %s", cert_file, why);
            goto fail;
        }
        // SSL_CTX_use_PrivateKey_file compares the key with the certificate already;
        // SSL_CTX_check_private_key stays for a key type it cannot compare on loading.
        if (ossl.SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
            int mismatch = key_mismatch_queued();
            describe_queued_errors(why, sizeof why, "no key found");
            if (mismatch) {
                format(err, errlen, "unable to use client key %s with client certificate %s: %s", key_file, cert_file, why);
            } else {
                format(err, errlen, "unable to load client key %s: %s", key_file, why);
            }
            goto fail;
        }
        if (ossl.SSL_CTX_check_private_key(ctx) != 1) {
            describe_queued_errors(why, sizeof why, "the key is not the certificate's");
            format(err, errlen, "unable to use client key %s with client certificate %s: %s", key_file, cert_file, why);
            goto fail;
        }
    }
    struct wk_tls_context *context = malloc(sizeof *context);
    if (context == NULL) {
        format(err, errlen, "unable to create a TLS context: out of memory");
        goto fail;
    }
    context->ctx = ctx;
    return context;
fail:
    ossl.SSL_CTX_free(ctx);
    return NULL;
}

void wk_tls_context_free(void *context) {
    struct wk_tls_context *c = context;
    if (c == NULL) return;
    ossl.SSL_CTX_free(c->ctx);
    free(c);
}

struct wk_tls_session {
    SSL *ssl;
    int handshake_done;
    // After a failure OpenSSL's session is unusable and its later errors say less
    // ("unknown error", "protocol is shutdown"): every later call gets the first one's text.
    int failed;
    char failure[512];
    char server_name[256];
};

static int is_ip_literal(const char *name) {
    unsigned char address[16];
    return inet_pton(AF_INET, name, address) == 1 || inet_pton(AF_INET6, name, address) == 1;
}

void *wk_tls_session_new(void *context, int fd, const char *server_name, char *err, size_t errlen) {
    struct wk_tls_context *c = context;
    char why[512];
    if (strlen(server_name) >= sizeof ((struct wk_tls_session *)0)->server_name) {
        format(err, errlen, "unable to set up TLS for %.64s...: the server name is too long", server_name);
        return NULL;
    }
    struct wk_tls_session *session = calloc(1, sizeof *session);
    if (session == NULL) {
        format(err, errlen, "unable to set up TLS for %s: out of memory", server_name);
        return NULL;
    }
    snprintf(session->server_name, sizeof session->server_name, "%s", server_name);
    ossl.ERR_clear_error();
    session->ssl = ossl.SSL_new(c->ctx);
    if (session->ssl == NULL) goto fail;
    if (ossl.SSL_set_fd(session->ssl, fd) != 1) goto fail;
    if (is_ip_literal(server_name)) {
        // etcd's certificates for 127.0.0.1 carry it as an IP SAN; SSL_set1_host would
        // compare it with the DNS names and fail.
        if (ossl.X509_VERIFY_PARAM_set1_ip_asc(ossl.SSL_get0_param(session->ssl), server_name) != 1) goto fail;
    } else {
        // SSL_set_tlsext_host_name: a macro over SSL_ctrl.
        if (ossl.SSL_ctrl(session->ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, (void *)server_name) != 1)
            goto fail;
        if (ossl.SSL_set1_host(session->ssl, server_name) != 1) goto fail;
    }
    return session;
fail:
    describe_queued_errors(why, sizeof why, "unknown error");
    format(err, errlen, "unable to set up TLS for %s: %s", server_name, why);
    if (session->ssl != NULL) ossl.SSL_free(session->ssl);
    free(session);
    return NULL;
}

// OpenSSL writes to the socket with write(2), which raises SIGPIPE once the server has
// gone. The daemon ignores SIGPIPE, but a library must not depend on that: SIGPIPE is
// blocked in this thread around each call, and one the call raised is taken back before
// the mask is restored (what libpq does around OpenSSL). A SIGPIPE that was already
// pending is left alone.
struct sigpipe_guard {
    sigset_t previous;
    int was_pending;
};

static void block_sigpipe(struct sigpipe_guard *guard) {
    sigset_t pipe_only, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigemptyset(&pending);
    sigpending(&pending);
    guard->was_pending = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_only, &guard->previous);
}

static void restore_sigpipe(struct sigpipe_guard *guard) {
    if (!guard->was_pending) {
        sigset_t pipe_only, pending;
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        sigemptyset(&pending);
        if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
            struct timespec now = {0, 0};
            int saved = errno;
            while (sigtimedwait(&pipe_only, NULL, &now) == -1 && errno == EINTR) {}
            errno = saved;
        }
    }
    pthread_sigmask(SIG_SETMASK, &guard->previous, NULL);
}

// What failed, in an operator's words. `action` is "complete the TLS handshake with",
// "read from" or "write to"; the server's name follows it.
static void describe_failure(struct wk_tls_session *session, int code, int saved_errno, const char *action) {
    char why[384];
    long verify = ossl.SSL_get_verify_result(session->ssl);
    if (!session->handshake_done && verify != X509_V_OK) {
        // The queue says only "certificate verify failed"; the verify result says which
        // check: an unknown issuer, an expired certificate, the wrong name.
        ossl.ERR_clear_error();
        const char *hint = "";
        if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
            hint = " (the certificate does not name the server)";
        }
        format(session->failure, sizeof session->failure, "unable to %s %s: certificate verify failed: %s%s", action,
               session->server_name, ossl.X509_verify_cert_error_string(verify), hint);
        return;
    }
    if (code == SSL_ERROR_SYSCALL) {
        // Nothing queued: the socket call failed (errno), or the server closed the
        // connection in the middle of the handshake.
        describe_queued_errors(why, sizeof why,
                               saved_errno != 0 ? strerror(saved_errno) : "the server closed the connection");
    } else {
        describe_queued_errors(why, sizeof why, "unknown error");
    }
    format(session->failure, sizeof session->failure, "unable to %s %s: %s", action, session->server_name, why);
}

// One OpenSSL call on the session, with SIGPIPE held off, ERR's queue cleared first (as
// SSL_get_error requires) and errno kept for SSL_ERROR_SYSCALL.
enum operation { HANDSHAKE, READ, WRITE };

static int perform(struct wk_tls_session *session, enum operation operation, void *buffer, size_t length, int *code,
                   int *saved_errno) {
    int request = length > INT32_MAX ? INT32_MAX : (int)length;
    struct sigpipe_guard guard;
    block_sigpipe(&guard);
    ossl.ERR_clear_error();
    errno = 0;
    int result;
    switch (operation) {
    case HANDSHAKE: result = ossl.SSL_connect(session->ssl); break;
    case READ: result = ossl.SSL_read(session->ssl, buffer, request); break;
    case WRITE: result = ossl.SSL_write(session->ssl, buffer, request); break;
    }
    *saved_errno = errno;
    *code = result > 0 ? SSL_ERROR_NONE : ossl.SSL_get_error(session->ssl, result);
    restore_sigpipe(&guard);
    return result;
}

static long fail(struct wk_tls_session *session, char *err, size_t errlen) {
    session->failed = 1;
    format(err, errlen, "%s", session->failure);
    return WK_TLS_FAILED;
}

int wk_tls_handshake(void *s, char *err, size_t errlen) {
    struct wk_tls_session *session = s;
    if (session->failed) return (int)fail(session, err, errlen);
    if (session->handshake_done) return WK_TLS_DONE;
    int code, saved_errno;
    perform(session, HANDSHAKE, NULL, 0, &code, &saved_errno);
    switch (code) {
    case SSL_ERROR_NONE:
        session->handshake_done = 1;
        return WK_TLS_DONE;
    case SSL_ERROR_WANT_READ:
        return WK_TLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return WK_TLS_WANT_WRITE;
    default:
        describe_failure(session, code, saved_errno, "complete the TLS handshake with");
        return (int)fail(session, err, errlen);
    }
}

long wk_tls_read(void *s, void *buffer, size_t length, char *err, size_t errlen) {
    struct wk_tls_session *session = s;
    if (session->failed) return fail(session, err, errlen);
    int code, saved_errno;
    int result = perform(session, READ, buffer, length, &code, &saved_errno);
    switch (code) {
    case SSL_ERROR_NONE:
        return result;
    case SSL_ERROR_ZERO_RETURN:
        return WK_TLS_CLOSED;
    case SSL_ERROR_WANT_READ:
        return WK_TLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return WK_TLS_WANT_WRITE;
    default:
        describe_failure(session, code, saved_errno, "read from");
        return fail(session, err, errlen);
    }
}

long wk_tls_write(void *s, const void *bytes, size_t length, char *err, size_t errlen) {
    struct wk_tls_session *session = s;
    if (session->failed) return fail(session, err, errlen);
    int code, saved_errno;
    int result = perform(session, WRITE, (void *)bytes, length, &code, &saved_errno);
    switch (code) {
    case SSL_ERROR_NONE:
        return result;
    case SSL_ERROR_WANT_READ:
        return WK_TLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return WK_TLS_WANT_WRITE;
    default:
        break;
    }
    describe_failure(session, code, saved_errno, "write to");
    if (code == SSL_ERROR_SYSCALL && session->handshake_done) {
        // Under TLS 1.3 a server that refuses our certificate does so after our handshake
        // has completed: it sends an alert and closes, and a write that comes after that
        // fails with EPIPE or ECONNRESET. The alert may still wait in the socket; if one
        // read finds it, it is the reason to give ("tlsv13 alert certificate required").
        char scratch[256];
        int read_code, read_errno;
        perform(session, READ, scratch, sizeof scratch, &read_code, &read_errno);
        if (read_code == SSL_ERROR_SSL) describe_failure(session, read_code, read_errno, "write to");
    }
    return fail(session, err, errlen);
}

void wk_tls_session_free(void *s) {
    struct wk_tls_session *session = s;
    if (session == NULL) return;
    if (session->handshake_done && !session->failed) {
        // One try at close_notify; the server's reply is not waited for (the fd is about
        // to be closed by its owner), and a failure here changes nothing.
        struct sigpipe_guard guard;
        block_sigpipe(&guard);
        ossl.SSL_shutdown(session->ssl);
        restore_sigpipe(&guard);
    }
    ossl.ERR_clear_error();
    ossl.SSL_free(session->ssl);
    free(session);
}
