// The child's setup between clone/fork and execve, the same for every way the parent
// makes the child (spawn.c, nowait.c).
//
// Only raw system calls, made here with inline assembly, and no errno: another thread may
// have held a lock (malloc, the Swift runtime) at the clone, and a shared-memory child runs
// on the parent thread's TLS (no CLONE_SETTLS), where glibc's wrappers would write errno
// on each failure. Under CLONE_VFORK the parent sleeps meanwhile, so only a stale errno
// could show; a child that runs beside its parent (nowait.c) would write the errno of a
// thread that is running. Each call returns -errno, which goes to the report as a value.
// The child must also not write anything else the parent relies on, except its report.

#define _GNU_SOURCE
#include "spawn_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// Debian 12's headers know it; older ones might not, and the kernel is what matters.
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#if defined(__x86_64__)
WK_CHILD_CODE static inline long raw_syscall(long number, long a1, long a2, long a3, long a4) {
    register long r10 __asm__("r10") = a4;
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a1), "S"(a2), "d"(a3), "r"(r10)
                     : "rcx", "r11", "memory");
    return result;
}
#elif defined(__aarch64__)
WK_CHILD_CODE static inline long raw_syscall(long number, long a1, long a2, long a3, long a4) {
    register long x8 __asm__("x8") = number;
    register long x0 __asm__("x0") = a1;
    register long x1 __asm__("x1") = a2;
    register long x2 __asm__("x2") = a3;
    register long x3 __asm__("x3") = a4;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3)
                     : "memory", "cc");
    return x0;
}
#else
// Elsewhere through glibc: only the vfork and fork children run this (WK_RAW_SYSCALLS is 0),
// and in them errno is either the sleeping parent's or the child's own.
static long raw_syscall(long number, long a1, long a2, long a3, long a4) {
    long result = syscall(number, a1, a2, a3, a4);
    return result == -1 ? -errno : result;
}
#endif

#define SYSCALL4(number, a1, a2, a3, a4) raw_syscall((number), (long)(a1), (long)(a2), (long)(a3), (long)(a4))
#define SYSCALL3(number, a1, a2, a3) SYSCALL4(number, a1, a2, a3, 0)
#define SYSCALL2(number, a1, a2) SYSCALL4(number, a1, a2, 0, 0)
#define SYSCALL1(number, a1) SYSCALL4(number, a1, 0, 0, 0)
#define SYSCALL0(number) SYSCALL4(number, 0, 0, 0, 0)

// `error`: the failed call's errno (positive).
WK_CHILD_CODE __attribute__((noreturn)) static void report_and_exit(struct child_plan *plan, int step, int error) {
    struct child_report report = {step, error};
    if (plan->report_fd < 0) {
        plan->report = report;
    } else {
        long written;
        do {
            written = SYSCALL3(SYS_write, plan->report_fd, &report, sizeof(report));
        } while (written == -EINTR);
    }
    // 127 like a shell's "command not found"; the parent reports the real cause.
    // (exit_group ends only the child: it is its own thread group.)
    for (;;) {
        (void)SYSCALL1(SYS_exit_group, 127);
    }
}

// Returns a copy of fd at or above WK_FIRST_SPARE_FD (close-on-exec), so that installing
// fds 0..3 cannot overwrite a source that has not been installed yet; -errno on failure.
WK_CHILD_CODE static int move_above_targets(int fd) {
    if (fd < 0 || fd >= WK_FIRST_SPARE_FD) {
        return fd;
    }
    return (int)SYSCALL3(SYS_fcntl, fd, F_DUPFD_CLOEXEC, WK_FIRST_SPARE_FD);
}

// dup3 with no flags is dup2 (and clears close-on-exec on the target), but exists on every
// architecture; sources are never equal to targets here (dup3 refuses that). -errno.
WK_CHILD_CODE static int install(int fd, int target) {
    long rc;
    do {
        rc = SYSCALL3(SYS_dup3, fd, target, 0);
    } while (rc == -EINTR);
    return rc < 0 ? (int)rc : 0;
}

// The limit is read here, in the child and only on a kernel without close_range (< 5.9),
// not by the parent before every spawn: one system call less on the way to each job's exec.
WK_CHILD_CODE static int close_range_or_loop(unsigned first, unsigned last) {
    if (first > last) {
        return 0;
    }
    long rc = SYSCALL3(SYS_close_range, first, last, 0);
    if (rc != -ENOSYS) {
        return (int)rc;
    }
    long highest_fd = 65535;
    struct rlimit limit;
    if (SYSCALL4(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
        highest_fd = limit.rlim_cur > INT_MAX ? INT_MAX : (long)limit.rlim_cur;
    }
    for (long fd = first; fd <= (long)last && fd <= highest_fd; fd++) {
        (void)SYSCALL1(SYS_close, fd);
    }
    return 0;
}

// The child's fd 0: its own stdin, the daemon's kept /dev/null, or one it opens itself.
WK_CHILD_CODE static void install_stdin(struct child_plan *plan, int stdin_fd) {
    int rc;
    if (stdin_fd >= 0) {
        rc = install(stdin_fd, STDIN_FILENO);
    } else if (plan->null_fd >= 0) {
        rc = install(plan->null_fd, STDIN_FILENO);
    } else {
        long null_fd;
        do {
            null_fd = SYSCALL4(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY | O_CLOEXEC, 0);
        } while (null_fd == -EINTR);
        if (null_fd < 0) {
            report_and_exit(plan, WK_STEP_STDIN, (int)-null_fd);
        }
        if (null_fd == STDIN_FILENO) {
            rc = (int)SYSCALL3(SYS_fcntl, STDIN_FILENO, F_SETFD, 0);
        } else {
            rc = install((int)null_fd, STDIN_FILENO);
        }
    }
    if (rc < 0) {
        report_and_exit(plan, WK_STEP_DUP, -rc);
    }
}

// First, and before the credentials change (moving a process needs write access to the
// target's cgroup.procs): "0" moves the writer, so no process the job ever forks starts
// outside its cgroup, setsid or not.
WK_CHILD_CODE static void join_cgroup(struct child_plan *plan) {
    int procs = plan->req->cgroup_procs_fd;
    if (procs < 0) {
        return;
    }
    long rc;
    do {
        rc = SYSCALL3(SYS_write, procs, "0", 1);
    } while (rc == -EINTR);
    if (rc != 1) {
        report_and_exit(plan, WK_STEP_CGROUP, rc < 0 ? (int)-rc : EIO);
    }
}

// The fds the child installs as 0..3, each first moved out of that range (-1: none).
struct sources {
    int stdin_fd, stdout_fd, stderr_fd, extra_fd;
};

WK_CHILD_CODE static struct sources move_sources(struct child_plan *plan) {
    const struct wk_spawn_request *req = plan->req;
    struct sources moved = {
        req->stdin_fd >= 0 ? move_above_targets(req->stdin_fd) : -1,
        move_above_targets(req->stdout_fd),
        move_above_targets(req->stderr_fd),
        req->extra_fd >= 0 ? move_above_targets(req->extra_fd) : -1,
    };
    int results[] = {moved.stdout_fd, moved.stderr_fd, req->extra_fd >= 0 ? moved.extra_fd : 0, req->stdin_fd >= 0 ? moved.stdin_fd : 0};
    for (unsigned i = 0; i < sizeof(results) / sizeof(results[0]); i++) {
        if (results[i] < 0) {
            report_and_exit(plan, WK_STEP_DUP, -results[i]);
        }
    }
    return moved;
}

// Ignored signals survive execve (handlers do not), so the daemon's SIG_IGN for SIGPIPE,
// or for signal 32 as the test runner has it, would reach the job. The raw syscall because
// glibc's sigaction refuses its internal signals 32 and 33; an all-zero kernel sigaction is
// SIG_DFL, no flags, empty mask on every architecture. Then its own session, hence its own
// process group: the daemon stops a job with kill(-pid).
WK_CHILD_CODE static void reset_signals_and_session(struct child_plan *plan) {
    static const unsigned long default_action[8];
    long rc;
    for (int sig = 1; sig < _NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) {
            continue;
        }
        rc = SYSCALL4(SYS_rt_sigaction, sig, default_action, 0, _NSIG / 8);
        if (rc != 0) {
            report_and_exit(plan, WK_STEP_SIGNALS, (int)-rc);
        }
    }
    rc = SYSCALL0(SYS_setsid);
    if (rc < 0) {
        report_and_exit(plan, WK_STEP_SETSID, (int)-rc);
    }
}

// Fds 0..3, then everything else goes, close-on-exec or not: a job must not hold the
// daemon's inotify fd, sockets or another job's pipe (which would delay that job's EOF).
// A report pipe stays until execve closes it (it is close-on-exec).
WK_CHILD_CODE static void install_descriptors(struct child_plan *plan, struct sources moved) {
    install_stdin(plan, moved.stdin_fd);
    int installed = install(moved.stdout_fd, STDOUT_FILENO);
    if (installed == 0) {
        installed = install(moved.stderr_fd, STDERR_FILENO);
    }
    if (installed == 0 && moved.extra_fd >= 0) {
        installed = install(moved.extra_fd, 3);
    }
    if (installed < 0) {
        report_and_exit(plan, WK_STEP_DUP, -installed);
    }
    int report_fd = plan->report_fd;  // -1 for the shared-memory child
    unsigned first = moved.extra_fd >= 0 ? 4 : 3;
    int closed;
    if (report_fd >= 0) {
        closed = close_range_or_loop(first, (unsigned)report_fd - 1);
        if (closed == 0) {
            closed = close_range_or_loop((unsigned)report_fd + 1, ~0U);
        }
    } else {
        closed = close_range_or_loop(first, ~0U);
    }
    if (closed < 0) {
        report_and_exit(plan, WK_STEP_CLOSE_FDS, -closed);
    }
}

WK_CHILD_CODE static void set_priority_and_credentials(struct child_plan *plan) {
    const struct wk_spawn_request *req = plan->req;
    // Always set, never inherited: on Linux the nice value belongs to the thread, and the
    // child starts with that of whichever worker thread called wk_spawn. Before the
    // credentials, because lowering it again after a thread was reniced needs
    // CAP_SYS_NICE (or RLIMIT_NICE), which the daemon's uid 0 has and the job's user
    // may not. PRIO_PROCESS with 0 is the calling thread, here the child's only one.
    long rc = SYSCALL3(SYS_setpriority, PRIO_PROCESS, 0, req->niceness);
    if (rc != 0) {
        report_and_exit(plan, WK_STEP_NICE, (int)-rc);
    }
    // The unit gives the daemon RLIMIT_NICE (LimitNICE=-4) instead of CAP_SYS_NICE, for
    // libdispatch's higher-QoS threads; a job gets the kernel's default back, so it cannot
    // raise its own priority above nice 0. Lowering a limit never needs a privilege.
    static const struct rlimit no_nice_raise = {0, 0};
    rc = SYSCALL4(SYS_prlimit64, 0, RLIMIT_NICE, &no_nice_raise, 0);
    if (rc != 0) {
        report_and_exit(plan, WK_STEP_NICE_LIMIT, (int)-rc);
    }
    if (!req->set_credentials) {
        return;
    }
    // setgroups first (needs CAP_SETGID), setgid before setuid (setuid drops the
    // capability setgid needs). Only in a forked child (spawn.c), whose only thread this
    // is: the bare system calls change this thread's credentials, which is all of it.
    rc = SYSCALL2(SYS_setgroups, req->group_count, req->groups);
    if (rc != 0) {
        report_and_exit(plan, WK_STEP_SETGROUPS, (int)-rc);
    }
    rc = SYSCALL1(SYS_setgid, req->gid);
    if (rc != 0) {
        report_and_exit(plan, WK_STEP_SETGID, (int)-rc);
    }
    rc = SYSCALL1(SYS_setuid, req->uid);
    if (rc != 0) {
        report_and_exit(plan, WK_STEP_SETUID, (int)-rc);
    }
}

// What follows the setup every job gets: its nice value, its directory, an empty mask,
// and execve.
WK_CHILD_CODE __attribute__((noreturn)) static void finish_and_exec(struct child_plan *plan) {
    const struct wk_spawn_request *req = plan->req;
    set_priority_and_credentials(plan);

    // After the credentials, as systemd does: the job may enter only directories its
    // user may enter, and a root-squashed NFS directory works for its owner.
    long rc;
    if (req->cwd != NULL) {
        rc = SYSCALL1(SYS_chdir, req->cwd);
        if (rc != 0) {
            report_and_exit(plan, WK_STEP_CHDIR, (int)-rc);
        }
    }

    // Last, so that nothing above runs a default action halfway through setup; a signal
    // sent to the group meanwhile stays pending and takes effect here.
    rc = SYSCALL4(SYS_rt_sigprocmask, SIG_SETMASK, &plan->empty_mask, 0, _NSIG / 8);
    if (rc != 0) {
        report_and_exit(plan, WK_STEP_SIGMASK, (int)-rc);
    }

    // Last of all, after every step that could be slow: a start decided under a fleet
    // lease must not happen after the instant the decision was good until.
    if (req->exec_deadline_ns != 0) {
        struct timespec now;
        rc = SYSCALL2(SYS_clock_gettime, CLOCK_MONOTONIC, &now);
        if (rc != 0 || (unsigned long long)now.tv_sec * 1000000000ULL + (unsigned long long)now.tv_nsec >= req->exec_deadline_ns) {
            report_and_exit(plan, WK_STEP_DEADLINE, rc != 0 ? (int)-rc : ETIME);
        }
    }

    rc = SYSCALL3(SYS_execve, req->path, req->argv, req->envp);
    report_and_exit(plan, WK_STEP_EXEC, (int)-rc);
}

WK_CHILD_CODE __attribute__((noreturn)) void wk_run_child(struct child_plan *plan) {
    join_cgroup(plan);
    struct sources moved = move_sources(plan);
    reset_signals_and_session(plan);
    install_descriptors(plan, moved);
    finish_and_exec(plan);
}

WK_CHILD_CODE int wk_child_entry(void *arg) {
    wk_run_child((struct child_plan *)arg);
}

// The prepared child (prepared.c). Everything a job gets whatever it is, now; then the wake
// socket, as fd 4 (close-on-exec), is all it keeps besides 0..3. One byte on it: the parent
// has written the job into plan->req (and moved this process into the job's cgroup, if it
// has one); EOF: it was discarded or the daemon is gone. Signals stay blocked while it
// waits, as in any child's setup: one sent meanwhile takes effect at the empty mask.
WK_CHILD_CODE int wk_prepared_child_entry(void *arg) {
    struct child_plan *plan = arg;
    struct sources moved = {
        -1,
        move_above_targets(plan->prepared_stdout),
        move_above_targets(plan->prepared_stderr),
        move_above_targets(plan->prepared_extra),
    };
    int wake = move_above_targets(plan->wake_fd);
    if (moved.stdout_fd < 0 || moved.stderr_fd < 0 || moved.extra_fd < 0 || wake < 0) {
        report_and_exit(plan, WK_STEP_DUP, EBADF);
    }
    reset_signals_and_session(plan);
    // What ps and top show while it waits, instead of the cloning thread's name.
    (void)SYSCALL2(SYS_prctl, PR_SET_NAME, "wk-next-job");
    install_stdin(plan, -1);
    int installed = install(moved.stdout_fd, STDOUT_FILENO);
    if (installed == 0) {
        installed = install(moved.stderr_fd, STDERR_FILENO);
    }
    if (installed == 0) {
        installed = install(moved.extra_fd, 3);
    }
    if (installed == 0 && wake != 4) {
        long rc = SYSCALL3(SYS_dup3, wake, 4, O_CLOEXEC);
        installed = rc < 0 ? (int)rc : 0;
    }
    if (installed < 0) {
        report_and_exit(plan, WK_STEP_DUP, -installed);
    }
    int closed = close_range_or_loop(5, ~0U);
    if (closed < 0) {
        report_and_exit(plan, WK_STEP_CLOSE_FDS, -closed);
    }
    char byte;
    long got;
    do {
        got = SYSCALL3(SYS_read, 4, &byte, 1);
    } while (got == -EINTR);
    if (got != 1) {
        for (;;) {
            (void)SYSCALL1(SYS_exit_group, 0);
        }
    }
    finish_and_exec(plan);
}
