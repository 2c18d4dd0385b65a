// What the daemon's fanotify backend asks of the kernel, one step at a time, as a unit's
// sandbox allows it: fanotify_init with directory handles and names, a file system mark
// (and, to compare, a mount mark), an event for a file created from outside the process's
// mount namespace, and open_by_handle_at on the directory handle that event carries.
//
//   cc -O2 -o fanotify-probe fanotify-probe.c
//   fanotify-probe DIR [SECONDS]
//
// Creates DIR/probe-self itself, then waits SECONDS (default 0) for a file someone else
// creates in DIR (the harness writes DIR/from-outside from another mount namespace).
// One line per step: "STEP ok" or "STEP failed: ERRNO-NAME (text)". Exits 0 if every step
// up to the open passed. Used by run-in-e2e.sh; see ../fanotify-unit.md.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef FAN_REPORT_DFID_NAME
#define FAN_REPORT_DFID_NAME (FAN_REPORT_DIR_FID | FAN_REPORT_NAME)
#endif

static void say_status(void) {
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "CapEff:", 7) || !strncmp(line, "CapBnd:", 7) || !strncmp(line, "Seccomp:", 8) ||
            !strncmp(line, "NoNewPrivs:", 11))
            fputs(line, stdout);
    fclose(f);
}

static int step(const char *name, long rc) {
    if (rc < 0) {
        int e = errno;
        printf("%s failed: %s (%s)\n", name, strerrorname_np(e), strerror(e));
        return 0;
    }
    printf("%s ok\n", name);
    return 1;
}

// Reads events until one names `want` (or the deadline), and opens its directory handle.
static int wait_and_open(int group, int mount_fd, const char *want, int seconds) {
    char buf[8192] __attribute__((aligned(8)));
    for (int waited = 0; waited <= seconds * 10; waited++) {
        struct pollfd p = {group, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t n = read(group, buf, sizeof buf);
        if (n <= 0) continue;
        for (struct fanotify_event_metadata *m = (void *)buf; FAN_EVENT_OK(m, n); m = FAN_EVENT_NEXT(m, n)) {
            struct fanotify_event_info_fid *fid = (void *)(m + 1);
            if (fid->hdr.info_type != FAN_EVENT_INFO_TYPE_DFID_NAME) continue;
            struct file_handle *h = (void *)fid->handle;
            const char *name = (const char *)h->f_handle + h->handle_bytes;
            if (strcmp(name, want)) continue;
            printf("event for %s ok (mask 0x%llx)\n", want, (unsigned long long)m->mask);
            int dir = (int)syscall(SYS_open_by_handle_at, mount_fd, h, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (!step("open_by_handle_at", dir)) return 0;
            char link[64], path[4096];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dir);
            ssize_t len = readlink(link, path, sizeof path - 1);
            if (len >= 0) { path[len] = 0; printf("directory handle opens %s\n", path); }
            close(dir);
            return 1;
        }
    }
    printf("event for %s failed: none within %d s\n", want, seconds);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [SECONDS]\n", argv[0]); return 2; }
    const char *dir = argv[1];
    int seconds = argc > 2 ? atoi(argv[2]) : 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    say_status();
    int ok = 1;

    int group = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_DFID_NAME, O_RDONLY);
    if (!step("fanotify_init(FAN_REPORT_DFID_NAME)", group)) return 1;
    uint64_t mask = FAN_CREATE | FAN_CLOSE_WRITE | FAN_MOVED_TO | FAN_ONDIR;
    ok &= step("fanotify_mark(FAN_MARK_FILESYSTEM)", fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, mask, AT_FDCWD, dir));

    // A mount mark sees only what is done through this mount: in a unit with a mount namespace
    // of its own (PrivateMounts=, ProtectSystem=, PrivateTmp=...) that is not what others do.
    // Mount marks take no directory handles (EINVAL): a group that opens each file instead.
    int mount_group = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK, O_RDONLY | O_CLOEXEC);
    if (mount_group >= 0 &&
        !step("fanotify_mark(FAN_MARK_MOUNT)", fanotify_mark(mount_group, FAN_MARK_ADD | FAN_MARK_MOUNT, FAN_CLOSE_WRITE, AT_FDCWD, dir))) {
        close(mount_group);
        mount_group = -1;
    }

    int mount_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (!step("open(DIR)", mount_fd)) return 1;
    char self[4096];
    snprintf(self, sizeof self, "%s/probe-self", dir);
    int f = open(self, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (step("create DIR/probe-self", f)) close(f);
    if (ok) ok &= wait_and_open(group, mount_fd, "probe-self", 2);
    if (ok && seconds > 0) {
        printf("waiting %d s for DIR/from-outside\n", seconds);
        ok &= wait_and_open(group, mount_fd, "from-outside", seconds);
        if (mount_group >= 0) {
            // Drain what the mount mark heard: did it see the outside write?
            char buf[8192] __attribute__((aligned(8)));
            ssize_t n = read(mount_group, buf, sizeof buf);
            int seen = 0;
            for (struct fanotify_event_metadata *m = (void *)buf; n > 0 && FAN_EVENT_OK(m, n); m = FAN_EVENT_NEXT(m, n)) {
                if (m->fd < 0) continue;
                char link[64], path[4096];
                snprintf(link, sizeof link, "/proc/self/fd/%d", m->fd);
                ssize_t len = readlink(link, path, sizeof path - 1);
                if (len >= 0) { path[len] = 0; if (strstr(path, "/from-outside")) seen = 1; }
                close(m->fd);
            }
            printf("mount mark saw from-outside: %s\n", seen ? "yes" : "no");
        }
    }
    return ok ? 0 : 1;
}
