#ifndef WK_SPAWN_INTERNAL_H
#define WK_SPAWN_INTERNAL_H

// What the ways of making the child (spawn.c, nowait.c) and the child's setup (child.c)
// share; not part of the module's interface.

#include "wk_spawn.h"

#include <pthread.h>
#include <signal.h>

// The child's code runs on a borrowed stack (or in a forked copy), where AddressSanitizer's
// bookkeeping does not apply: its check before each noreturn call (_exit, execve failing)
// printed "ASan is ignoring requested __asan_handle_no_return" on the job's stderr in a
// sanitizer build. The child makes only syscalls, so nothing is lost by not instrumenting it.
// No stack protector either: its canary is read from the parent thread's TLS, and a
// prepared child (prepared.c) may outlive the thread that cloned it.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WK_CHILD_CODE __attribute__((no_sanitize("address"), no_stack_protector))
#endif
#endif
#ifndef WK_CHILD_CODE
#define WK_CHILD_CODE __attribute__((no_stack_protector))
#endif

// 1 where child.c makes its system calls itself (inline assembly), never through glibc:
// only there may the child run beside the parent in the parent's memory (nowait.c).
#if defined(__x86_64__) || defined(__aarch64__)
#define WK_RAW_SYSCALLS 1
#else
#define WK_RAW_SYSCALLS 0
#endif

// ThreadSanitizer cannot follow a child that shares the parent's memory: its clone
// interceptor fails a CHECK (tsan_rtl.cpp "!thr->slot") on CLONE_VM. A TSan build (make
// sanitize) starts every job through fork instead; the code after fork is the same.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WK_FORK_ONLY 1
#endif
#endif
#ifndef WK_FORK_ONLY
#define WK_FORK_ONLY 0
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
    // A prepared child's (prepared.c): the fds it installs as 1, 2 and 3 before its job is
    // known, and its end of the wake socket. Never rewritten once it is cloned.
    int prepared_stdout, prepared_stderr, prepared_extra, wake_fd;
};

// The child's whole life: setup, then execve; on failure the step and errno go to the
// report and the child exits with 127. Never returns.
__attribute__((noreturn)) void wk_run_child(struct child_plan *plan);

// clone's entry point: wk_run_child(arg).
int wk_child_entry(void *arg);

// A prepared child's entry point: the setup every job gets, then it waits on plan->wake_fd
// for its job (plan->req, written by the parent before the wake), then the rest and execve.
int wk_prepared_child_entry(void *arg);

// The daemon's /dev/null for every job's fd 0, opened once (spawn.c); -1 if it cannot be.
int wk_kept_null_fd(void);

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

// The blocks a child runs in without CLONE_VFORK (nowait.c): its stack at the top, its
// request and the request's strings at the bottom.
struct wk_block {
    // 1 from the clone until the kernel clears it. An int: the kernel writes a 32-bit 0.
    volatile int in_setup;
    // A ticket names it: not yet collected, and not recycled after its child's exec.
    int lent;
    // Held for a prepared child (prepared.c) until it is woken or discarded.
    int parked;
    // In the ticket, so that a spent ticket cannot collect a later child's report.
    unsigned generation;
    struct child_plan plan;  // plan.report: the child's
    struct wk_spawn_request req;
    // A prepared child's: the parent's end of its wake socket, its pid and pidfd.
    int wake_fd;
    pid_t pid;
    int pidfd;
    size_t used;
    _Alignas(16) char data[];
};

// Block size and the part of it kept for the child's stack.
#define WK_BLOCK_SIZE (64 * 1024)
#define WK_BLOCK_STACK (16 * 1024)

extern pthread_mutex_t wk_blocks_lock;
// The lowest free block, lent (in_setup set), or NULL.
struct wk_block *wk_block_take(int *index, unsigned *generation);
void wk_block_give_back(struct wk_block *b);
// Copies the request and its strings into the block; 0 if they do not fit.
int wk_block_copy_request(struct wk_block *b, const struct wk_spawn_request *req);
// The ticket's block while it is still lent to the ticket's child; call with the lock held.
struct wk_block *wk_block_of_ticket(unsigned long long ticket);
static inline unsigned long long wk_block_ticket(int index, unsigned generation) {
    return ((unsigned long long)generation << 8) | (unsigned long long)(index + 1);
}

// Counts a spawn that returned before its child's exec (wk_spawn_nowait_total).
void wk_count_nowait(void);

// prepared.c: wk_spawn for a request that names a prepared child. WK_NOWAIT_UNAVAILABLE
// when that child cannot take it (its descriptors differ, it is gone): it has then been
// discarded, and the caller spawns another way.
int wk_spawn_prepared(const struct wk_spawn_request *req, struct wk_spawn_result *res);

#endif
