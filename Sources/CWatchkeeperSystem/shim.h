#ifndef WATCHKEEPER_SHIM_H
#define WATCHKEEPER_SHIM_H

#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>

#include <signal.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
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

#endif
