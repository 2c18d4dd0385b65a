// systemd's notification, journal and journal-stream protocols, written from their
// documentation (sd_notify(3), sd_journal_sendv(3), sd_journal_stream_fd(3), systemd's
// JOURNAL_NATIVE_PROTOCOL.md) so that the daemon needs no libsystemd: see wk_systemd.h.

#define _GNU_SOURCE
#include "wk_systemd.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

// libsystemd's send buffer for journal and notification sockets: room for many entries in
// flight, so a burst does not block on each datagram while journald catches up.
#define SEND_BUFFER (8 * 1024 * 1024)

// SO_SNDBUF, and SO_SNDBUFFORCE (CAP_NET_ADMIN) past the kernel's wmem_max when that capped
// it; the kernel reports twice what it was asked for.
static void raise_send_buffer(int fd) {
    int value = 0;
    socklen_t size = sizeof value;
    if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, &size) == 0 && value >= 2 * SEND_BUFFER) return;
    value = SEND_BUFFER;
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, sizeof value);
    size = sizeof value;
    if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, &size) == 0 && value >= 2 * SEND_BUFFER) return;
    value = SEND_BUFFER;
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &value, sizeof value);
}

// An absolute path, or '@' and an abstract name (a NUL byte, then the name, no NUL after).
static int unix_address(const char *name, struct sockaddr_un *address, socklen_t *length) {
    size_t size = strlen(name);
    if ((name[0] != '/' && name[0] != '@') || size < 2) return -EINVAL;
    memset(address, 0, sizeof *address);
    address->sun_family = AF_UNIX;
    if (name[0] == '@') {
        if (size > sizeof address->sun_path) return -EINVAL;
        memcpy(address->sun_path + 1, name + 1, size - 1);
        *length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + size);
    } else {
        if (size >= sizeof address->sun_path) return -EINVAL;
        memcpy(address->sun_path, name, size);
        *length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + size + 1);
    }
    return 0;
}

static ssize_t send_message(int fd, const struct msghdr *message) {
    ssize_t sent;
    do sent = sendmsg(fd, message, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    return sent;
}

int wk_notify(const char *socket_name, const char *state, size_t length) {
    struct sockaddr_un address;
    socklen_t address_length;
    int result = unix_address(socket_name, &address, &address_length);
    if (result < 0) return result;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    raise_send_buffer(fd);
    struct iovec vector = {.iov_base = (void *)state, .iov_len = length};
    struct msghdr message = {.msg_name = &address, .msg_namelen = address_length, .msg_iov = &vector, .msg_iovlen = 1};
    result = send_message(fd, &message) < 0 ? -errno : 1;
    close(fd);
    return result;
}

// One socket for the whole process, made once (atomically: any thread may log first) and
// never connected, so a restarted journald is found at the path by the next entry.
static int journal_fd_plus_one;

static int journal_socket(void) {
    for (;;) {
        int current = __atomic_load_n(&journal_fd_plus_one, __ATOMIC_ACQUIRE);
        if (current > 0) return current - 1;
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -errno;
        raise_send_buffer(fd);
        int expected = 0;
        if (__atomic_compare_exchange_n(&journal_fd_plus_one, &expected, fd + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return fd;
        close(fd);
    }
}

// An entry too big for one datagram: its bytes in a sealed memfd, the descriptor passed
// to journald with no data (the protocol's way for large entries).
static int send_as_memfd(int fd, const struct sockaddr_un *address, socklen_t address_length, const struct iovec *parts, size_t count) {
    int memfd = memfd_create("journal-entry", MFD_ALLOW_SEALING | MFD_CLOEXEC);
    if (memfd < 0) return -errno;
    int result = 0;
    if (writev(memfd, parts, (int)count) < 0
        || fcntl(memfd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0) {
        result = -errno;
    } else {
        union {
            struct cmsghdr header;
            char space[CMSG_SPACE(sizeof(int))];
        } control;
        memset(&control, 0, sizeof control);
        struct msghdr message = {.msg_name = (void *)address, .msg_namelen = address_length,
                                 .msg_control = &control, .msg_controllen = sizeof control};
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(header), &memfd, sizeof(int));
        if (send_message(fd, &message) < 0 && errno != ENOENT) result = -errno;
    }
    close(memfd);
    return result;
}

int wk_journal_sendv(const char *path, const struct iovec *fields, int count) {
    if (!fields || count <= 0) return -EINVAL;
    struct sockaddr_un address;
    socklen_t address_length;
    if (path[0] != '/') return -EINVAL;
    int result = unix_address(path, &address, &address_length);
    if (result < 0) return result;
    // At most five parts a field: name, newline, length, value, newline.
    struct iovec *parts = malloc(sizeof(struct iovec) * 5 * (size_t)count);
    uint64_t *lengths = malloc(sizeof(uint64_t) * (size_t)count);
    static char newline = '\n';
    size_t used = 0;
    if (!parts || !lengths) {
        result = -ENOMEM;
        goto done;
    }
    for (int i = 0; i < count; i++) {
        const char *field = fields[i].iov_base;
        size_t size = fields[i].iov_len;
        const char *equals = field && size > 1 ? memchr(field, '=', size) : NULL;
        if (!equals || equals == field) {
            result = -EINVAL;
            goto done;
        }
        const char *line_break = memchr(field, '\n', size);
        if (line_break) {
            if (line_break < equals) {
                result = -EINVAL;
                goto done;
            }
            size_t name = (size_t)(equals - field);
            lengths[i] = htole64((uint64_t)(size - name - 1));
            parts[used++] = (struct iovec){.iov_base = (void *)field, .iov_len = name};
            parts[used++] = (struct iovec){.iov_base = &newline, .iov_len = 1};
            parts[used++] = (struct iovec){.iov_base = &lengths[i], .iov_len = sizeof lengths[i]};
            parts[used++] = (struct iovec){.iov_base = (void *)(equals + 1), .iov_len = size - name - 1};
        } else {
            parts[used++] = fields[i];
        }
        parts[used++] = (struct iovec){.iov_base = &newline, .iov_len = 1};
    }
    int fd = journal_socket();
    if (fd < 0) {
        result = fd;
        goto done;
    }
    struct msghdr message = {.msg_name = &address, .msg_namelen = address_length, .msg_iov = parts, .msg_iovlen = used};
    if (send_message(fd, &message) >= 0 || errno == ENOENT) {
        result = 0; // sent, or no journal here: nothing to tell the caller (as libsystemd)
    } else if (errno == EMSGSIZE || errno == ENOBUFS || errno == EAGAIN) {
        result = send_as_memfd(fd, &address, address_length, parts, used);
    } else {
        result = -errno;
    }
done:
    free(parts);
    free(lengths);
    return result;
}

int wk_journal_stream_fd(const char *path, const char *identifier, int priority, int level_prefix) {
    if (priority < 0 || priority > 7) return -EINVAL;
    struct sockaddr_un address;
    socklen_t address_length;
    if (path[0] != '/') return -EINVAL;
    int result = unix_address(path, &address, &address_length);
    if (result < 0) return result;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (connect(fd, (struct sockaddr *)&address, address_length) < 0 || shutdown(fd, SHUT_RD) < 0) {
        result = -errno;
        close(fd);
        return result;
    }
    raise_send_buffer(fd);
    // The stream's header, a line each: identifier, unit (empty), priority, level prefix
    // on or off, and no forwarding to syslog, kmsg or the console.
    if (!identifier) identifier = "";
    size_t name = strlen(identifier);
    char *header = malloc(name + 12);
    if (!header) {
        close(fd);
        return -ENOMEM;
    }
    memcpy(header, identifier, name);
    memcpy(header + name, "\n\nP\nL\n0\n0\n0\n", 12);
    header[name + 2] = (char)('0' + priority);
    header[name + 4] = (char)('0' + (level_prefix != 0));
    size_t written = 0;
    while (written < name + 12) {
        ssize_t done = write(fd, header + written, name + 12 - written);
        if (done < 0 && errno == EINTR) continue;
        if (done <= 0) {
            result = done < 0 ? -errno : -EIO;
            free(header);
            close(fd);
            return result;
        }
        written += (size_t)done;
    }
    free(header);
    return fd;
}
