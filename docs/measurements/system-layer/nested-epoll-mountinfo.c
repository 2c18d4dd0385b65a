// Reproduces why MountWatcher does not wait for mountinfo through a nested epoll:
// build with `gcc -o nested nested-epoll-mountinfo.c` and run as root (it mounts a tmpfs
// on /tmp/nested/mnt, which must be creatable).
// Does a nested epoll lose mountinfo's POLLPRI when the outer epoll polls the inner twice?
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/stat.h>

static void change(const char *dir, int mountIt) {
    if (mountIt) { if (mount("nested-test", dir, "tmpfs", 0, NULL) != 0) { perror("mount"); exit(1); } }
    else if (umount2(dir, 0) != 0) { perror("umount"); exit(1); }
}

int main(void) {
    const char *dir = "/tmp/nested/mnt";
    mkdir("/tmp/nested", 0755);
    mkdir(dir, 0755);
    int info = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    int inner = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLPRI, .data.fd = info };
    epoll_ctl(inner, EPOLL_CTL_ADD, info, &ev);
    struct epoll_event out[4];

    // Case 1: change, then an outer epoll registers the inner (as libdispatch does on
    // activate, or re-arms with EPOLL_CTL_MOD after a handler), then waits.
    change(dir, 1);
    int outer = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event oev = { .events = EPOLLIN | EPOLLONESHOT, .data.fd = inner };
    epoll_ctl(outer, EPOLL_CTL_ADD, inner, &oev);
    int n1 = epoll_wait(outer, out, 4, 100);
    printf("change before outer registration: outer epoll_wait reported %d event(s)\n", n1);

    // Case 2: control, a single poller: plain poll() on a fresh mountinfo fd sees the change.
    int info2 = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    change(dir, 0);
    struct pollfd p = { .fd = info2, .events = POLLPRI };
    int n2 = poll(&p, 1, 100);
    printf("single poller: poll reported %d (revents 0x%x)\n", n2, p.revents);
    return 0;
}
