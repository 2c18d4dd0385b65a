#ifndef WK_SYSTEMD_H
#define WK_SYSTEMD_H

// systemd's protocols spoken by the daemon itself, without linking libsystemd: the
// notification datagram (sd_notify(3)), journald's native datagram (sd_journal_sendv(3),
// systemd's JOURNAL_NATIVE_PROTOCOL.md) and a stream to journald (sd_journal_stream_fd(3)).
// libsystemd and the six libraries it needs cost every daemon 0.93 MiB of idle RSS for these
// three messages (docs/measurements/idle-memory.md). Reading the journal (`watchkeeper logs`)
// does need libsystemd's sd-journal: it is loaded with dlopen when a reader is opened.
//
// Every call returns what the libsystemd call it replaces returns: a count or 0 on success,
// -errno on failure.

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

// journald's sockets, as libsystemd has them built in.
#define WK_JOURNAL_SOCKET "/run/systemd/journal/socket"
#define WK_JOURNAL_STDOUT "/run/systemd/journal/stdout"

// sd_notify(3): `state` ("KEY=value" lines, `length` bytes) as one datagram to `socket`,
// NOTIFY_SOCKET's value: an absolute path, or '@' and an abstract socket's name. 1 once
// sent, -EINVAL for a value that is neither, -errno when the send fails. A fresh socket per
// call, blocking while the manager's queue is full, as libsystemd does.
int wk_notify(const char *socket, const char *state, size_t length);

// sd_journal_sendv(3) to journald's native socket at `path` (WK_JOURNAL_SOCKET): each field
// "NAME=value"; a value holding a newline goes in the binary-safe form (NAME, newline, its
// length as 64-bit little endian, the value). One process-wide blocking datagram socket. An
// entry too big for a datagram goes as a sealed memfd passed with SCM_RIGHTS. 0 when sent or
// when no journal listens at `path` (ENOENT, as libsystemd); -EINVAL for a field without a
// name or with a newline in its name; -errno otherwise.
int wk_journal_sendv(const char *path, const struct iovec *fields, int count);

// sd_journal_stream_fd(3): a stream socket connected to journald's stdout socket at `path`
// (WK_JOURNAL_STDOUT) after the stream header (identifier, priority, whether lines carry a
// "<N>" prefix, nothing forwarded). The descriptor, or -errno.
int wk_journal_stream_fd(const char *path, const char *identifier, int priority, int level_prefix);

// The journal reader: libsystemd.so.0's sd-journal, loaded on first use. 0 once loaded (later
// calls, from any thread, return the first call's answer); -1 and dlerror's words in `err`.
int wk_sd_journal_load(char *err, size_t errlen);

// sd-journal(3)'s calls that JournalReader makes, with their signatures; valid only after
// wk_sd_journal_load returned 0.
typedef struct sd_journal sd_journal;
enum { WK_SD_JOURNAL_LOCAL_ONLY = 1 };
int wk_sd_journal_open(sd_journal **ret, int flags);
int wk_sd_journal_open_directory(sd_journal **ret, const char *path, int flags);
void wk_sd_journal_close(sd_journal *j);
int wk_sd_journal_set_data_threshold(sd_journal *j, size_t sz);
int wk_sd_journal_add_match(sd_journal *j, const void *data, size_t size);
int wk_sd_journal_add_disjunction(sd_journal *j);
void wk_sd_journal_flush_matches(sd_journal *j);
int wk_sd_journal_seek_head(sd_journal *j);
int wk_sd_journal_seek_tail(sd_journal *j);
int wk_sd_journal_next(sd_journal *j);
int wk_sd_journal_previous(sd_journal *j);
int wk_sd_journal_get_cursor(sd_journal *j, char **cursor);
int wk_sd_journal_seek_cursor(sd_journal *j, const char *cursor);
int wk_sd_journal_get_data(sd_journal *j, const char *field, const void **data, size_t *length);
int wk_sd_journal_get_realtime_usec(sd_journal *j, uint64_t *usec);
int wk_sd_journal_get_fd(sd_journal *j);
int wk_sd_journal_get_events(sd_journal *j);
int wk_sd_journal_get_timeout(sd_journal *j, uint64_t *timeout_usec);
int wk_sd_journal_process(sd_journal *j);

#endif
