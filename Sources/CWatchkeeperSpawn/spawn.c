// Starting job processes: a vfork-style clone for jobs that run as the daemon's own user
// (or one that does not wait for the child's exec, nowait.c, for a caller that can take the
// child's report later), fork for jobs that change credentials. Every child runs the same
// setup (child.c).
//
// Why two ways. A clone(CLONE_VM|CLONE_VFORK) child shares the daemon's memory and copies
// no page tables, so it reaches execve about 0.5 ms sooner than a fork child at the
// daemon's size, and its execve has no copied address space to tear down
// (docs/measurements/spawn.md). But setuid in such a child goes through glibc's setxid
// broadcast to the parent's threads and can hang (the credentials test under thread churn
// catches that); fork's child has one thread, so the bare setgroups, setgid and setuid
// system calls it makes (child.c) change the whole child and nothing else. posix_spawn is not used for either: it
// cannot change credentials, and glibc's leaves signals 32 and 33 ignored in the child.
//
// Between clone/fork and execve the child makes only raw system calls (child.c).

#define _GNU_SOURCE
#include "spawn_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// Debian 12's headers know both; older ones might not, and the kernel is what matters.
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

// The shared-memory child's stack. The child's setup needs a few hundred bytes; glibc's
// posix_spawn sizes its own from argv, which the child here never copies.
#define WK_CHILD_STACK_SIZE (64 * 1024)

static const char *const step_names[] = {
    [WK_STEP_NONE] = "none",
    [WK_STEP_PIPE] = "pipe2",
    [WK_STEP_FORK] = "fork",  // also clone: the same failure (EAGAIN, ENOMEM) to a reader
    [WK_STEP_PIDFD] = "pidfd_open",
    [WK_STEP_REPORT] = "read",
    [WK_STEP_CGROUP] = "write cgroup.procs",
    [WK_STEP_SIGNALS] = "rt_sigaction",
    [WK_STEP_SETSID] = "setsid",
    [WK_STEP_STDIN] = "open /dev/null",
    [WK_STEP_DUP] = "dup2",
    [WK_STEP_CLOSE_FDS] = "close_range",
    [WK_STEP_NICE] = "setpriority",
    [WK_STEP_NICE_LIMIT] = "prlimit RLIMIT_NICE",
    [WK_STEP_SETGROUPS] = "setgroups",
    [WK_STEP_SETGID] = "setgid",
    [WK_STEP_SETUID] = "setuid",
    [WK_STEP_CHDIR] = "chdir",
    [WK_STEP_SIGMASK] = "sigprocmask",
    [WK_STEP_EXEC] = "execve",
    [WK_STEP_DEADLINE] = "exec deadline",
};

const char *wk_spawn_step_name(int step) {
    if (step < 0 || (size_t)step >= sizeof(step_names) / sizeof(step_names[0])) {
        return "unknown step";
    }
    return step_names[step];
}

int wk_spawn_fail(struct wk_spawn_result *res, int step, int error) {
    res->pid = -1;
    res->pidfd = -1;
    res->failed_step = step;
    res->error = error;
    res->report_ticket = 0;
    return -1;
}

// Only for a child that has exited or was just sent SIGKILL: blocks until it is gone.
static void reap(pid_t pid) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}

static void close_keeping_errno(int fd) {
    int saved = errno;
    (void)close(fd);
    errno = saved;
}

int wk_spawn_succeed(struct wk_spawn_result *res, pid_t pid, int pidfd) {
    res->pid = pid;
    res->pidfd = pidfd;
    res->failed_step = WK_STEP_NONE;
    res->error = 0;
    res->report_ticket = 0;
    return 0;
}

static void clear_sigchld(unsigned long mask[WK_MASK_WORDS]) {
    enum { bits = 8 * sizeof(unsigned long) };
    mask[(SIGCHLD - 1) / bits] &= ~(1UL << ((SIGCHLD - 1) % bits));
}

// Every signal but SIGCHLD, the glibc-internal 32 and 33 included (pthread_sigmask leaves
// those out): the shared-memory child must not run one of the parent's handlers before it
// has reset the dispositions. SIGCHLD has none (SIG_DFL, never handled or waited for:
// exits are read from pidfds; and never SIG_IGN, see wk_spawn.h), and it stays unblocked in
// the spawning thread, before, during and after the clone: a job's exit signal goes to the
// thread that cloned it, and only where it is not blocked does the kernel discard an
// ignored signal as it is sent. Blocked there (libdispatch's workers block every signal)
// it was queued for the process and woke the one thread that took it: the main thread,
// parked by dispatch_main in sigsuspend with an empty mask, 0.9 times per job in a burst;
// with the mask restored less SIGCHLD but still blocked during each clone, another worker
// in clock_nanosleep instead (docs/measurements/latency-path.md).
void wk_block_every_signal_but_sigchld(unsigned long previous[WK_MASK_WORDS]) {
    unsigned long all[WK_MASK_WORDS];
    memset(all, 0xff, sizeof(all));
    clear_sigchld(all);
    (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, all, previous, _NSIG / 8);
}

// The mask before the clone, less SIGCHLD (see above).
void wk_restore_signals_but_sigchld(const unsigned long previous[WK_MASK_WORDS]) {
    unsigned long mask[WK_MASK_WORDS];
    memcpy(mask, previous, sizeof(mask));
    clear_sigchld(mask);
    (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, mask, NULL, _NSIG / 8);
}

// Child stacks are kept for the next spawn: an mmap per spawn costs a few page faults,
// and its munmap a TLB shootdown on every CPU that runs one of the daemon's threads. Spawns
// come from the jobs queue, one at a time, so one or two stacks are all that is ever kept.
#define WK_KEPT_STACKS 4
static pthread_mutex_t kept_stacks_lock = PTHREAD_MUTEX_INITIALIZER;
static void *kept_stacks[WK_KEPT_STACKS];

static void *take_stack(void) {
    void *stack = NULL;
    pthread_mutex_lock(&kept_stacks_lock);
    for (int i = 0; i < WK_KEPT_STACKS && stack == NULL; i++) {
        stack = kept_stacks[i];
        kept_stacks[i] = NULL;
    }
    pthread_mutex_unlock(&kept_stacks_lock);
    if (stack != NULL) {
        return stack;
    }
    stack = mmap(NULL, WK_CHILD_STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    return stack == MAP_FAILED ? NULL : stack;
}

static void give_back_stack(void *stack) {
    pthread_mutex_lock(&kept_stacks_lock);
    for (int i = 0; i < WK_KEPT_STACKS && stack != NULL; i++) {
        if (kept_stacks[i] == NULL) {
            kept_stacks[i] = stack;
            stack = NULL;
        }
    }
    pthread_mutex_unlock(&kept_stacks_lock);
    if (stack != NULL) {
        (void)munmap(stack, WK_CHILD_STACK_SIZE);
    }
}

// clone(CLONE_VM|CLONE_VFORK): returns once the child has exec'd or exited, with its
// report (if any) in plan->report. CLONE_PIDFD names the child without a pid race.
static int spawn_shared(struct child_plan *plan, struct wk_spawn_result *res) {
    plan->report_fd = -1;
    void *stack = take_stack();
    if (stack == NULL) {
        return wk_spawn_fail(res, WK_STEP_FORK, errno);
    }
    void *stack_top = (char *)stack + WK_CHILD_STACK_SIZE;  // grows down on every Linux target we build for

    unsigned long previous[WK_MASK_WORDS];
    wk_block_every_signal_but_sigchld(previous);
    int pidfd = -1;
    pid_t pid = clone(wk_child_entry, stack_top, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, plan, &pidfd);
    int clone_errno = errno;
    if (pid < 0 && clone_errno == EINVAL) {
        // A kernel before 5.2 has no CLONE_PIDFD: name the child with pidfd_open below.
        pidfd = -1;
        pid = clone(wk_child_entry, stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, plan);
        clone_errno = errno;
    }
    wk_restore_signals_but_sigchld(previous);
    // CLONE_VFORK: the child has exec'd or exited, so its stack is free again.
    give_back_stack(stack);
    if (pid < 0) {
        return wk_spawn_fail(res, WK_STEP_FORK, clone_errno);
    }
    if (plan->report.step != WK_STEP_NONE) {
        reap(pid);
        if (pidfd >= 0) {
            (void)close(pidfd);
        }
        return wk_spawn_fail(res, plan->report.step, plan->report.error);
    }
    if (pidfd < 0) {
        // Safe by pid: only we reap this child, so the pid cannot have been reused yet.
        pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0) {
            int error = errno;
            (void)kill(pid, SIGKILL);
            reap(pid);
            return wk_spawn_fail(res, WK_STEP_PIDFD, error);
        }
    }
    // CLONE_PIDFD sets close-on-exec on the pidfd itself (as pidfd_open does).
    return wk_spawn_succeed(res, pid, pidfd);
}

// fork: the child reports a failed step through a close-on-exec pipe; EOF means execve.
static int spawn_forked(struct child_plan *plan, struct wk_spawn_result *res) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) {
        return wk_spawn_fail(res, WK_STEP_PIPE, errno);
    }
    // The child keeps its end while it installs fds 0..3, so it must not be one of them
    // (possible only if the daemon runs with 0..2 closed).
    if (report[1] < WK_FIRST_SPARE_FD) {
        int moved = fcntl(report[1], F_DUPFD_CLOEXEC, WK_FIRST_SPARE_FD);
        int error = errno;
        (void)close(report[1]);
        if (moved < 0) {
            (void)close(report[0]);
            return wk_spawn_fail(res, WK_STEP_PIPE, error);
        }
        report[1] = moved;
    }
    plan->report_fd = report[1];

    // With every signal blocked, no handler of the parent's can run in the child before
    // the child has reset the dispositions.
    sigset_t all, previous;
    sigfillset(&all);
    sigdelset(&all, SIGCHLD);  // as in spawn_shared: discarded as it is sent
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pid_t pid = fork();
    if (pid == 0) {
        (void)close(report[0]);
        wk_run_child(plan);
    }
    int fork_errno = errno;
    sigdelset(&previous, SIGCHLD);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    (void)close(report[1]);
    if (pid < 0) {
        (void)close(report[0]);
        return wk_spawn_fail(res, WK_STEP_FORK, fork_errno);
    }

    // Safe by pid: only we reap this child, so the pid cannot have been reused yet.
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        int error = errno;
        (void)kill(pid, SIGKILL);
        (void)close(report[0]);
        reap(pid);
        return wk_spawn_fail(res, WK_STEP_PIDFD, error);
    }

    // EOF: execve succeeded and closed the child's close-on-exec copy of the write end
    // (or the child was killed before it could report; reaping will show the signal).
    struct child_report report_read;
    ssize_t got;
    do {
        got = read(report[0], &report_read, sizeof(report_read));
    } while (got < 0 && errno == EINTR);
    int read_errno = errno;
    close_keeping_errno(report[0]);

    if (got == 0) {
        return wk_spawn_succeed(res, pid, pidfd);
    }
    if (got == (ssize_t)sizeof(report_read)) {
        reap(pid);
        (void)close(pidfd);
        return wk_spawn_fail(res, report_read.step, report_read.error);
    }
    // A short report or a failed read: the child's state is unknown, so it must not run.
    (void)kill(pid, SIGKILL);
    reap(pid);
    (void)close(pidfd);
    return wk_spawn_fail(res, WK_STEP_REPORT, got < 0 ? read_errno : EIO);
}

// /dev/null opened once for the daemon's lifetime and shared by every job's fd 0, instead
// of an open (a path lookup) in each child between clone and execve. Sharing the open file
// description is harmless for /dev/null: reads give EOF whatever its offset or status
// flags. Close-on-exec and at or above WK_FIRST_SPARE_FD, so installing fd 0 never
// overwrites it. -1 if it cannot be opened: each child then opens its own and reports why.
static int kept_null = -1;

int wk_kept_null_fd(void) {
    int fd = __atomic_load_n(&kept_null, __ATOMIC_ACQUIRE);
    if (fd >= 0) {
        return fd;
    }
    int opened = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (opened >= 0 && opened < WK_FIRST_SPARE_FD) {
        int moved = fcntl(opened, F_DUPFD_CLOEXEC, WK_FIRST_SPARE_FD);
        (void)close(opened);
        opened = moved;
    }
    if (opened < 0) {
        return -1;
    }
    int expected = -1;
    if (!__atomic_compare_exchange_n(&kept_null, &expected, opened, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        (void)close(opened);  // another thread kept its own first
        return expected;
    }
    return opened;
}

int wk_spawn(const struct wk_spawn_request *req, struct wk_spawn_result *res) {
    if (req->stdout_fd < 0 || req->stderr_fd < 0) {
        return wk_spawn_fail(res, WK_STEP_DUP, EBADF);
    }
    // A child made ahead for this job's descriptors (prepared.c) saves the clone and most of
    // the setup; one that cannot take it is discarded there, and the job is spawned below.
    if (req->prepared_ticket != 0 && wk_prepare_supported()) {
        int rc = wk_spawn_prepared(req, res);
        if (rc != WK_NOWAIT_UNAVAILABLE) {
            if (rc == 0 && req->yield_after_exec && res->report_ticket == 0) {
                (void)sched_yield();  // as below
            }
            return rc;
        }
    }
    struct child_plan plan;
    memset(&plan, 0, sizeof(plan));
    plan.req = req;
    sigemptyset(&plan.empty_mask);
    plan.null_fd = req->stdin_fd >= 0 ? -1 : wk_kept_null_fd();
    if (req->set_credentials || req->force_fork || WK_FORK_ONLY) {
        return spawn_forked(&plan, res);
    }
    // Only where the child makes its system calls itself: it runs beside this thread, on
    // this thread's TLS (child.c).
    if (req->report_later && WK_RAW_SYSCALLS) {
        int rc = wk_spawn_nowait(&plan, res);
        if (rc != WK_NOWAIT_UNAVAILABLE) {
            return rc;
        }
    }
    int rc = spawn_shared(&plan, res);
    if (rc == 0 && req->yield_after_exec) {
        // The child releases our memory (and so wakes us) at the start of its execve, before
        // the kernel has loaded the new program, and the scheduler lets us preempt it on its
        // CPU: our work after the spawn then held the job's exec back by 100-150 us
        // (latency-path.md, "the parent after the clone"). Give the CPU back once; a no-op
        // when the child runs elsewhere.
        (void)sched_yield();
    }
    return rc;
}
