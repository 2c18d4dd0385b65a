#ifndef WATCHKEEPER_SHIM_H
#define WATCHKEEPER_SHIM_H

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <errno.h>
#include <unistd.h>
#include <sys/xattr.h>
#include <syslog.h>

// glibc's memrchr and memmem are vectorised but declared only under _GNU_SOURCE,
// which the Glibc module does not define; declare them here.
extern void *memrchr(const void *s, int c, size_t n);
extern void *memmem(const void *haystack, size_t haystack_length, const void *needle, size_t needle_length);

static inline const void *wk_memrchr(const void *s, int c, size_t n) { return memrchr(s, c, n); }

// A hook's output file: a file in memory with no name in any directory, handed to the hook
// as a descriptor (declared only under _GNU_SOURCE too). MFD_CLOEXEC.
extern int memfd_create(const char *name, unsigned int flags);
static inline int wk_memfd_create(const char *name) { return memfd_create(name, 1U); }
static inline const void *wk_memmem(const void *h, size_t hl, const void *n, size_t nl) { return memmem(h, hl, n, nl); }

// "ENOSPC" for 28 (glibc 2.32+, also _GNU_SOURCE only); NULL for a number glibc does not know.
extern const char *strerrorname_np(int errnum);
static inline const char *wk_errno_name(int errnum) { return strerrorname_np(errnum); }

// Kernel constants Swift's Glibc module does not import, named once here.
// epoll (sys/epoll.h above) is not in the Glibc module at all; EPOLLIN, EPOLLPRI,
// epoll_create1 and friends come in through this header. F_SETPIPE_SZ and F_GETPIPE_SZ
// are behind _GNU_SOURCE in <fcntl.h>, which the Glibc module is built without; their
// values are kernel ABI (F_LINUX_SPECIFIC_BASE + 7 and + 8) and never change.
#ifdef F_SETPIPE_SZ
enum { WK_F_SETPIPE_SZ = F_SETPIPE_SZ, WK_F_GETPIPE_SZ = F_GETPIPE_SZ };
#else
enum { WK_F_SETPIPE_SZ = 1031, WK_F_GETPIPE_SZ = 1032 };
#endif
// waitid's P_PIDFD (Linux 5.4): glibc 2.36 has it in idtype_t only under _GNU_SOURCE.
enum { WK_P_PIDFD = 3 };
// The wait-status macros are expressions, which Swift does not import.
static inline int wk_wifsignaled(int status) { return WIFSIGNALED(status); }
static inline int wk_wtermsig(int status) { return WTERMSIG(status); }
static inline int wk_wcoredump(int status) { return WCOREDUMP(status); }
static inline int wk_wexitstatus(int status) { return WEXITSTATUS(status); }
// IN_ALL_EVENTS is an expression of other macros, which Swift does not import; the single
// IN_* bits (IN_MASK_ADD, IN_EXCL_UNLINK, IN_ONLYDIR, IN_UNMOUNT, ...) all do.
enum { WK_IN_ALL_EVENTS = IN_ALL_EVENTS };

// The control socket's peer: SO_PEERCRED's struct ucred and accept4 are _GNU_SOURCE only.
// The struct's layout is kernel ABI (pid, uid, gid), declared here under our own name.
struct wk_peer_credentials { pid_t pid; uid_t uid; gid_t gid; };
static inline int wk_get_peer_credentials(int fd, struct wk_peer_credentials *peer) {
    socklen_t length = sizeof *peer;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, peer, &length);
}
// SO_PEERGROUPS (Linux 4.13): the peer's supplementary groups as they were at connect().
// Returns how many, or -1 with errno (ERANGE when there are more than `capacity`).
#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif
static inline int wk_get_peer_groups(int fd, gid_t *groups, int capacity) {
    socklen_t length = (socklen_t)(capacity * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &length) != 0) return -1;
    return (int)(length / sizeof(gid_t));
}
extern int accept4(int fd, struct sockaddr *address, socklen_t *length, int flags);
static inline int wk_accept_nonblocking(int fd) { return accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK); }
// The largest socket path sockaddr_un holds (107 bytes and the NUL on Linux).
enum { WK_SUN_PATH_MAX = sizeof(((struct sockaddr_un *)0)->sun_path) - 1 };

// Job output to journald (Logging/JournalSocket.swift): many entries per syscall. Each
// entry is one datagram at `arena + spans[2i]`, `spans[2i + 1]` bytes long, on a socket
// connected to journald's native socket. sendmmsg and struct mmsghdr are _GNU_SOURCE only:
// the struct is declared here with the kernel's layout and the call made by number.
struct wk_mmsghdr { struct msghdr msg_hdr; unsigned int msg_len; };
enum { WK_SEND_BATCH = 64 };
// Returns how many entries went out (all of them unless an error stopped it, EAGAIN with
// MSG_DONTWAIT included), or -errno when the first one failed.
static inline long wk_send_datagrams(int fd, const unsigned char *arena, const size_t *spans, size_t count, int flags) {
    size_t sent = 0;
    while (sent < count) {
        struct wk_mmsghdr messages[WK_SEND_BATCH];
        struct iovec vectors[WK_SEND_BATCH];
        size_t batch = count - sent < WK_SEND_BATCH ? count - sent : WK_SEND_BATCH;
        memset(messages, 0, sizeof(struct wk_mmsghdr) * batch);
        for (size_t i = 0; i < batch; i++) {
            vectors[i].iov_base = (void *)(arena + spans[2 * (sent + i)]);
            vectors[i].iov_len = spans[2 * (sent + i) + 1];
            messages[i].msg_hdr.msg_iov = &vectors[i];
            messages[i].msg_hdr.msg_iovlen = 1;
        }
        long done = syscall(SYS_sendmmsg, fd, messages, (unsigned int)batch, MSG_NOSIGNAL | flags);
        if (done < 0) {
            if (errno == EINTR) continue;
            return sent > 0 ? (long)sent : -errno;
        }
        sent += (size_t)done;
    }
    return (long)sent;
}

// TFD_TIMER_CANCEL_ON_SET is a macro over an enum value, which Swift does not import.
static const int WK_TFD_TIMER_CANCEL_ON_SET = (1 << 1);

// A file's identity in one statx (what stat gives plus the birth time where the file
// system keeps one) and, optionally, its inode generation from name_to_handle_at: the
// handle is the inode's number and generation on ext4, xfs, btrfs and tmpfs, so a hash of
// it changes when a deleted file's inode number is reused. Both by syscall: glibc declares
// statx and name_to_handle_at only under _GNU_SOURCE, which the Glibc module lacks.
#include <linux/stat.h>

struct wk_file_identity {
    unsigned long long device;
    unsigned long long inode;
    long long size;
    long long modified_ns;
    long long changed_ns;
    long long born_ns;
    unsigned long long generation;
    unsigned long long links;
    unsigned int mode;
    int has_birth;
    int has_generation;
};

struct wk_file_handle {
    unsigned int handle_bytes;
    int handle_type;
    unsigned char f_handle[128];
};

static inline unsigned long long wk_makedev(unsigned int major, unsigned int minor) {
    // glibc's gnu_dev_makedev, so the number equals stat's st_dev.
    unsigned long long dev = ((unsigned long long)(major & 0x00000fffu)) << 8;
    dev |= ((unsigned long long)(major & 0xfffff000u)) << 32;
    dev |= ((unsigned long long)(minor & 0x000000ffu)) << 0;
    dev |= ((unsigned long long)(minor & 0xffffff00u)) << 12;
    return dev;
}

// What statx said, as an identity without the generation. with_birth: the birth time was
// asked for (a file system may fill it only then).
static inline void wk_fill_identity(const struct statx *info, int with_birth, struct wk_file_identity *out) {
    out->device = wk_makedev(info->stx_dev_major, info->stx_dev_minor);
    out->inode = info->stx_ino;
    out->size = (long long)info->stx_size;
    out->modified_ns = (long long)info->stx_mtime.tv_sec * 1000000000LL + info->stx_mtime.tv_nsec;
    out->changed_ns = (long long)info->stx_ctime.tv_sec * 1000000000LL + info->stx_ctime.tv_nsec;
    out->has_birth = with_birth && (info->stx_mask & STATX_BTIME) != 0;
    out->born_ns = out->has_birth ? (long long)info->stx_btime.tv_sec * 1000000000LL + info->stx_btime.tv_nsec : 0;
    out->links = info->stx_nlink;
    out->mode = info->stx_mode;
    out->has_generation = 0;
    out->generation = 0;
}

// 0, or -1 with errno. follow: 1 to follow a final symbolic link. with_generation: also
// read the inode generation (one more system call).
static inline int wk_file_identity(const char *path, int follow, int with_generation, struct wk_file_identity *out) {
    struct statx info;
    int flags = follow ? 0 : AT_SYMLINK_NOFOLLOW;
    long done;
    do {
        done = syscall(SYS_statx, AT_FDCWD, path, flags, STATX_BASIC_STATS | STATX_BTIME, &info);
    } while (done < 0 && errno == EINTR);
    if (done < 0) return -1;
    wk_fill_identity(&info, 1, out);
    if (with_generation) {
        struct wk_file_handle handle;
        int mount_id = 0;
        handle.handle_bytes = sizeof(handle.f_handle);
        if (syscall(SYS_name_to_handle_at, AT_FDCWD, path, &handle, &mount_id, follow ? AT_SYMLINK_FOLLOW : 0) == 0) {
            // FNV-1a over the handle's type and bytes.
            unsigned long long hash = 0xcbf29ce484222325ULL;
            unsigned char *type = (unsigned char *)&handle.handle_type;
            for (unsigned i = 0; i < sizeof(handle.handle_type); i++) { hash ^= type[i]; hash *= 0x100000001b3ULL; }
            for (unsigned i = 0; i < handle.handle_bytes && i < sizeof(handle.f_handle); i++) { hash ^= handle.f_handle[i]; hash *= 0x100000001b3ULL; }
            out->generation = hash;
            out->has_generation = 1;
        }
    }
    return 0;
}

// fcntl.h gives AT_EMPTY_PATH only under _GNU_SOURCE.
static const int WK_AT_EMPTY_PATH = 0x1000;
// statx: ask the server, not the client's attribute cache (FUSE, NFS, CIFS honour it).
static const int WK_AT_STATX_FORCE_SYNC = 0x2000;

// What a poll needs of an entry, relative to its directory's descriptor (one path
// component for the kernel to walk, not the whole path), with the birth time where the file
// system keeps one (the same statx: what tells a reused inode from the file it replaced).
// 0, or -1 with errno. flags: AT_SYMLINK_NOFOLLOW, or AT_EMPTY_PATH with name "" for the
// directory.
static inline int wk_poll_stat(int dirfd, const char *name, int flags, struct wk_file_identity *out) {
    struct statx info;
    long done;
    do {
        done = syscall(SYS_statx, dirfd, name, flags,
                       STATX_TYPE | STATX_MODE | STATX_INO | STATX_SIZE | STATX_MTIME | STATX_CTIME | STATX_BTIME, &info);
    } while (done < 0 && errno == EINTR);
    if (done < 0) return -1;
    wk_fill_identity(&info, 1, out);
    return 0;
}

// fanotify (Watching/FanotifyWatcher.swift): one mark on a whole file system that reports
// each event's directory as a file handle plus the entry's name, instead of one inotify
// watch per directory. linux/fanotify.h has the ABI (FAN_* bits, the record layouts);
// glibc's fanotify_init and fanotify_mark are called by number here like the rest, and
// open_by_handle_at and name_to_handle_at are _GNU_SOURCE only.
#include <linux/fanotify.h>

// Composite macros Swift does not import.
enum {
    WK_FAN_REPORT_DFID_NAME = FAN_REPORT_DFID_NAME,
    WK_FANOTIFY_METADATA_LEN = sizeof(struct fanotify_event_metadata),
    // Header, fsid and the file_handle's two ints: where the handle's bytes begin.
    WK_FANOTIFY_FID_HEADER_LEN = sizeof(struct fanotify_event_info_fid) + 2 * sizeof(int),
};
// MAX_HANDLE_SZ, the largest handle the kernel encodes (include/linux/exportfs.h).
enum { WK_MAX_HANDLE_SZ = 128 };
// O_LARGEFILE is 0 in glibc's 64-bit headers without _LARGEFILE64_SOURCE; the kernel forces
// it on 64-bit anyway, so 0 asks for nothing less.
#ifdef O_LARGEFILE
enum { WK_FAN_EVENT_FILE_FLAGS = O_RDONLY | O_LARGEFILE };
#else
enum { WK_FAN_EVENT_FILE_FLAGS = O_RDONLY };
#endif

#if !defined(__LP64__)
#error "wk_fanotify_mark passes the 64-bit mask as one argument, which only 64-bit ABIs do"
#endif

// The fd, or -1 with errno.
static inline int wk_fanotify_init(unsigned int flags, unsigned int event_file_flags) {
    return (int)syscall(SYS_fanotify_init, flags, event_file_flags);
}
// 0, or -1 with errno.
static inline int wk_fanotify_mark(int fd, unsigned int flags, unsigned long long mask, int dirfd, const char *path) {
    return (int)syscall(SYS_fanotify_mark, fd, flags, mask, dirfd, path);
}
// A handle as fanotify reported it (type and bytes) opened relative to mount_fd's mount:
// the fd, or -1 with errno (ESTALE: the inode no longer exists; EINVAL for a handle longer
// than MAX_HANDLE_SZ, which the kernel would refuse the same way).
static inline int wk_open_by_handle_at(int mount_fd, int handle_type, const unsigned char *bytes, unsigned int count, int flags) {
    struct wk_file_handle handle;
    if (count > sizeof(handle.f_handle)) { errno = EINVAL; return -1; }
    handle.handle_bytes = count;
    handle.handle_type = handle_type;
    memcpy(handle.f_handle, bytes, count);
    return (int)syscall(SYS_open_by_handle_at, mount_fd, &handle, flags);
}
// O_PATH is _GNU_SOURCE only; its value is kernel ABI (__O_PATH) on every architecture.
#ifdef O_PATH
enum { WK_O_PATH = O_PATH };
#else
enum { WK_O_PATH = 010000000 };
#endif
// statfs's f_fsid for fd, as the eight bytes fanotify reports in its records: 0, or -1
// with errno.
#include <sys/vfs.h>
static inline int wk_file_system_id(int fd, unsigned long long *out) {
    struct statfs info;
    if (fstatfs(fd, &info) != 0) return -1;
    memcpy(out, &info.f_fsid, sizeof *out);
    return 0;
}
// 0, or -1 with errno; `handle->handle_bytes` is set to the capacity here.
static inline int wk_name_to_handle_at(int dirfd, const char *path, struct wk_file_handle *handle, int *mount_id, int flags) {
    handle->handle_bytes = sizeof(handle->f_handle);
    return (int)syscall(SYS_name_to_handle_at, dirfd, path, handle, mount_id, flags);
}

// A thread of the daemon's own (ReadinessThread): its signal mask set before it runs its
// first instruction, its name for top and perf, its kernel id for the tests. The first two
// are _GNU_SOURCE only (glibc 2.32+ and 2.12+), and gettid needs glibc 2.30.
#include <pthread.h>
#include <sys/eventfd.h>
extern int pthread_attr_setsigmask_np(pthread_attr_t *attr, const sigset_t *sigmask);
extern int pthread_setname_np(pthread_t thread, const char *name);
static inline int wk_pthread_attr_block_every_signal(pthread_attr_t *attr) {
    sigset_t every;
    sigfillset(&every);
    return pthread_attr_setsigmask_np(attr, &every);
}
static inline int wk_pthread_set_name(const char *name) { return pthread_setname_np(pthread_self(), name); }
static inline int wk_gettid(void) { return (int)syscall(SYS_gettid); }
// For a test's child made without the spawn shim (which gets its pidfd from clone).
static inline int wk_pidfd_open(pid_t pid) { return (int)syscall(434 /* SYS_pidfd_open */, pid, 0); }

#endif
