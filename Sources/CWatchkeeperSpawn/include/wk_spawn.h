#ifndef WK_SPAWN_H
#define WK_SPAWN_H

// Process spawning for job processes: clone(CLONE_VM) without waiting (nowait.c) or with
// CLONE_VFORK, or fork when the job changes credentials, then a fixed sequence of setup
// steps in the child (raw system calls, child.c), then execve. See spawn.c for why there
// are several ways and none is posix_spawn.

#include <stddef.h>
#include <sys/types.h>

// The step that failed, so an error can name the call and its object
// ("chdir /srv/x: No such file or directory"), not just an errno.
enum wk_spawn_step {
    WK_STEP_NONE = 0,
    WK_STEP_PIPE,       // parent: the error-report pipe
    WK_STEP_FORK,       // parent: fork or clone (or the clone's stack)
    WK_STEP_PIDFD,      // parent: pidfd_open
    WK_STEP_REPORT,     // parent: reading the child's report
    WK_STEP_CGROUP,     // child: joining the job's cgroup (write to its cgroup.procs)
    WK_STEP_SIGNALS,    // child: default dispositions
    WK_STEP_SETSID,     // child: setsid
    WK_STEP_STDIN,      // child: open /dev/null
    WK_STEP_DUP,        // child: installing fds 0..3
    WK_STEP_CLOSE_FDS,  // child: closing every other fd
    WK_STEP_NICE,       // child: setpriority
    WK_STEP_NICE_LIMIT, // child: prlimit RLIMIT_NICE to 0
    WK_STEP_SETGROUPS,  // child: setgroups
    WK_STEP_SETGID,     // child: setgid
    WK_STEP_SETUID,     // child: setuid
    WK_STEP_CHDIR,      // child: chdir
    WK_STEP_SIGMASK,    // child: empty signal mask
    WK_STEP_EXEC,       // child: execve
    WK_STEP_DEADLINE,   // child: the request's exec deadline had passed (ETIME); nothing exec'd
};

struct wk_spawn_request {
    const char *path;             // executable, already resolved; relative paths resolve after cwd
    char *const *argv;            // NULL-terminated
    char *const *envp;            // NULL-terminated; the child's whole environment
    const char *cwd;              // NULL: inherit
    int niceness;                 // always set in the child (-20..19): see run_child for why
    int set_credentials;          // nonzero: setgroups(groups), setgid(gid), setuid(uid)
    uid_t uid;
    gid_t gid;
    const gid_t *groups;          // may be NULL when group_count is 0 (drops all groups)
    size_t group_count;
    int stdin_fd;                 // installed as fd 0, or -1 for /dev/null
    int stdout_fd;                // installed as fd 1
    int stderr_fd;                // installed as fd 2
    int extra_fd;                 // installed as fd 3, or -1 for none
    int force_fork;               // nonzero: fork even without credentials (tests, benchmarks)
    int cgroup_procs_fd;          // the job's cgroup.procs opened for writing, or -1: the child
                                  // moves itself there before anything else, so all it forks
                                  // later is in the job's cgroup too
    int yield_after_exec;         // nonzero: sched_yield once the child has exec'd (shared-memory
                                  // clone only), so the spawning thread does not hold it back
    int report_later;             // nonzero: return once the child is cloned, without waiting for
                                  // its exec, where that is possible (nowait.c); a step that fails
                                  // in the child is then collected after the child has exited
                                  // (wk_spawn_collect). Ignored with set_credentials or force_fork.
    unsigned long long prepared_ticket; // nonzero: a child from wk_prepare, used if its descriptors
                                  // are this request's (stdin /dev/null, stdout, stderr, extra) and
                                  // the job runs as the daemon's user; discarded otherwise. Spent
                                  // either way.
    unsigned long long exec_deadline_ns; // nonzero: CLOCK_MONOTONIC nanoseconds from which the child
                                  // must not exec; read by the child just before its execve, so a
                                  // parent stopped (SIGSTOP) or starved between deciding and
                                  // spawning cannot start the program late (WK_STEP_DEADLINE).
};

struct wk_spawn_result {
    pid_t pid;                    // valid only on success
    int pidfd;                    // O_CLOEXEC; the caller owns it (valid only on success)
    int error;                    // errno of the failed step, 0 on success
    int failed_step;              // enum wk_spawn_step, WK_STEP_NONE on success
    unsigned long long report_ticket; // nonzero: the spawn did not wait for the child's exec, and
                                  // the child's report is collected with this (on success only)
};

// Returns only after the child has called execve successfully (0) or has failed and
// been reaped (-1, with the step and errno in *res). Never leaves an fd or a zombie
// behind on failure. SIGCHLD must not be SIG_IGN (the kernel would reap the child
// before pidfd_open can name it). With report_later, 0 and a nonzero res->report_ticket
// mean only that the child was cloned: collect its report once it has exited.
int wk_spawn(const struct wk_spawn_request *req, struct wk_spawn_result *res);

// What became of a child spawned with a report ticket, called once the caller has reaped it
// (never before: its report may still be on its way). 1: a setup step or the execve failed,
// with the step and errno in *res, and *path, *program (argv[0]) and *cwd (or NULL) pointing
// at the child's copies, valid until wk_spawn_release(ticket), which must follow. 0: the
// child exec'd (or was killed before it could report), and the ticket is spent.
int wk_spawn_collect(unsigned long long ticket, struct wk_spawn_result *res, const char **path, const char **program,
                     const char **cwd);

// Gives back the block of a ticket whose collect returned 1.
void wk_spawn_release(unsigned long long ticket);

// Spawns that returned before their child's exec since the start (every thread's): cloned
// without waiting, or a prepared child woken without waiting.
unsigned long long wk_spawn_nowait_total(void);

// A child made ahead of its job, so that a job's spawn is a wake instead of a clone and the
// setup every job gets (prepared.c): cloned now in the daemon's memory, it resets its signal
// dispositions, makes its own session, installs /dev/null, stdout_fd, stderr_fd and extra_fd
// as fds 0..3, closes every other fd and waits. 0 with its ticket and pid, or -errno (no
// block free, a kernel or build where children cannot run beside their parent: -ENOSYS).
// The child exits by itself if the daemon goes (its wake socket reads EOF).
int wk_prepare(int stdout_fd, int stderr_fd, int extra_fd, unsigned long long *ticket, pid_t *pid);

// 1 where wk_prepare can work: an architecture whose child makes raw system calls (x86_64,
// aarch64), in a build that is not ThreadSanitizer's (which forks every child).
int wk_prepare_supported(void);

// Ends a prepared child nobody will use: SIGKILL, reaped before this returns (it makes no
// call that could hold a SIGKILL off), its block given back. A spent ticket is ignored.
void wk_prepared_discard(unsigned long long ticket);

// Jobs started in a prepared child since the start (every thread's).
unsigned long long wk_spawn_prepared_total(void);

// "fork", "chdir", "execve", ...; "unknown step" for values outside the enum.
const char *wk_spawn_step_name(int step);

#endif
