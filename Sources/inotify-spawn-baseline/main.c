// inotify-spawn-baseline: the practical lower bound for "a file was written, start a program",
// and the tiny job the watch benchmarks run (Sources/watchkeeper-bench/WatchBenchmarks.swift,
// results in docs/measurements/watch.md).
//
//   inotify-spawn-baseline --record FILE [PATH]
//       appends "<CLOCK_MONOTONIC ns> <PATH>\n" to FILE, the clock read first thing in main.
//   inotify-spawn-baseline --record-stdin DIR
//       reads stdin to its end (a batch job's list of files), then writes it unchanged to
//       DIR/<CLOCK_MONOTONIC ns at the end of stdin>-<pid>, through a dot file and rename(2)
//       so that a reader never sees half a list.
//   inotify-spawn-baseline --watch DIR [--recursive] --run PROGRAM [ARG...]
//       one inotify watch on DIR (IN_CLOSE_WRITE | IN_MOVED_TO), and for every file event
//       posix_spawnp(PROGRAM, ARGS) with "{path}" in any argument replaced by DIR/NAME.
//       --recursive also watches every directory below DIR that exists at start (no
//       directories created later: it is there for the idle measurement only).
//       SIGTERM or SIGINT prints "events E spawned S overflows O" on stderr and exits 0.
//
// Deliberately nothing else: no limit on concurrent children, no settle, no ledger, no
// rescan after IN_Q_OVERFLOW (lost events are counted and stay lost), zombies reaped with
// waitpid(WNOHANG) after each batch of events. Whatever watchkeeper costs above this loop
// is the price of its guarantees and its Swift runtime.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int record(const char *file, const char *path) {
    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);
    char line[PATH_MAX + 64];
    int length = snprintf(line, sizeof line, "%llu %s\n",
                          (unsigned long long)started.tv_sec * 1000000000ULL + (unsigned long long)started.tv_nsec, path);
    if (length < 0 || (size_t)length >= sizeof line) {
        fprintf(stderr, "inotify-spawn-baseline: unable to record %s: path too long\n", path);
        return 111;
    }
    int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "inotify-spawn-baseline: unable to open %s: %s\n", file, strerror(errno));
        return 111;
    }
    // One write(2) per line: O_APPEND writes to a regular file do not interleave, so many
    // jobs can record into the same file at once.
    ssize_t written = write(fd, line, (size_t)length);
    close(fd);
    return written == length ? 0 : 111;
}

static int record_stdin(const char *directory) {
    size_t size = 0, capacity = 1 << 16;
    char *data = malloc(capacity);
    for (;;) {
        if (data == NULL) {
            fprintf(stderr, "inotify-spawn-baseline: unable to read stdin: out of memory at %zu bytes\n", size);
            return 111;
        }
        if (size == capacity) {
            capacity *= 2;
            char *grown = realloc(data, capacity);
            if (grown == NULL) free(data);
            data = grown;
            continue;
        }
        ssize_t got = read(0, data + size, capacity - size);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            fprintf(stderr, "inotify-spawn-baseline: unable to read stdin: %s\n", strerror(errno));
            return 111;
        }
        if (got == 0) break;
        size += (size_t)got;
    }
    // Delivered: the whole list has been read.
    struct timespec ended;
    clock_gettime(CLOCK_MONOTONIC, &ended);
    unsigned long long ns = (unsigned long long)ended.tv_sec * 1000000000ULL + (unsigned long long)ended.tv_nsec;
    char temporary[PATH_MAX], final[PATH_MAX];
    snprintf(temporary, sizeof temporary, "%s/.%llu-%d", directory, ns, (int)getpid());
    snprintf(final, sizeof final, "%s/%llu-%d", directory, ns, (int)getpid());
    int fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "inotify-spawn-baseline: unable to create %s: %s\n", temporary, strerror(errno));
        return 111;
    }
    for (size_t done = 0; done < size;) {
        ssize_t put = write(fd, data + done, size - done);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            fprintf(stderr, "inotify-spawn-baseline: unable to write %s: %s\n", temporary, strerror(errno));
            close(fd);
            return 111;
        }
        done += (size_t)put;
    }
    close(fd);
    if (rename(temporary, final) != 0) {
        fprintf(stderr, "inotify-spawn-baseline: unable to rename %s to %s: %s\n", temporary, final, strerror(errno));
        return 111;
    }
    free(data);
    return 0;
}

static volatile sig_atomic_t stopping = 0;
static void request_stop(int signo) {
    (void)signo;
    stopping = 1;
}

static int inotify_fd = -1;
static char **watched_dirs = NULL; // indexed by watch descriptor
static int watched_capacity = 0;
static int watched_count = 0;

static int add_watch(const char *dir) {
    int wd = inotify_add_watch(inotify_fd, dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_ONLYDIR);
    if (wd < 0) {
        fprintf(stderr, "inotify-spawn-baseline: unable to watch %s: %s\n", dir, strerror(errno));
        return -1;
    }
    if (wd >= watched_capacity) {
        int capacity = watched_capacity ? watched_capacity : 64;
        while (capacity <= wd) capacity *= 2;
        char **grown = realloc(watched_dirs, (size_t)capacity * sizeof *grown);
        if (!grown) return -1;
        memset(grown + watched_capacity, 0, (size_t)(capacity - watched_capacity) * sizeof *grown);
        watched_dirs = grown;
        watched_capacity = capacity;
    }
    if (!watched_dirs[wd]) watched_count++;
    free(watched_dirs[wd]);
    watched_dirs[wd] = strdup(dir);
    return 0;
}

static int add_tree_entry(const char *path, const struct stat *info, int type, struct FTW *ftw) {
    (void)info;
    (void)ftw;
    if (type == FTW_D && add_watch(path) != 0) return 1;
    return 0;
}

// "{path}" replaced by `path` everywhere in `template`; a fresh string.
static char *substitute(const char *template, const char *path) {
    static const char placeholder[] = "{path}";
    size_t count = 0;
    for (const char *at = template; (at = strstr(at, placeholder)); at += sizeof placeholder - 1) count++;
    size_t size = strlen(template) + count * strlen(path) + 1;
    char *result = malloc(size), *out = result;
    if (!result) return NULL;
    const char *from = template, *at;
    while ((at = strstr(from, placeholder))) {
        memcpy(out, from, (size_t)(at - from));
        out += at - from;
        memcpy(out, path, strlen(path));
        out += strlen(path);
        from = at + sizeof placeholder - 1;
    }
    strcpy(out, from);
    return result;
}

static int watch(const char *dir, int recursive, char **program) {
    struct sigaction action = {0};
    action.sa_handler = request_stop; // no SA_RESTART: read(2) returns EINTR and the loop ends
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);

    inotify_fd = inotify_init1(IN_CLOEXEC);
    if (inotify_fd < 0) {
        fprintf(stderr, "inotify-spawn-baseline: unable to create an inotify instance: %s\n", strerror(errno));
        return 111;
    }
    if (recursive ? nftw(dir, add_tree_entry, 64, FTW_PHYS) != 0 : add_watch(dir) != 0) return 111;
    fprintf(stderr, "inotify-spawn-baseline: watching %d directories\n", watched_count);

    int arguments = 0;
    while (program[arguments]) arguments++;
    char **argv = calloc((size_t)arguments + 1, sizeof *argv);
    unsigned long long events = 0, spawned = 0, overflows = 0, failures = 0;
    char buffer[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
    char path[PATH_MAX];

    while (!stopping) {
        ssize_t count = read(inotify_fd, buffer, sizeof buffer);
        if (count < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "inotify-spawn-baseline: unable to read inotify events: %s\n", strerror(errno));
            return 111;
        }
        for (char *at = buffer; at < buffer + count;) {
            const struct inotify_event *event = (const struct inotify_event *)at;
            at += sizeof *event + event->len;
            events++;
            if (event->mask & IN_Q_OVERFLOW) {
                overflows++;
                continue;
            }
            if (event->len == 0 || (event->mask & IN_ISDIR) || event->wd >= watched_capacity || !watched_dirs[event->wd]) continue;
            snprintf(path, sizeof path, "%s/%s", watched_dirs[event->wd], event->name);
            for (int i = 0; i < arguments; i++) argv[i] = substitute(program[i], path);
            pid_t pid;
            int error = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
            for (int i = 0; i < arguments; i++) free(argv[i]);
            if (error == 0) {
                spawned++;
            } else if (failures++ == 0) {
                fprintf(stderr, "inotify-spawn-baseline: unable to run %s: %s\n", program[0], strerror(error));
            }
        }
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
    }
    // Jobs still running are waited for (up to 2 s), so none is left to a parent that may
    // never reap it.
    for (int waited = 0; waited < 200; waited++) {
        pid_t reaped = waitpid(-1, NULL, WNOHANG);
        if (reaped < 0 && errno == ECHILD) break;
        if (reaped == 0) usleep(10000);
    }
    fprintf(stderr, "events %llu spawned %llu overflows %llu\n", events, spawned, overflows);
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: inotify-spawn-baseline --record FILE [PATH]\n"
                    "       inotify-spawn-baseline --record-stdin DIR\n"
                    "       inotify-spawn-baseline --watch DIR [--recursive] --run PROGRAM [ARG...]\n");
    return 100;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "--record") == 0) return record(argv[2], argc >= 4 ? argv[3] : "");
    if (argc == 3 && strcmp(argv[1], "--record-stdin") == 0) return record_stdin(argv[2]);
    if (argc >= 5 && strcmp(argv[1], "--watch") == 0) {
        int next = 3, recursive = 0;
        if (strcmp(argv[next], "--recursive") == 0) {
            recursive = 1;
            next++;
        }
        if (next + 1 < argc && strcmp(argv[next], "--run") == 0) return watch(argv[2], recursive, argv + next + 1);
    }
    return usage();
}
