// sd-journal(3) through dlopen, for `watchkeeper logs`: reading journal files is libsystemd's
// to do, but only that command reads them, so the daemon maps none of libsystemd and its six
// libraries (docs/measurements/idle-memory.md). The declarations are checked against
// libsystemd-dev's header: each pointer has the type of the function it is looked up as.

#define _GNU_SOURCE
#include "wk_systemd.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <systemd/sd-journal.h>

_Static_assert(WK_SD_JOURNAL_LOCAL_ONLY == SD_JOURNAL_LOCAL_ONLY, "SD_JOURNAL_LOCAL_ONLY");

#define CALLS(X)                                                                                                   \
    X(sd_journal_open) X(sd_journal_open_directory) X(sd_journal_close) X(sd_journal_set_data_threshold)          \
    X(sd_journal_add_match) X(sd_journal_add_disjunction) X(sd_journal_flush_matches) X(sd_journal_seek_head)    \
    X(sd_journal_seek_tail) X(sd_journal_next) X(sd_journal_previous) X(sd_journal_get_cursor)                    \
    X(sd_journal_seek_cursor) X(sd_journal_get_data) X(sd_journal_get_realtime_usec) X(sd_journal_get_fd)         \
    X(sd_journal_get_events) X(sd_journal_get_timeout) X(sd_journal_process)

static struct {
#define FIELD(name) __typeof__(name) *name;
    CALLS(FIELD)
#undef FIELD
} calls;

static pthread_once_t loading = PTHREAD_ONCE_INIT;
static char load_error[256];

static void load_library(void) {
    void *library = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        snprintf(load_error, sizeof load_error, "%s", dlerror());
        return;
    }
#define LOOKUP(name)                                                                               \
    if (!(calls.name = (__typeof__(name) *)dlsym(library, #name))) {                              \
        snprintf(load_error, sizeof load_error, "libsystemd.so.0 has no %s", #name);             \
        return;                                                                                    \
    }
    CALLS(LOOKUP)
#undef LOOKUP
}

int wk_sd_journal_load(char *err, size_t errlen) {
    pthread_once(&loading, load_library);
    if (load_error[0] == 0) return 0;
    if (err && errlen > 0) snprintf(err, errlen, "%s", load_error);
    return -1;
}

int wk_sd_journal_open(sd_journal **ret, int flags) { return calls.sd_journal_open(ret, flags); }
int wk_sd_journal_open_directory(sd_journal **ret, const char *path, int flags) { return calls.sd_journal_open_directory(ret, path, flags); }
void wk_sd_journal_close(sd_journal *j) { calls.sd_journal_close(j); }
int wk_sd_journal_set_data_threshold(sd_journal *j, size_t sz) { return calls.sd_journal_set_data_threshold(j, sz); }
int wk_sd_journal_add_match(sd_journal *j, const void *data, size_t size) { return calls.sd_journal_add_match(j, data, size); }
int wk_sd_journal_add_disjunction(sd_journal *j) { return calls.sd_journal_add_disjunction(j); }
void wk_sd_journal_flush_matches(sd_journal *j) { calls.sd_journal_flush_matches(j); }
int wk_sd_journal_seek_head(sd_journal *j) { return calls.sd_journal_seek_head(j); }
int wk_sd_journal_seek_tail(sd_journal *j) { return calls.sd_journal_seek_tail(j); }
int wk_sd_journal_next(sd_journal *j) { return calls.sd_journal_next(j); }
int wk_sd_journal_previous(sd_journal *j) { return calls.sd_journal_previous(j); }
int wk_sd_journal_get_cursor(sd_journal *j, char **cursor) { return calls.sd_journal_get_cursor(j, cursor); }
int wk_sd_journal_seek_cursor(sd_journal *j, const char *cursor) { return calls.sd_journal_seek_cursor(j, cursor); }
int wk_sd_journal_get_data(sd_journal *j, const char *field, const void **data, size_t *length) { return calls.sd_journal_get_data(j, field, data, length); }
int wk_sd_journal_get_realtime_usec(sd_journal *j, uint64_t *usec) { return calls.sd_journal_get_realtime_usec(j, usec); }
int wk_sd_journal_get_fd(sd_journal *j) { return calls.sd_journal_get_fd(j); }
int wk_sd_journal_get_events(sd_journal *j) { return calls.sd_journal_get_events(j); }
int wk_sd_journal_get_timeout(sd_journal *j, uint64_t *timeout_usec) { return calls.sd_journal_get_timeout(j, timeout_usec); }
int wk_sd_journal_process(sd_journal *j) { return calls.sd_journal_process(j); }
