// The clone that does not wait: clone(CLONE_VM) without CLONE_VFORK, for a job that runs
// as the daemon's own user and a caller that takes the child's report after the child has
// exited. Under CLONE_VFORK the spawning thread (the jobs queue) sleeps until the child has
// exec'd, 69 % of a 20,000-file burst, so the queue's other work (job ends, the next
// requests) ran in series with every child's setup (issue 39; latency-path.md, "the clone
// that does not wait").
//
// The child runs beside its parent, in the parent's memory and on the parent thread's TLS.
// It makes only raw system calls (child.c) and writes nothing but a block of its own: its
// stack, and copies of the request and every string the request points to (the caller's
// are reused once wk_spawn returns). The kernel clears the block's `in_setup` word
// (CLONE_CHILD_CLEARTID) at the child's execve or exit. From then the block is free again,
// unless the child wrote a report into it (a step or the execve failed): that block is kept
// until the caller, having reaped the child, collects the report (wk_spawn_collect).
//
// The report is written before the child's exit_group, and the kernel clears the word on
// the exit path only after taking and releasing locks of its own (an order arm64 keeps as
// x86 does), so a cleared word without a report means the child exec'd or was killed.

#define _GNU_SOURCE
#include "spawn_internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

// 64 KiB each: the stack (the child's setup needs a few hundred bytes) at the top, the
// request's strings from the bottom. A burst's children are past their exec within a few
// hundred microseconds, so a handful of blocks are lent at any time; 32 bound the memory
// (2 MiB reserved at the first such spawn, touched only as blocks are used) and the
// children of failed spawns whose reports wait for their callers. Ticket: generation << 8
// | index + 1, so at most 255 blocks.
#define WK_BLOCKS 32

#define WK_BLOCK_DATA (WK_BLOCK_SIZE - WK_BLOCK_STACK - sizeof(struct wk_block))

pthread_mutex_t wk_blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static char *blocks;
static unsigned long long cloned_total;

unsigned long long wk_spawn_nowait_total(void) {
    return __atomic_load_n(&cloned_total, __ATOMIC_RELAXED);
}

void wk_count_nowait(void) {
    __atomic_add_fetch(&cloned_total, 1, __ATOMIC_RELAXED);
}

static struct wk_block *block_at(int index) {
    return (struct wk_block *)(blocks + (size_t)index * WK_BLOCK_SIZE);
}

// Never lent, or lent to a child that is past its setup without a report and not held
// for a prepared child (prepared.c) whose pidfd and wake socket are still in it.
static int is_free(struct wk_block *b) {
    if (!b->lent) {
        return 1;
    }
    if (b->parked) {
        return 0;
    }
    return __atomic_load_n(&b->in_setup, __ATOMIC_ACQUIRE) == 0 && b->plan.report.step == WK_STEP_NONE;
}

// The lowest free block, so that a burst keeps touching the same few pages; NULL if none.
struct wk_block *wk_block_take(int *index, unsigned *generation) {
    pthread_mutex_lock(&wk_blocks_lock);
    if (blocks == NULL) {
        size_t size = (size_t)WK_BLOCKS * WK_BLOCK_SIZE;
        void *mapped = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
        if (mapped != MAP_FAILED) {
            // A transparent huge page would make 2 MiB resident for a few KiB used.
            (void)madvise(mapped, size, MADV_NOHUGEPAGE);
            blocks = mapped;
        }
    }
    struct wk_block *taken = NULL;
    for (int i = 0; blocks != NULL && i < WK_BLOCKS && taken == NULL; i++) {
        struct wk_block *b = block_at(i);
        if (is_free(b)) {
            taken = b;
            b->lent = 1;
            b->parked = 0;
            b->generation++;
            b->in_setup = 1;  // before the lock goes: no other thread may take it meanwhile
            b->plan.report.step = WK_STEP_NONE;
            *index = i;
            *generation = b->generation;
        }
    }
    pthread_mutex_unlock(&wk_blocks_lock);
    return taken;
}

void wk_block_give_back(struct wk_block *b) {
    pthread_mutex_lock(&wk_blocks_lock);
    b->lent = 0;
    b->parked = 0;
    b->in_setup = 0;
    b->plan.report.step = WK_STEP_NONE;
    pthread_mutex_unlock(&wk_blocks_lock);
}

static void *copy_into(struct wk_block *b, const void *source, size_t size, size_t alignment) {
    size_t at = (b->used + alignment - 1) & ~(alignment - 1);
    if (at > WK_BLOCK_DATA || size > WK_BLOCK_DATA - at) {
        return NULL;
    }
    memcpy(b->data + at, source, size);
    b->used = at + size;
    return b->data + at;
}

static const char *copy_string(struct wk_block *b, const char *string) {
    return copy_into(b, string, strlen(string) + 1, 1);
}

static char *const *copy_vector(struct wk_block *b, char *const *vector) {
    size_t count = 0;
    while (vector[count] != NULL) {
        count++;
    }
    char **copy = copy_into(b, vector, (count + 1) * sizeof(char *), _Alignof(char *));
    for (size_t i = 0; copy != NULL && i < count; i++) {
        copy[i] = (char *)copy_string(b, vector[i]);
        if (copy[i] == NULL) {
            return NULL;
        }
    }
    return copy;
}

// 0 if a string does not fit. Never credentials (those are forked), so no groups.
int wk_block_copy_request(struct wk_block *b, const struct wk_spawn_request *req) {
    b->used = 0;
    b->req = *req;
    b->req.groups = NULL;
    b->req.group_count = 0;
    b->req.path = copy_string(b, req->path);
    b->req.cwd = req->cwd == NULL ? NULL : copy_string(b, req->cwd);
    b->req.argv = copy_vector(b, req->argv);
    b->req.envp = copy_vector(b, req->envp);
    return b->req.path != NULL && (req->cwd == NULL || b->req.cwd != NULL) && b->req.argv != NULL && b->req.envp != NULL;
}

int wk_spawn_nowait(const struct child_plan *plan, struct wk_spawn_result *res) {
    if (plan->req->set_credentials) {
        return WK_NOWAIT_UNAVAILABLE;
    }
    int index = 0;
    unsigned generation = 0;
    struct wk_block *b = wk_block_take(&index, &generation);
    if (b == NULL) {
        return WK_NOWAIT_UNAVAILABLE;
    }
    if (!wk_block_copy_request(b, plan->req)) {
        wk_block_give_back(b);
        return WK_NOWAIT_UNAVAILABLE;
    }
    b->plan = *plan;
    b->plan.req = &b->req;
    b->plan.report_fd = -1;
    b->plan.report.step = WK_STEP_NONE;
    b->plan.report.error = 0;
    void *stack_top = (char *)b + WK_BLOCK_SIZE;  // grows down on every Linux target we build for

    unsigned long previous[WK_MASK_WORDS];
    wk_block_every_signal_but_sigchld(previous);
    int pidfd = -1;
    pid_t pid = clone(wk_child_entry, stack_top, CLONE_VM | CLONE_PIDFD | CLONE_CHILD_CLEARTID | SIGCHLD, &b->plan, &pidfd, NULL,
                      &b->in_setup);
    int clone_errno = errno;
    wk_restore_signals_but_sigchld(previous);
    if (pid < 0) {
        wk_block_give_back(b);
        // EINVAL: a kernel before 5.2, without CLONE_PIDFD; the vfork path names the child
        // with pidfd_open instead, safe there because the child cannot have exited unseen.
        return clone_errno == EINVAL ? WK_NOWAIT_UNAVAILABLE : wk_spawn_fail(res, WK_STEP_FORK, clone_errno);
    }
    wk_count_nowait();
    wk_spawn_succeed(res, pid, pidfd);
    res->report_ticket = wk_block_ticket(index, generation);
    return 0;
}

// The ticket's block while it is still lent to the ticket's child; call with the lock held.
struct wk_block *wk_block_of_ticket(unsigned long long ticket) {
    int index = (int)(ticket & 0xff) - 1;
    unsigned generation = (unsigned)(ticket >> 8);
    if (blocks == NULL || index < 0 || index >= WK_BLOCKS) {
        return NULL;
    }
    struct wk_block *b = block_at(index);
    return b->lent && b->generation == generation ? b : NULL;
}

int wk_spawn_collect(unsigned long long ticket, struct wk_spawn_result *res, const char **path, const char **program,
                     const char **cwd) {
    int reported = 0;
    pthread_mutex_lock(&wk_blocks_lock);
    struct wk_block *b = wk_block_of_ticket(ticket);
    // The caller has reaped the child: it is gone, whether or not the kernel cleared the
    // word (it does not for a child that dumped core).
    if (b != NULL && b->plan.report.step != WK_STEP_NONE) {
        reported = 1;
        wk_spawn_fail(res, b->plan.report.step, b->plan.report.error);
        *path = b->req.path;
        *program = b->req.argv[0];
        *cwd = b->req.cwd;
    } else if (b != NULL) {
        b->lent = 0;
    }
    pthread_mutex_unlock(&wk_blocks_lock);
    return reported;
}

void wk_spawn_release(unsigned long long ticket) {
    pthread_mutex_lock(&wk_blocks_lock);
    struct wk_block *b = wk_block_of_ticket(ticket);
    if (b != NULL) {
        b->lent = 0;
        b->plan.report.step = WK_STEP_NONE;
    }
    pthread_mutex_unlock(&wk_blocks_lock);
}
