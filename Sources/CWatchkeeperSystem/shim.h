#ifndef WATCHKEEPER_SHIM_H
#define WATCHKEEPER_SHIM_H

#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>

#include <malloc.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

// Glibc 2.36 has pidfd_open, but Debian 12's headers hide it behind _GNU_SOURCE
// and older libcs lack it: the raw syscall works everywhere the kernel does (5.3+).
static inline int wk_pidfd_open(pid_t pid, unsigned int flags) {
    return (int)syscall(SYS_pidfd_open, pid, flags);
}

static inline int wk_pidfd_send_signal(int pidfd, int sig) {
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

// glibc's memrchr and memmem are vectorised but declared only under _GNU_SOURCE,
// which the Glibc module does not define; declare them here.
extern void *memrchr(const void *s, int c, size_t n);
extern void *memmem(const void *haystack, size_t haystack_length, const void *needle, size_t needle_length);

static inline const void *wk_memrchr(const void *s, int c, size_t n) { return memrchr(s, c, n); }
static inline const void *wk_memmem(const void *h, size_t hl, const void *n, size_t nl) { return memmem(h, hl, n, nl); }

#endif
