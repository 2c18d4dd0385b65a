#ifndef WK_SPAWN_INTERNAL_H
#define WK_SPAWN_INTERNAL_H

// What the ways of making the child (spawn.c, nowait.c) and the child's setup (child.c)
// share; not part of the module's interface.

#include "wk_spawn.h"

#include <signal.h>

// The child's code runs on a borrowed stack (or in a forked copy), where AddressSanitizer's
// bookkeeping does not apply: its check before each noreturn call (_exit, execve failing)
// printed "ASan is ignoring requested __asan_handle_no_return" on the job's stderr in a
// sanitizer build. The child makes only syscalls, so nothing is lost by not instrumenting it.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WK_CHILD_CODE __attribute__((no_sanitize("address")))
#endif
#endif
#ifndef WK_CHILD_CODE
#define WK_CHILD_CODE
#endif

// 1 where child.c makes its system calls itself (inline assembly), never through glibc:
// only there may the child run beside the parent in the parent's memory (nowait.c).
#if defined(__x86_64__) || defined(__aarch64__)
#define WK_RAW_SYSCALLS 1
#else
#define WK_RAW_SYSCALLS 0
#endif

// The child installs fds 0..3; everything it still needs is first moved at or above this.
#define WK_FIRST_SPARE_FD 4

struct child_report {
    int step;
    int error;
};

// Everything the child needs, prepared by the parent so the child only makes syscalls.
struct child_plan {
    const struct wk_spawn_request *req;
    // fork: the write end of the report pipe. Shared-memory child: -1, and the child
    // reports into `report` instead, which the parent reads once the child has exec'd or
    // exited (CLONE_VFORK: when clone returns; nowait.c: when the caller collects it).
    int report_fd;
    struct child_report report;
    sigset_t empty_mask;
    // The daemon's kept /dev/null (see kept_null_fd) for a child without a stdin of its
    // own, or -1: the child opens /dev/null itself.
    int null_fd;
};

// The child's whole life: setup, then execve; on failure the step and errno go to the
// report and the child exits with 127. Never returns.
__attribute__((noreturn)) void wk_run_child(struct child_plan *plan);

// clone's entry point: wk_run_child(arg).
int wk_child_entry(void *arg);

// The result of a spawn that failed at `step` (with errno `error`), or that succeeded.
int wk_spawn_fail(struct wk_spawn_result *res, int step, int error);
int wk_spawn_succeed(struct wk_spawn_result *res, pid_t pid, int pidfd);

// The spawning thread's signal mask around a clone (spawn.c says why SIGCHLD stays open).
#define WK_MASK_WORDS (_NSIG / (8 * sizeof(unsigned long)))
void wk_block_every_signal_but_sigchld(unsigned long previous[WK_MASK_WORDS]);
void wk_restore_signals_but_sigchld(const unsigned long previous[WK_MASK_WORDS]);

// nowait.c: clones the child without waiting for its exec. WK_NOWAIT_UNAVAILABLE when it
// cannot (no block free, the strings too large for one, a kernel without CLONE_PIDFD):
// the caller spawns the child another way.
#define WK_NOWAIT_UNAVAILABLE 1
int wk_spawn_nowait(const struct child_plan *plan, struct wk_spawn_result *res);

#endif
