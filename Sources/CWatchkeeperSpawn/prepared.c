// The prepared child: a job's process made before its event. A lone file's job waited for
// the clone (copy_process, the daemon's fd table) and the child's setup (64 rt_sigaction,
// setsid, the fds, close_range) between the event and its exec, about 90 us on the 2-vCPU
// guest (latency-path.md, "The prepared child"). None of that depends on the job: the
// spawning thread makes the child after a job's exit, and the event's spawn writes the job
// into its block and wakes it with one byte.
//
// The child is a nowait.c child (CLONE_VM, its stack and the request's strings in a block,
// raw system calls only) that waits between the two halves of child.c's setup on its end of
// a socketpair. The parent's end is close-on-exec in the daemon, so the child reads EOF and
// exits if the daemon dies however it dies; SOCK_SEQPACKET so that a wake sent to a child
// that is gone fails with EPIPE (MSG_NOSIGNAL: no SIGPIPE) instead of being lost.
//
// Only for what every job shares: stdin /dev/null, the job's stdout, stderr and progress
// pipes fixed when it is made (JobPipeReserve's set), the daemon's user. The cgroup is
// joined by the parent writing the child's pid, before the wake; nice value, directory and
// mask are the job's and set after it. Waking waits for the exec as the vfork clone does
// (a failed step is reported to the caller, never lost), for at most a second: a child
// stopped by someone else's SIGSTOP leaves the caller a report ticket instead of a hang.

#define _GNU_SOURCE
#include "spawn_internal.h"

#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

static unsigned long long prepared_total;

unsigned long long wk_spawn_prepared_total(void) {
    return __atomic_load_n(&prepared_total, __ATOMIC_RELAXED);
}

int wk_prepare_supported(void) {
    return WK_RAW_SYSCALLS && !WK_FORK_ONLY;
}

int wk_prepare(int stdout_fd, int stderr_fd, int extra_fd, unsigned long long *ticket, pid_t *pid) {
#if !WK_RAW_SYSCALLS || WK_FORK_ONLY
    (void)stdout_fd, (void)stderr_fd, (void)extra_fd, (void)ticket, (void)pid;
    return -ENOSYS;
#else
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        return -errno;
    }
    int index = 0;
    unsigned generation = 0;
    struct wk_block *b = wk_block_take(&index, &generation);
    if (b == NULL) {
        (void)close(pair[0]);
        (void)close(pair[1]);
        return -EAGAIN;
    }
    b->parked = 1;  // in_setup is set: no other spawn takes it meanwhile
    memset(&b->req, 0, sizeof(b->req));
    memset(&b->plan, 0, sizeof(b->plan));
    b->plan.req = &b->req;
    b->plan.report_fd = -1;
    sigemptyset(&b->plan.empty_mask);
    b->plan.null_fd = wk_kept_null_fd();
    b->plan.prepared_stdout = stdout_fd;
    b->plan.prepared_stderr = stderr_fd;
    b->plan.prepared_extra = extra_fd;
    b->plan.wake_fd = pair[1];
    b->wake_fd = pair[0];
    void *stack_top = (char *)b + WK_BLOCK_SIZE;

    unsigned long previous[WK_MASK_WORDS];
    wk_block_every_signal_but_sigchld(previous);
    int pidfd = -1;
    pid_t child = clone(wk_prepared_child_entry, stack_top, CLONE_VM | CLONE_PIDFD | CLONE_CHILD_CLEARTID | SIGCHLD, &b->plan, &pidfd,
                        NULL, &b->in_setup);
    int clone_errno = errno;
    wk_restore_signals_but_sigchld(previous);
    (void)close(pair[1]);
    if (child < 0) {
        (void)close(pair[0]);
        wk_block_give_back(b);
        return -clone_errno;
    }
    b->pid = child;
    b->pidfd = pidfd;
    *ticket = wk_block_ticket(index, generation);
    *pid = child;
    return 0;
#endif
}

// The ticket's block if it still holds a prepared child; NULL for a spent ticket.
static struct wk_block *parked_block(unsigned long long ticket) {
    pthread_mutex_lock(&wk_blocks_lock);
    struct wk_block *b = wk_block_of_ticket(ticket);
    if (b != NULL && !b->parked) {
        b = NULL;
    }
    pthread_mutex_unlock(&wk_blocks_lock);
    return b;
}

static void reap_pidfd(int pidfd) {
    siginfo_t info;
    while (syscall(SYS_waitid, P_PIDFD, pidfd, &info, WEXITED, NULL) < 0 && errno == EINTR) {
    }
}

// SIGKILL first: EOF alone would wait for a child still in its setup, or stopped.
static void discard(struct wk_block *b) {
    int saved = errno;
    if (b->wake_fd >= 0) {
        (void)close(b->wake_fd);
        b->wake_fd = -1;
    }
    (void)syscall(SYS_pidfd_send_signal, b->pidfd, SIGKILL, NULL, 0);
    reap_pidfd(b->pidfd);
    (void)close(b->pidfd);
    wk_block_give_back(b);
    errno = saved;
}

void wk_prepared_discard(unsigned long long ticket) {
    struct wk_block *b = parked_block(ticket);
    if (b != NULL) {
        discard(b);
    }
}

static int fits(const struct wk_block *b, const struct wk_spawn_request *req) {
    return !req->set_credentials && !req->force_fork && req->stdin_fd < 0 && req->stdout_fd == b->plan.prepared_stdout &&
           req->stderr_fd == b->plan.prepared_stderr && req->extra_fd == b->plan.prepared_extra;
}

// "0" would move the writer: the parent names the child.
static int join_cgroup_for(int procs_fd, pid_t pid) {
    char text[16];
    int length = snprintf(text, sizeof(text), "%d", (int)pid);
    ssize_t written;
    do {
        written = write(procs_fd, text, (size_t)length);
    } while (written < 0 && errno == EINTR);
    return written == length ? 0 : (written < 0 ? errno : EIO);
}

// Until the kernel clears in_setup (the child's execve or exit), at most until `deadline`
// (CLOCK_MONOTONIC, absolute: FUTEX_WAIT_BITSET's timeout). Not FUTEX_PRIVATE: the kernel's
// wake at CLONE_CHILD_CLEARTID is a shared one.
static int wait_for_exec(struct wk_block *b, const struct timespec *deadline) {
    for (;;) {
        int value = __atomic_load_n(&b->in_setup, __ATOMIC_ACQUIRE);
        if (value == 0) {
            return 1;
        }
        if (syscall(SYS_futex, &b->in_setup, FUTEX_WAIT_BITSET, value, deadline, NULL, FUTEX_BITSET_MATCH_ANY) < 0 && errno == ETIMEDOUT) {
            return __atomic_load_n(&b->in_setup, __ATOMIC_ACQUIRE) == 0;
        }
    }
}

int wk_spawn_prepared(const struct wk_spawn_request *req, struct wk_spawn_result *res) {
    struct wk_block *b = parked_block(req->prepared_ticket);
    if (b == NULL) {
        return WK_NOWAIT_UNAVAILABLE;
    }
    // A child that has exited (killed, or its setup failed) is gone: spawn another way.
    if (!fits(b, req) || __atomic_load_n(&b->in_setup, __ATOMIC_ACQUIRE) == 0 || !wk_block_copy_request(b, req)) {
        discard(b);
        return WK_NOWAIT_UNAVAILABLE;
    }
    b->req.cgroup_procs_fd = -1;
    b->req.prepared_ticket = 0;
    if (req->cgroup_procs_fd >= 0) {
        int error = join_cgroup_for(req->cgroup_procs_fd, b->pid);
        if (error != 0) {
            discard(b);
            return wk_spawn_fail(res, WK_STEP_CGROUP, error);
        }
    }
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += 1;
    ssize_t sent;
    do {
        sent = send(b->wake_fd, "w", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (sent < 0 && errno == EINTR);
    if (sent != 1) {
        discard(b);
        return WK_NOWAIT_UNAVAILABLE;
    }
    // Closed once the child has exec'd: the close of a socket took 10-11 us here, between
    // the wake and the child's turn on this CPU (latency-path.md, session 16). The block
    // is not ours after `parked` is cleared, so the fd goes in a local.
    int wake_fd = b->wake_fd;
    b->wake_fd = -1;
    pid_t pid = b->pid;
    int pidfd = b->pidfd;
    unsigned long long ticket = req->prepared_ticket;
    pthread_mutex_lock(&wk_blocks_lock);
    b->parked = 0;  // from here a nowait.c block: free once past the exec without a report
    pthread_mutex_unlock(&wk_blocks_lock);
    __atomic_add_fetch(&prepared_total, 1, __ATOMIC_RELAXED);

    int exec_seen = !req->report_later && wait_for_exec(b, &deadline);
    (void)close(wake_fd);
    if (!exec_seen) {
        wk_count_nowait();
        wk_spawn_succeed(res, pid, pidfd);
        res->report_ticket = ticket;
        return 0;
    }
    if (b->plan.report.step != WK_STEP_NONE) {
        int step = b->plan.report.step, error = b->plan.report.error;
        reap_pidfd(pidfd);
        (void)close(pidfd);
        wk_block_give_back(b);
        return wk_spawn_fail(res, step, error);
    }
    return wk_spawn_succeed(res, pid, pidfd);
}
