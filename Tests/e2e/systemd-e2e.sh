#!/bin/bash
# End-to-end test of watchkeeper under a real systemd.
#
#   Tests/e2e/systemd-e2e.sh /abs/path/to/watchkeeper
#
# Boots systemd as PID 1 of a private PID, mount, cgroup, UTS, IPC and network
# namespace (the machine's PID 1 need not be systemd), installs the binary with
# `make install-files` in there, and drives the real unit with systemctl, signals
# and journalctl. Everything the namespace writes lands on tmpfs: the host's
# /, /sys and /proc/sys are read-only in there and /etc, /var and /usr/local are
# overlays. The namespace is killed with SIGKILL at exit; it is never shut down.
#
# Prints one line per check and, last, `e2e: N passed, M failed` (CI parses it).
# Exits 1 if a check failed, 0 otherwise (also when skipped for not being root).

set -uo pipefail

NAME=watchkeeper-e2e
SYSTEMD=/lib/systemd/systemd
UNIT=watchkeeper.service
CONF=/etc/watchkeeper/watchkeeper.toml
PATH_IN_NS=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# MESSAGE_IDs: the daemon's (Sources/WatchkeeperCore/Systemd/MessageIDs.swift)
# and systemd's "Started ..." and "Deactivated successfully" (sd-messages.h).
ID_READY=89f688baebb54f2a98b1c69d4460b585
ID_DUMP=a2f80729ec6c45298dafab0ee7b10f49
ID_RELOAD_OK=efd3e24569174baf99b0879641b1ab8b
ID_RELOAD_FAILED=c95800433a154f6a837f449a59dd5b53
ID_STOPPING=7943fdcc39d047cdbb77a7dc61002afa
ID_RUN_FINISHED=b665bf3c2f6c4766ab20db516c7d25dd
ID_UNIT_STARTED=39f53479d3a045ac8e11786248231fbf
ID_UNIT_SUCCESS=7ad2d189f7e94e70a38c781354912448

# Where `make install-files` puts systemd/fanotify.conf, and where docs/operations.md has the
# administrator copy it.
FANOTIFY_DROPIN_DOC=/usr/local/share/doc/watchkeeper/fanotify.conf
FANOTIFY_DROPIN=/etc/systemd/system/$UNIT.d/fanotify.conf

# ---------------------------------------------------------------------------
# Inside the new namespaces, before systemd: runs as their PID 1 (see start_ns).
# Arguments: repository root, binary, file that receives the console output.
ns_init() {
    set -e
    local src=$1 bin=$2 console=$3 d
    local stage=/run/$NAME

    # A fresh /run: systemd needs one, and it holds what we mount from the host.
    mount -t tmpfs -o mode=0755,nosuid,nodev "$NAME-run" /run
    mkdir -p "$stage/src" "$stage/overlay" "$stage/dev"
    # The checkout and binary under fixed paths, read-only, so they stay visible
    # even if they live under /tmp or /var/tmp (which get fresh tmpfs below).
    mount --bind "$src" "$stage/src"
    mount -o remount,bind,ro "$stage/src"
    touch "$stage/watchkeeper"
    mount --bind "$bin" "$stage/watchkeeper"
    mount -o remount,bind,ro "$stage/watchkeeper"

    # A private /dev: systemd creates /dev/log, /dev/initctl, mount points and
    # static nodes, and writes to /dev/console; the host's devtmpfs and serial
    # console must see none of it. The console is a plain file on the host.
    d=$stage/dev
    mount -t tmpfs -o mode=0755,nosuid "$NAME-dev" "$d"
    mknod -m 0666 "$d/null" c 1 3
    mknod -m 0666 "$d/zero" c 1 5
    mknod -m 0666 "$d/full" c 1 7
    mknod -m 0666 "$d/random" c 1 8
    mknod -m 0666 "$d/urandom" c 1 9
    mknod -m 0666 "$d/tty" c 5 0
    touch "$d/console"
    mount --bind "$console" "$d/console"
    mkdir -m 0755 "$d/pts"
    mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$d/pts"
    ln -s pts/ptmx "$d/ptmx"
    mkdir -m 1777 "$d/shm"
    mount -t tmpfs -o mode=1777,nosuid,nodev "$NAME-shm" "$d/shm"
    ln -s /proc/self/fd "$d/fd"
    ln -s /proc/self/fd/0 "$d/stdin"
    ln -s /proc/self/fd/1 "$d/stdout"
    ln -s /proc/self/fd/2 "$d/stderr"
    mount --move "$d" /dev

    # The host's file systems read-only; what systemd and the install write goes
    # to tmpfs overlays. (Each mount point's read-only flag is per namespace.)
    mount -o remount,bind,ro /
    mount -t tmpfs -o mode=0755 "$NAME-overlay" "$stage/overlay"
    for dir in /etc /var /usr/local; do
        d=$stage/overlay/${dir//\//_}
        mkdir -p "$d/upper" "$d/work"
        mount -t overlay -o "lowerdir=$dir,upperdir=$d/upper,workdir=$d/work" "$NAME-overlay" "$dir"
    done
    # Start from nothing of a previous installation, and no old journal.
    # (mkdir only ever writes to an overlay: the root underneath is read-only.)
    for dir in /etc/watchkeeper /var/lib/watchkeeper /usr/local/share/doc/watchkeeper \
               /etc/systemd/system/$UNIT.d /var/log/journal; do
        mkdir -p "$dir"
        mount -t tmpfs -o mode=0755 "$NAME-empty" "$dir"
    done
    rm -f "/etc/systemd/system/$UNIT" /usr/local/bin/watchkeeper
    # The fanotify checks' tree: a file system mark needs one that encodes file handles,
    # which the overlays do not. Mounted now: with container= set, systemd leaves / private,
    # so a mount made after the daemon started would not reach its mount namespace.
    mkdir -p /var/spool/wk-e2e-fan
    mount -t tmpfs -o mode=0755 "$NAME-fan" /var/spool/wk-e2e-fan
    # Fresh temporary directories: systemd-tmpfiles empties /tmp at boot.
    mount -t tmpfs -o mode=1777,nosuid,nodev "$NAME-tmp" /tmp
    mount -t tmpfs -o mode=1777,nosuid,nodev "$NAME-tmp" /var/tmp

    # What containers usually get: /sys and /proc/sys read-only, so systemd-udevd,
    # systemd-sysctl and systemd-binfmt (all conditioned on writable paths) leave
    # the host's devices and kernel settings alone...
    mount -o remount,bind,ro /sys
    mount --bind /proc/sys /proc/sys
    mount -o remount,bind,ro /proc/sys
    if [ -e /proc/sysrq-trigger ]; then
        mount --bind /proc/sysrq-trigger /proc/sysrq-trigger
        mount -o remount,bind,ro /proc/sysrq-trigger
    fi
    # ...and a writable cgroup2 hierarchy whose root is the cgroup start_ns made
    # for us (we are in a new cgroup namespace), even where the host is cgroup v1
    # or hybrid. systemd then runs in unified mode. (The host's cgroup mounts go
    # first: mount(8) refuses a second cgroup2 on the same path.)
    if mountpoint -q /sys/fs/cgroup; then umount -R /sys/fs/cgroup; fi
    mount -t cgroup2 "$NAME-cgroup" /sys/fs/cgroup

    # Boot only basic.target: multi-user.target would start the machine's
    # services (getty on the console, databases, cron...). Mask what could run
    # host jobs or wait for a network the namespace does not have.
    for u in timers.target networking.service ifupdown-wait-online.service \
             systemd-networkd-wait-online.service NetworkManager-wait-online.service; do
        ln -sf /dev/null "/etc/systemd/system/$u"
    done

    # The kernel and the clock are the host's: systemd and its services get no
    # capability to load modules or set the time.
    exec env -i container="$NAME" PATH="$PATH_IN_NS" \
        setpriv --bounding-set -sys_module,-sys_time \
        "$SYSTEMD" --unit=basic.target --show-status=yes
}

if [ "${1-}" = --ns-init ]; then
    shift
    ns_init "$@"
    exit 1
fi

# ---------------------------------------------------------------------------
# On the host.

say() { printf 'e2e: %s\n' "$*"; }

if [ $# -ne 1 ]; then
    echo "usage: $0 /abs/path/to/watchkeeper" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ]; then
    say "skipped: the systemd end-to-end test needs root (it boots systemd in a private PID namespace)"
    exit 0
fi

BIN=$(realpath -e -- "$1" 2>/dev/null) || { say "FAIL unable to find the binary $1"; say "0 passed, 1 failed"; exit 1; }
[ -x "$BIN" ] || { say "FAIL $BIN is not executable"; say "0 passed, 1 failed"; exit 1; }
SELF=$(realpath -e -- "$0")
REPO=$(cd "$(dirname "$SELF")/../.." && pwd)

# systemd and python3 (for JSON) are installed if missing: CI runs this as root
# on a fresh machine. The rest comes with util-linux and procps.
apt_install() {
    say "installing $*"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
[ -x "$SYSTEMD" ] || apt_install systemd || { say "FAIL unable to install systemd"; say "0 passed, 1 failed"; exit 1; }
command -v python3 >/dev/null || apt_install python3 || { say "FAIL unable to install python3"; say "0 passed, 1 failed"; exit 1; }
for cmd in unshare nsenter setpriv mount findmnt pgrep make; do
    if ! command -v "$cmd" >/dev/null; then
        say "skipped: unable to find $cmd (util-linux, procps and make are needed to boot systemd in a namespace)"
        exit 0
    fi
done
if ! grep -qw cgroup2 /proc/filesystems || ! grep -qw overlay /proc/filesystems; then
    say "skipped: the kernel lacks cgroup2 or overlayfs, both needed to boot systemd in a namespace"
    exit 0
fi

# Host-side scratch (logs, console). Those of runs killed outright are removed.
for dir in /tmp/"$NAME".*; do
    pid=${dir#/tmp/$NAME.}; pid=${pid%%.*}
    [ -d "$dir" ] && [ "$pid" -gt 0 ] 2>/dev/null && ! kill -0 "$pid" 2>/dev/null && rm -rf "$dir"
done
WORK=$(mktemp -d "/tmp/$NAME.$$.XXXXXX")
UNSHARE_PID= NS_PID= CGROUP= OWN_CGROUP_MOUNT=
STARTED=$SECONDS

# Runs on every exit: SIGKILL to the namespace's PID 1 takes every process in
# it down, and with the last one its mounts go. Then the cgroup is removed.
cleanup() {
    [ -n "$NS_PID" ] && kill -KILL "$NS_PID" 2>/dev/null
    [ -n "$UNSHARE_PID" ] && wait "$UNSHARE_PID" 2>/dev/null
    if [ -n "$CGROUP" ] && [ -d "$CGROUP" ]; then
        for _ in $(seq 50); do
            grep -qx 'populated 0' "$CGROUP/cgroup.events" 2>/dev/null && break
            sleep 0.1
        done
        find "$CGROUP" -depth -type d -exec rmdir {} + 2>/dev/null
        [ -d "$CGROUP" ] && echo "e2e: warning: unable to remove $CGROUP" >&2
    fi
    [ -n "$OWN_CGROUP_MOUNT" ] && umount "$OWN_CGROUP_MOUNT"
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Runs a command in the namespace: its mounts, PIDs, cgroups and network.
ns() {
    nsenter --target "$NS_PID" --mount --pid --cgroup --uts --ipc --net -- \
        env -i PATH="$PATH_IN_NS" LANG=C.UTF-8 SYSTEMD_PAGER=cat SYSTEMD_COLORS=0 "$@"
}

# --- checks bookkeeping -----------------------------------------------------
PASSED=0 FAILED=0 WHY=
CHECKS=(
    "systemd boots as PID 1 in a private namespace"
    "make install-files installs the unit, binary, configuration, man pages, catalog, completions and the fanotify drop-in (not in force)"
    "start becomes active after READY"
    "SIGUSR1 writes a state dump to the journal and state.json"
    "journalctl -x explains the daemon's entries from its installed catalog"
    "watchkeeper status and reload work over the control socket in RuntimeDirectory="
    "reload applies a valid configuration in place"
    "reload of a broken configuration is rejected and the daemon keeps running"
    "reload of the restored configuration succeeds"
    "a task's output lines and run record are journal entries with their fields"
    "output = \"direct\" sends a job's lines straight to its own journald stream"
    "with Delegate=yes each job has a cgroup, and expiry ends a process that left the job's session"
    "a watch job's record names its rule and the file's exact bytes, never a task"
    "watchkeeper logs RUN_ID and logs TASK -n N show what journalctl has for them"
    "watchkeeper logs shows a watch rule's record with its file escaped, and output = \"direct\" lines"
    "watchkeeper logs -f shows a triggered run's line as it comes, and exits 0 on SIGINT"
    "watchkeeper logs says when the journal keeps nothing, cannot be read, or has no entries for a name"
    "systemd-analyze security rates the unit at most 2.0, and the daemon says jobs have no network"
    "without the fanotify drop-in, a method = \"fanotify\" rule says why, uses inotify and handles a file"
    "with the fanotify drop-in from the docs, CAP_SYS_ADMIN is added, the rule uses fanotify and handles a file"
    "stop is clean, and the control socket is gone"
    "watchkeeper logs reads the journal with the daemon stopped, also with --directory"
)
NEXT=0

show_unit() {
    echo "----- journalctl -u watchkeeper -n 80"
    ns journalctl -u watchkeeper --no-pager -n 80 2>&1
    echo "----- systemctl status watchkeeper"
    ns systemctl status watchkeeper --no-pager -l 2>&1
    echo "-----"
}

# record OK|FAIL: reports the next check in CHECKS (WHY says why it failed).
record() {
    # A check run without a line in CHECKS fails by name instead of aborting the script.
    local name=${CHECKS[$NEXT]-"check $((NEXT + 1)) (missing from CHECKS)"}
    [ "$NEXT" -lt "${#CHECKS[@]}" ] || set -- FAIL "${2-}"
    NEXT=$((NEXT + 1))
    if [ "$1" = OK ]; then
        PASSED=$((PASSED + 1))
        say "ok   $name${WHY:+ ($WHY)}"
    else
        FAILED=$((FAILED + 1))
        say "FAIL $name: ${WHY:-failed}"
        [ -n "$NS_PID" ] && [ "${2-}" != quiet ] && show_unit
    fi
    WHY=
}
# Runs a check function; it returns non-zero and sets WHY on failure.
check() {
    WHY=
    if "$@"; then record OK; else record FAIL; return 1; fi
}
finish() {
    while [ "$NEXT" -lt "${#CHECKS[@]}" ]; do
        WHY="not run: $1"
        record FAIL quiet
    done
    say "took $((SECONDS - STARTED)) s"
    say "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
    exit
}

# --- journal helpers --------------------------------------------------------
# Entries of the unit's journal (the daemon's and systemd's about it) as JSON
# lines, optionally filtered by MESSAGE_ID. --all: fields over 4 KiB are null otherwise.
journal_json() {
    ns journalctl --sync 2>/dev/null
    ns journalctl -u watchkeeper --no-pager -o json --all ${1:+MESSAGE_ID=$1}
}
count_id() { journal_json "$1" | grep -c .; }
# wait_id ID N: waits up to 10 s for more than N entries with that MESSAGE_ID.
wait_id() {
    local i
    for i in $(seq 50); do
        [ "$(count_id "$1")" -gt "$2" ] && return 0
        sleep 0.2
    done
    return 1
}
prop() { ns systemctl show "$UNIT" -p "$1" --value; }
# wait_said TEXT [PID]: waits up to 10 s for an entry of the unit (of that process) whose
# message holds TEXT, and prints the last such message.
wait_said() {
    local i out
    for i in $(seq 50); do
        ns journalctl --sync 2>/dev/null
        out=$(ns journalctl -u watchkeeper ${2:+_PID=$2} -o cat --no-pager 2>/dev/null | grep -F -- "$1" | tail -n 1)
        [ -n "$out" ] && { printf '%s\n' "$out"; return 0; }
        sleep 0.2
    done
    return 1
}

# ---------------------------------------------------------------------------
# Boot. The namespace's cgroup is a fresh child of the root of the host's
# cgroup2 hierarchy, mounted for the occasion if the host has none.
start_ns() {
    local root i state
    root=$(findmnt -n -r -t cgroup2 -o TARGET | head -n 1)
    if [ -z "$root" ]; then
        root=$WORK/cgroup2
        mkdir -p "$root"
        mount -t cgroup2 cgroup2 "$root" || { WHY="unable to mount a cgroup2 hierarchy"; return 1; }
        OWN_CGROUP_MOUNT=$root
    fi
    # Leftovers of runs that were killed outright: empty, and their PID is gone.
    for i in "$root/$NAME"-*; do
        [ -d "$i" ] && ! kill -0 "${i##*-}" 2>/dev/null &&
            grep -qx 'populated 0' "$i/cgroup.events" 2>/dev/null &&
            find "$i" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    CGROUP=$root/$NAME-$$
    mkdir "$CGROUP" || { WHY="unable to create the cgroup $CGROUP"; return 1; }

    : >"$WORK/console"
    # Into the cgroup first, then unshare: the new cgroup namespace is rooted there.
    # If this script is killed outright (no EXIT trap), the parent-death signal
    # kills unshare, and unshare's --kill-child kills the namespace's PID 1.
    (
        echo "$BASHPID" >"$CGROUP/cgroup.procs" || exit 1
        exec setpriv --pdeathsig SIGKILL \
            unshare --cgroup --pid --mount --uts --ipc --net --fork --mount-proc \
            --kill-child=SIGKILL -- "$SELF" --ns-init "$REPO" "$BIN" "$WORK/console"
    ) </dev/null >"$WORK/boot.log" 2>&1 &
    UNSHARE_PID=$!

    # The namespace's PID 1 is unshare's child; wait until it is systemd.
    for i in $(seq 100); do
        NS_PID=$(pgrep -P "$UNSHARE_PID" | head -n 1)
        [ -n "$NS_PID" ] && [ "$(cat "/proc/$NS_PID/comm" 2>/dev/null)" = systemd ] && break
        NS_PID=
        kill -0 "$UNSHARE_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$NS_PID" ]; then
        WHY="the namespace did not start systemd:$(printf '\n'; cat "$WORK/boot.log")"
        return 1
    fi
    # "degraded" is fine: some of the machine's units may fail in a namespace.
    for i in $(seq 300); do
        state=$(ns systemctl is-system-running 2>/dev/null)
        case $state in
            running|degraded) WHY="$state, $((SECONDS - STARTED)) s"; return 0 ;;
        esac
        kill -0 "$NS_PID" 2>/dev/null || break
        sleep 0.2
    done
    WHY="systemd is '${state:-unreachable}' after 60 s:$(printf '\n'; cat "$WORK/boot.log" "$WORK/console")"
    [ -n "$NS_PID" ] && ns systemctl --failed --no-pager >&2
    return 1
}

install_unit() {
    local out
    if ! out=$(ns make -C "/run/$NAME/src" --no-print-directory install-files \
            BIN="/run/$NAME/watchkeeper" 2>&1); then
        WHY="make install-files failed:$(printf '\n%s' "$out")"
        return 1
    fi
    ns systemctl daemon-reload || { WHY="systemctl daemon-reload failed"; return 1; }
    if [ "$(prop LoadState)" != loaded ]; then
        WHY="$UNIT is $(prop LoadState) after installing"
        return 1
    fi
    for f in /usr/local/bin/watchkeeper "$CONF" /usr/local/lib/systemd/catalog/watchkeeper.catalog \
            /usr/local/share/bash-completion/completions/watchkeeper /usr/local/share/zsh/site-functions/_watchkeeper \
            /usr/local/share/fish/vendor_completions.d/watchkeeper.fish \
            /usr/local/share/man/man8/watchkeeper.8 /usr/local/share/man/man5/watchkeeper.toml.5 \
            "$FANOTIFY_DROPIN_DOC"; do
        ns test -f "$f" || { WHY="$f is missing after installing"; return 1; }
    done
    # Beside the docs only: CAP_SYS_ADMIN is for units whose rules use fanotify.
    local dropins
    dropins=$(prop DropInPaths)
    [ -z "$dropins" ] || { WHY="the unit has drop-ins right after installing: $dropins"; return 1; }
}

# --- the checks -------------------------------------------------------------
MAIN_PID=

check_start() {
    local out exec_start active_enter
    if ! out=$(ns timeout 30 systemctl start "$UNIT" 2>&1); then
        WHY="systemctl start failed: $out"
        return 1
    fi
    [ "$(prop ActiveState)" = active ] || { WHY="unit is $(prop ActiveState) after start"; return 1; }
    MAIN_PID=$(prop MainPID)
    [ "$(prop Type)" = notify ] || { WHY="unit Type is $(prop Type), not notify"; return 1; }
    exec_start=$(prop ExecMainStartTimestampMonotonic)
    active_enter=$(prop ActiveEnterTimestampMonotonic)
    if ! [ "$exec_start" -gt 0 ] || ! [ "$active_enter" -ge "$exec_start" ]; then
        WHY="active at ${active_enter} us, main process started at ${exec_start} us"
        return 1
    fi
    # The daemon logs its ready message before READY=1; both the message and
    # systemd's "Started" reach journald on the same socket, so their sequence
    # numbers show the order even when journald lags.
    out=$(journal_json | python3 -c '
import json, sys
main_pid, ready_id, started_id = sys.argv[1:]
ready = started = None
for line in sys.stdin:
    e = json.loads(line)
    if e.get("MESSAGE_ID") == ready_id and e.get("_PID") == main_pid:
        ready = ready or e
    elif e.get("MESSAGE_ID") == started_id and e.get("_PID") == "1":
        started = started or e
if not ready:
    sys.exit("no ready message (MESSAGE_ID=%s) from the main process %s" % (ready_id, main_pid))
if not started:
    sys.exit("no \"Started\" message from systemd")
def seqnum(e):  # journalctl 252 has no __SEQNUM field; the cursor has it as i=<hex>
    return int(dict(kv.split("=", 1) for kv in e["__CURSOR"].split(";"))["i"], 16)
r, s = seqnum(ready), seqnum(started)
if r > s:
    sys.exit("the ready message reached the journal after systemd logged \"Started\": "
             "the daemon must log it before it sends READY=1")
' "$MAIN_PID" "$ID_READY" "$ID_UNIT_STARTED" 2>&1) || { WHY=$out; return 1; }
    out=$(prop StatusText)
    [ -n "$out" ] || { WHY="StatusText is empty: the daemon sent no STATUS="; return 1; }
    WHY="ready after $(( (active_enter - exec_start) / 1000 )) ms, status: $out"
}

check_dump() {
    local before out
    before=$(count_id "$ID_DUMP")
    if ! out=$(ns systemctl kill --kill-whom=main -s USR1 "$UNIT" 2>&1); then
        WHY="systemctl kill --kill-whom=main -s USR1 failed: $out"
        return 1
    fi
    wait_id "$ID_DUMP" "$before" || { WHY="no dump (MESSAGE_ID=$ID_DUMP) in the journal within 10 s"; return 1; }
    out=$(journal_json "$ID_DUMP" | tail -n 1 | python3 -c '
import json, sys
def text(v):  # journalctl gives byte arrays for values that are not plain text
    return bytes(v).decode("utf-8", "replace") if isinstance(v, list) else v
e = json.loads(sys.stdin.read())
msg = text(e.get("MESSAGE") or "")
if not msg.startswith("watchkeeper state dump"):
    sys.exit("the dump MESSAGE starts with %r" % msg[:60])
raw = e.get("WATCHKEEPER_DUMP_JSON")
if raw is None:
    sys.exit("the dump entry has no WATCHKEEPER_DUMP_JSON field")
try:
    json.loads(text(raw))
except ValueError as err:
    sys.exit("WATCHKEEPER_DUMP_JSON does not parse: %s" % err)
print("%d lines of text, %d bytes of JSON" % (msg.count("\n") + 1, len(text(raw))))
' 2>&1) || { WHY=$out; return 1; }
    # Captured first: `journalctl | grep -q` fails under pipefail when grep, done at the
    # first line, closes the pipe while journalctl is still writing the dump (SIGPIPE).
    local shown
    shown=$(ns journalctl -u watchkeeper "MESSAGE_ID=$ID_DUMP" -o cat -n 1 --no-pager 2>&1)
    case "$shown" in
        "watchkeeper state dump"*) ;;
        *) WHY="journalctl -o cat does not show the dump text: $(printf '%s' "$shown" | head -c 200)"; return 1 ;;
    esac
    # state.json is written with the dump; give it the same few seconds.
    local i
    for i in $(seq 25); do ns test -s /run/watchkeeper/state.json && break; sleep 0.2; done
    if ! ns cat /run/watchkeeper/state.json 2>/dev/null | python3 -c 'import json, sys; json.load(sys.stdin)' 2>/dev/null; then
        WHY="/run/watchkeeper/state.json is missing or does not parse"
        return 1
    fi
    WHY="$out"
}

# make install-files put catalog/watchkeeper.catalog in place and ran journalctl --update-catalog.
check_catalog() {
    local out
    out=$(ns journalctl -x -u watchkeeper "MESSAGE_ID=$ID_READY" -n 1 --no-pager 2>&1)
    printf '%s\n' "$out" | grep -q 'Subject: watchkeeper is ready' ||
        { WHY="no catalog text under the ready entry:$(printf '\n%s' "$out")"; return 1; }
    # @WATCHKEEPER_READY_MS@ is filled in from the entry's own field.
    printf '%s\n' "$out" | grep -Eq 'watchkeeper is ready, [0-9]+ ms after it was started' ||
        { WHY="the catalog text does not carry the entry's fields:$(printf '\n%s' "$out")"; return 1; }
    out=$(ns journalctl --list-catalog --no-pager 2>/dev/null | grep -c ' watchkeeper: ')
    WHY="$out catalog entries installed"
}

# The control socket under systemd: in RuntimeDirectory=, there before READY=1, found by the
# installed CLI with no option at all (the default configuration's runtime_dir), mode 0660.
check_control() {
    local out mode
    out=$(ns /usr/local/bin/watchkeeper status 2>&1) || { WHY="watchkeeper status failed:$(printf '\n%s' "$out")"; return 1; }
    printf '%s\n' "$out" | grep -q '^. watchkeeper .* - running for ' || { WHY="status does not say running:$(printf '\n%s' "$out")"; return 1; }
    mode=$(ns stat -c '%a %U:%G %F' /run/watchkeeper/control.sock 2>&1)
    [ "$mode" = "660 root:root socket" ] || { WHY="control.sock is '$mode', want '660 root:root socket'"; return 1; }
    out=$(ns /usr/local/bin/watchkeeper reload 2>&1) || { WHY="watchkeeper reload failed: $out"; return 1; }
    printf '%s\n' "$out" | grep -q '^reloaded: configuration generation [0-9]* in force$' || { WHY="reload said: $out"; return 1; }
    WHY="$(ns /usr/local/bin/watchkeeper status | head -n 1); $out"
}

check_reload() {
    local before out
    before=$(count_id "$ID_RELOAD_OK")
    if ! out=$(ns timeout 30 systemctl reload "$UNIT" 2>&1); then
        WHY="systemctl reload failed: $out"
        return 1
    fi
    wait_id "$ID_RELOAD_OK" "$before" || { WHY="no reload message (MESSAGE_ID=$ID_RELOAD_OK) within 10 s"; return 1; }
    [ "$(prop ActiveState)" = active ] || { WHY="unit is $(prop ActiveState) after reload"; return 1; }
    [ "$(prop MainPID)" = "$MAIN_PID" ] || { WHY="main PID changed from $MAIN_PID to $(prop MainPID)"; return 1; }
}

check_broken_reload() {
    local before out status
    ns cp -p "$CONF" "/run/$NAME/watchkeeper.toml.orig" || { WHY="unable to save $CONF"; return 1; }
    # An unknown key in [daemon], right under its header.
    ns sed -i '/^\[daemon\]/a bogus_key = 1' "$CONF"
    ns grep -q '^bogus_key = 1' "$CONF" || { WHY="unable to break $CONF"; return 1; }
    before=$(count_id "$ID_RELOAD_FAILED")
    out=$(ns timeout 30 systemctl reload "$UNIT" 2>&1)
    wait_id "$ID_RELOAD_FAILED" "$before" || { WHY="no reload-failed message (MESSAGE_ID=$ID_RELOAD_FAILED) within 10 s${out:+; systemctl: $out}"; return 1; }
    [ "$(prop ActiveState)" = active ] || { WHY="unit is $(prop ActiveState) after the failed reload"; return 1; }
    [ "$(prop MainPID)" = "$MAIN_PID" ] || { WHY="main PID changed from $MAIN_PID to $(prop MainPID)"; return 1; }
    status=$(prop StatusText)
    if ! grep -qiE 'fail|invalid|reject|error|bogus_key' <<<"$status"; then
        WHY="StatusText does not mention the failure: '$status'"
        return 1
    fi
    WHY="status: $status"
}

# A task added by reload runs every second; its output lines are entries of their own
# (SYSLOG_IDENTIFIER = the task, <N> prefix = PRIORITY) and each run ends in one record.
check_task_journal() {
    printf '%s\n' '' '[[task]]' 'name = "e2e-task"' 'every = "1s"' \
        'command = ["/bin/sh", "-c", "echo \"<4>disk almost full\"; echo plain line"]' |
        ns sh -c "cat >> $CONF" || { WHY="unable to add a task to $CONF"; return 1; }
    check_reload || return 1
    local i out=""
    for i in $(seq 50); do
        ns journalctl --sync 2>/dev/null
        out=$( { ns journalctl -t e2e-task -o json --no-pager; echo "--records--";
                 ns journalctl -u watchkeeper "MESSAGE_ID=$ID_RUN_FINISHED" WATCHKEEPER_TASK=e2e-task -o json --no-pager; } 2>/dev/null |
            python3 -c '
import json, sys
lines, records, part = [], [], None
for raw in sys.stdin:
    raw = raw.strip()
    if raw == "--records--": part = "records"; continue
    if not raw: continue
    (records if part else lines).append(json.loads(raw))
warn = [e for e in lines if e.get("MESSAGE") == "disk almost full"]
plain = [e for e in lines if e.get("MESSAGE") == "plain line"]
if not warn or not plain or not records: sys.exit("waiting")
w, r = warn[0], records[0]
problems = []
if w.get("PRIORITY") != "4": problems.append("the <4> line has PRIORITY=%s" % w.get("PRIORITY"))
if plain[0].get("PRIORITY") != "6": problems.append("a plain line has PRIORITY=%s" % plain[0].get("PRIORITY"))
if w.get("WATCHKEEPER_STREAM") != "stdout": problems.append("WATCHKEEPER_STREAM=%s" % w.get("WATCHKEEPER_STREAM"))
if not w.get("SYSLOG_PID") or w.get("SYSLOG_PID") == w.get("_PID"): problems.append("SYSLOG_PID is not the pid of the job")
runs = {e.get("WATCHKEEPER_RUN_ID") for e in warn}
if r.get("WATCHKEEPER_RUN_ID") not in runs: problems.append("the record run id is not among the run ids of the lines")
if "WATCHKEEPER_WATCH" in r or "WATCHKEEPER_PATH" in r: problems.append("a task record carries a watch field")
if not r.get("MESSAGE", "").startswith("task e2e-task run "): problems.append("record message: %r" % r.get("MESSAGE"))
if r.get("WATCHKEEPER_OUTCOME") != "ok" or r.get("WATCHKEEPER_EXIT_CODE") != "0": problems.append("record: outcome %s exit %s" % (r.get("WATCHKEEPER_OUTCOME"), r.get("WATCHKEEPER_EXIT_CODE")))
for field in ("WATCHKEEPER_SCHEDULED_AT", "WATCHKEEPER_STARTED_AT", "WATCHKEEPER_LATENESS_MS", "WATCHKEEPER_DURATION_MS"):
    if field not in r: problems.append("the record has no " + field)
if problems: print("; ".join(problems)); sys.exit(2)
print("%d output lines, %d run records" % (len(lines), len(records)))
' 2>&1)
        case $? in
            0) WHY=$out; return 0 ;;
            2) WHY=$out; return 1 ;;
        esac
        sleep 0.2
    done
    WHY="no task output and run record in the journal within 10 s ($out)"
    return 1
}

# A task with output = "direct": its lines go to journald on a stream of its own, never
# through the daemon: SYSLOG_IDENTIFIER is the task, a <N> prefix still sets PRIORITY,
# the job sees JOURNAL_STREAM, and the run's own fields are not there (the documented cost).
check_direct_output() {
    printf '%s\n' '' '[[task]]' 'name = "e2e-direct"' 'every = "1s"' 'output = "direct"' \
        'command = ["/bin/sh", "-c", "echo \"<3>direct failure\"; echo \"stream=$JOURNAL_STREAM\""]' |
        ns sh -c "cat >> $CONF" || { WHY="unable to add a task to $CONF"; return 1; }
    check_reload || return 1
    local i out=""
    for i in $(seq 50); do
        ns journalctl --sync 2>/dev/null
        out=$(ns journalctl -t e2e-direct -o json --no-pager 2>/dev/null | python3 -c '
import json, sys
lines = [json.loads(raw) for raw in sys.stdin if raw.strip()]
failure = [e for e in lines if e.get("MESSAGE") == "direct failure"]
stream = [e for e in lines if e.get("MESSAGE", "").startswith("stream=")]
if not failure or not stream: sys.exit("waiting")
problems = []
if failure[0].get("PRIORITY") != "3": problems.append("the <3> line has PRIORITY=%s" % failure[0].get("PRIORITY"))
if not failure[0].get("_STREAM_ID"): problems.append("no _STREAM_ID: not a journal stream")
if "WATCHKEEPER_RUN_ID" in failure[0]: problems.append("a direct line carries WATCHKEEPER_RUN_ID: it went through the daemon")
if not stream[0]["MESSAGE"][len("stream="):]: problems.append("the job saw no JOURNAL_STREAM")
if problems: print("; ".join(problems)); sys.exit(2)
print("%d direct lines, %s" % (len(lines), stream[0]["MESSAGE"]))
' 2>&1)
        case $? in
            0) WHY=$out; return 0 ;;
            2) WHY=$out; return 1 ;;
        esac
        sleep 0.2
    done
    WHY="no direct output in the journal within 10 s ($out)"
    return 1
}

# Under systemd with Delegate=yes: the daemon sits in the leaf "daemon" of its unit's
# cgroup, a job in its own run-<id> beside it. The job starts a grandchild in a new session
# (out of reach of kill(-pgid)) and overruns its budget: the expiry's cgroup.kill ends it.
check_cgroup_containment() {
    local pidfile=/var/lib/watchkeeper/e2e-escapee.pid
    ns rm -f "$pidfile"
    printf '%s\n' '' '[[task]]' 'name = "e2e-escaper"' 'every = "1h"' 'budget = "1s"' 'kill_grace = "200ms"' 'shell = true' \
        "command = \"setsid sh -c 'echo \$\$ > $pidfile; exec sleep 300' </dev/null >/dev/null 2>&1 & sleep 300\"" |
        ns sh -c "cat >> $CONF" || { WHY="unable to add a task to $CONF"; return 1; }
    check_reload || return 1
    local own cgroup i escapee="" state
    own=$(ns grep '^0::' "/proc/$MAIN_PID/cgroup")
    case $own in
        0::/system.slice/watchkeeper.service/daemon) ;;
        *) WHY="the daemon is in $own, not in its unit's leaf cgroup"; return 1 ;;
    esac
    ns timeout 10 watchkeeper trigger e2e-escaper >/dev/null 2>&1 || { WHY="watchkeeper trigger e2e-escaper failed"; return 1; }
    for i in $(seq 50); do
        escapee=$(ns cat "$pidfile" 2>/dev/null) && [ -n "$escapee" ] && break
        sleep 0.1
    done
    [ -n "$escapee" ] || { WHY="the job never wrote $pidfile"; return 1; }
    cgroup=$(ns grep '^0::' "/proc/$escapee/cgroup" 2>/dev/null)
    case $cgroup in
        0::/system.slice/watchkeeper.service/run-*) ;;
        *) WHY="the job's grandchild is in ${cgroup:-no cgroup}, not a run-<id> cgroup"; return 1 ;;
    esac
    for i in $(seq 50); do
        state=$(ns sh -c "sed 's/.*) //' /proc/$escapee/stat 2>/dev/null | cut -c1")
        [ -z "$state" ] || [ "$state" = Z ] && break
        sleep 0.2
    done
    if [ -n "$state" ] && [ "$state" != Z ]; then
        WHY="pid $escapee (setsid, in ${cgroup#0::}) still runs 10 s after the job's 1 s budget"
        return 1
    fi
    local left=""
    for i in $(seq 50); do
        left=$(ns sh -c 'ls -d /sys/fs/cgroup/system.slice/watchkeeper.service/run-* 2>/dev/null || true')
        [ -z "$left" ] && break
        sleep 0.1
    done
    [ -z "$left" ] || { WHY="job cgroups not removed 5 s after the run: $left"; return 1; }
    WHY="grandchild in ${cgroup#0::/system.slice/watchkeeper.service/} ended at expiry; its cgroup removed"
}

# A watch rule added by reload; a file whose name is not UTF-8 arrives. Its run record is
# found with journalctl FIELD=value by the rule and by the path's bytes, and carries the
# rule's field and not the task's.
check_watch_journal() {
    local inbox=/var/spool/wk-e2e-in name out i
    name=$(printf 'caf\351 %s.txt' "\$(id)")
    ns mkdir -p "$inbox" || { WHY="unable to create $inbox"; return 1; }
    printf '%s\n' '' '[[watch]]' 'name = "e2e-inbox"' "path = \"$inbox\"" 'command = ["/bin/true", "{path}"]' |
        ns sh -c "cat >> $CONF" || { WHY="unable to add a watch rule to $CONF"; return 1; }
    check_reload || return 1
    ns sh -c 'printf data > "$1"' sh "$inbox/$name" || { WHY="unable to write a file into $inbox"; return 1; }
    for i in $(seq 50); do
        ns journalctl --sync 2>/dev/null
        out=$( { ns journalctl -u watchkeeper "MESSAGE_ID=$ID_RUN_FINISHED" WATCHKEEPER_WATCH=e2e-inbox -o json --no-pager;
                 echo "--by-path--";
                 ns journalctl -u watchkeeper "WATCHKEEPER_PATH=$inbox/$name" -o json --no-pager; } 2>/dev/null |
            EXPECTED="$inbox/$name" python3 -c '
import json, os, sys
expected = list(os.environb[b"EXPECTED"])
by_rule, by_path, part = [], [], None
for raw in sys.stdin:
    raw = raw.strip()
    if raw == "--by-path--": part = "path"; continue
    if not raw: continue
    (by_path if part else by_rule).append(json.loads(raw))
if not by_rule or not by_path: sys.exit("waiting")
r = by_rule[0]
problems = []
if r.get("WATCHKEEPER_PATH") != expected: problems.append("WATCHKEEPER_PATH=%r, not the bytes %r" % (r.get("WATCHKEEPER_PATH"), expected))
if "WATCHKEEPER_TASK" in r: problems.append("the watch record carries WATCHKEEPER_TASK")
if r.get("WATCHKEEPER_OUTCOME") != "ok": problems.append("outcome %s" % r.get("WATCHKEEPER_OUTCOME"))
if r.get("WATCHKEEPER_EVENT") != "closed_write": problems.append("event %s" % r.get("WATCHKEEPER_EVENT"))
message = r.get("MESSAGE")
if not isinstance(message, str) or not message.startswith("watch e2e-inbox run ") or "\\xe9" not in message:
    problems.append("message %r" % (message,))
if by_path[0].get("WATCHKEEPER_RUN_ID") != r.get("WATCHKEEPER_RUN_ID"): problems.append("journalctl WATCHKEEPER_PATH=... finds another entry")
if problems: print("; ".join(problems)); sys.exit(2)
print("record %s found by rule and by path bytes" % r.get("WATCHKEEPER_RUN_ID"))
' 2>&1)
        case $? in
            0) WHY=$out; return 0 ;;
            2) WHY=$out; return 1 ;;
        esac
        sleep 0.2
    done
    WHY="no watch run record in the journal within 10 s ($out)"
    return 1
}

check_restored_reload() {
    ns cp -p "/run/$NAME/watchkeeper.toml.orig" "$CONF" || { WHY="unable to restore $CONF"; return 1; }
    check_reload || return 1
    WHY="status: $(prop StatusText)"
}

check_stop() {
    local out result code status t0 took
    # systemd unloads an inactive unit that nothing references, and with it the
    # exit status; a transient unit that Wants= it keeps it loaded.
    if ! out=$(ns systemd-run --quiet --unit="$NAME-hold" -p Wants="$UNIT" sleep infinity 2>&1); then
        WHY="unable to start a transient unit that keeps $UNIT loaded: $out"
        return 1
    fi
    t0=$(date +%s%N)
    if ! out=$(ns timeout 60 systemctl stop "$UNIT" 2>&1); then
        WHY="systemctl stop failed: $out"
        return 1
    fi
    took=$(( ($(date +%s%N) - t0) / 1000000 ))
    result=$(prop Result) code=$(prop ExecMainCode) status=$(prop ExecMainStatus)
    [ "$(prop ActiveState)" = inactive ] || { WHY="unit is $(prop ActiveState) after stop"; return 1; }
    # ExecMainCode 1 is CLD_EXITED: the daemon exited rather than die of SIGTERM.
    if [ "$result" != success ] || [ "$code" != 1 ] || [ "$status" != 0 ]; then
        WHY="Result=$result ExecMainCode=$code ExecMainStatus=$status (want success, 1, 0)"
        return 1
    fi
    wait_id "$ID_STOPPING" 0 || { WHY="no stopping message (MESSAGE_ID=$ID_STOPPING) in the journal"; return 1; }
    wait_id "$ID_UNIT_SUCCESS" 0 || { WHY="systemd did not log \"Deactivated successfully\" (MESSAGE_ID=$ID_UNIT_SUCCESS)"; return 1; }
    ns test -e /run/watchkeeper/control.sock && { WHY="control.sock is still there after the stop"; return 1; }
    WHY="systemctl stop took $took ms"
}

# --- fanotify (issue 24) ------------------------------------------------------
# A tmpfs mounted by ns_init (the overlays encode no file handles: EOPNOTSUPP). The files
# are written through the namespace's mount of it, not the daemon's (PrivateMounts=): a file
# system mark hears them all the same.
FAN_DIR=/var/spool/wk-e2e-fan
FAN_CAPS_BEFORE=

# tree_method RULE: the rule's "tree_method" in the state dump (JSON), or why there is none.
tree_method() {
    ns /usr/local/bin/watchkeeper dump --json 2>&1 | python3 -c '
import json, sys
try:
    dump = json.load(sys.stdin)
except ValueError as err:
    sys.exit("the dump does not parse: %s" % err)
for rule in dump.get("watches", {}).get("rules", []):
    if rule.get("name") == sys.argv[1]:
        print(rule.get("tree_method", "no tree_method in the rule"))
        break
else:
    print("no rule %s in the dump" % sys.argv[1])
' "$1"
}

# fan_file_handled NAME: writes NAME into the tmpfs and waits up to 10 s for its run record.
fan_file_handled() {
    local i out
    ns sh -c 'printf data > "$1"' sh "$FAN_DIR/$1" || { WHY="unable to write $FAN_DIR/$1"; return 1; }
    for i in $(seq 50); do
        ns journalctl --sync 2>/dev/null
        out=$(ns journalctl -u watchkeeper "MESSAGE_ID=$ID_RUN_FINISHED" "WATCHKEEPER_PATH=$FAN_DIR/$1" -o cat --no-pager 2>/dev/null | tail -n 1)
        [ -n "$out" ] && break
        sleep 0.2
    done
    case $out in
        *": ok (exit 0)"*) ;;
        "") WHY="no run record for $FAN_DIR/$1 within 10 s"; return 1 ;;
        *) WHY="the run of $FAN_DIR/$1: $out"; return 1 ;;
    esac
}

# The shipped unit lacks CAP_SYS_ADMIN and the fanotify syscalls (SystemCallFilter=
# @system-service): a rule that asks for fanotify says why it cannot have it, and its tree
# is watched with inotify instead.
check_fanotify_refused() {
    local said method seen
    FAN_CAPS_BEFORE=$(prop CapabilityBoundingSet)
    ns cp -p "$CONF" "/run/$NAME/watchkeeper.toml.before-fan" || { WHY="unable to save $CONF"; return 1; }
    printf '%s\n' '' '[[watch]]' 'name = "e2e-fan"' "path = \"$FAN_DIR\"" 'method = "fanotify"' 'command = ["/bin/true", "{path}"]' |
        ns sh -c "cat >> $CONF" || { WHY="unable to add a watch rule to $CONF"; return 1; }
    check_reload || return 1
    seen=$(ns nsenter --target "$MAIN_PID" --mount findmnt -n -o FSTYPE "$FAN_DIR" 2>&1)
    [ "$seen" = tmpfs ] || { WHY="the daemon sees ${seen:-nothing} on $FAN_DIR, not the tmpfs"; return 1; }
    said=$(wait_said "unable to use fanotify" "$MAIN_PID") || { WHY="no \"unable to use fanotify\" line within 10 s of the reload"; return 1; }
    fan_file_handled refused.txt || return 1
    method=$(tree_method e2e-fan)
    [ "$method" = inotify ] || { WHY="tree_method is \"$method\" after: $said"; return 1; }
    WHY="said: $said"
}

# The drop-in as docs/operations.md has the administrator install it: CapabilityBoundingSet=
# in a drop-in adds to the unit's, so the bounding set is the shipped one plus CAP_SYS_ADMIN.
# After a restart the rule's tree is watched with fanotify, and a file written once the
# daemon says so is handled.
check_fanotify_dropin() {
    local caps want said method security level
    ns install -D -m 0644 "$FANOTIFY_DROPIN_DOC" "$FANOTIFY_DROPIN" || { WHY="unable to copy $FANOTIFY_DROPIN_DOC to $FANOTIFY_DROPIN"; return 1; }
    ns systemctl daemon-reload || { WHY="systemctl daemon-reload failed"; return 1; }
    caps=$(prop CapabilityBoundingSet)
    want=$(printf '%s\n' $FAN_CAPS_BEFORE cap_sys_admin | sort -u | tr '\n' ' ')
    [ "$(printf '%s\n' $caps | sort -u | tr '\n' ' ')" = "$want" ] ||
        { WHY="CapabilityBoundingSet is \"$caps\", want \"$want\" (the unit's and CAP_SYS_ADMIN)"; return 1; }
    ns timeout 30 systemctl restart "$UNIT" || { WHY="systemctl restart with the drop-in failed"; return 1; }
    MAIN_PID=$(prop MainPID)
    said=$(wait_said "with fanotify" "$MAIN_PID") || {
        WHY="no \"with fanotify\" line within 10 s of the restart: $(ns journalctl -u watchkeeper _PID="$MAIN_PID" -o cat --no-pager | grep -F fanotify | tail -n 1)"
        return 1
    }
    fan_file_handled with-fanotify.txt || return 1
    method=$(tree_method e2e-fan)
    [ "$method" = fanotify ] || { WHY="tree_method is \"$method\" after: $said"; return 1; }
    # What the drop-in costs (docs/measurements/fanotify-unit.md); E2E_SECURITY_REPORT_FANOTIFY=FILE keeps the table.
    security=$(ns systemd-analyze security "$UNIT" --no-pager 2>/dev/null)
    [ -n "${E2E_SECURITY_REPORT_FANOTIFY:-}" ] && printf '%s\n' "$security" > "$E2E_SECURITY_REPORT_FANOTIFY"
    level=$(printf '%s\n' "$security" | grep -i 'overall exposure' | grep -oE '[0-9]+\.[0-9]+' | head -n 1)
    WHY="said: $said; systemd-analyze security with the drop-in: ${level:-unknown}"
}

# After a failed fanotify check: the configuration without the rule and the unit running,
# so that the checks after it fail only for what they check.
fanotify_recover() {
    ns cp -p "/run/$NAME/watchkeeper.toml.before-fan" "$CONF" 2>/dev/null || return 0
    if [ "$(prop ActiveState)" = active ]; then
        ns timeout 30 systemctl reload "$UNIT" >/dev/null 2>&1
    else
        ns timeout 30 systemctl restart "$UNIT" >/dev/null 2>&1
    fi
    MAIN_PID=$(prop MainPID)
}

# --- watchkeeper logs (issue 26) ---------------------------------------------
# expected_logs: journalctl's JSON entries on stdin as the lines `watchkeeper logs` shows
# for them, written out again from the fields (Jobs/JobLogQuery.swift's format).
expected_logs() {
    python3 -c '
import json, sys, time
RUN_FINISHED = sys.argv[1]
PRIORITIES = ["emerg", "alert", "crit", "error", "warning", "notice", "info", "debug"]
def text(v):
    return bytes(v).decode("utf-8", "replace") if isinstance(v, list) else v
for raw in sys.stdin:
    if not raw.strip(): continue
    e = {k: text(v) for k, v in json.loads(raw).items()}
    us = int(e["__REALTIME_TIMESTAMP"])
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(us // 1000000)) + ".%03dZ" % (us // 1000 % 1000)
    msg = e.get("MESSAGE", "")
    if "WATCHKEEPER_TASK" in e or "WATCHKEEPER_WATCH" in e:
        kind = "task" if "WATCHKEEPER_TASK" in e else "watch"
        name = e.get("WATCHKEEPER_TASK", e.get("WATCHKEEPER_WATCH"))
        run = e.get("WATCHKEEPER_RUN_ID")
        head = "%s %s %s" % (stamp, kind, name) + (" " + run if run else "")
        if "WATCHKEEPER_STREAM" in e:
            print("%s %s: %s" % (head, e["WATCHKEEPER_STREAM"], msg))
        elif e.get("MESSAGE_ID") == RUN_FINISHED:
            said = "%s %s run %s" % (kind, name, run)
            print(head + " ended" + (msg[len(said):] if msg.startswith(said) else ": " + msg))
        else:
            print("%s %s: %s" % (head, PRIORITIES[int(e.get("PRIORITY", "6"))], msg))
    else:
        print("%s %s[%s] output: %s" % (stamp, e.get("SYSLOG_IDENTIFIER"), e.get("_PID"), msg))
' "$ID_RUN_FINISHED"
}

# A finished run of e2e-task, by its ID: exactly its entries, as journalctl has them. Then the
# task's newest N: N lines, in journalctl's order (the task runs every second, so they are
# compared as a run of consecutive lines of the journal read just after).
check_logs_task() {
    local run got want all n=7
    ns journalctl --sync 2>/dev/null
    run=$(ns journalctl -u watchkeeper "MESSAGE_ID=$ID_RUN_FINISHED" WATCHKEEPER_TASK=e2e-task -n 1 -o json --no-pager 2>/dev/null |
        python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["WATCHKEEPER_RUN_ID"])' 2>/dev/null)
    [ -n "$run" ] || { WHY="no finished run of e2e-task in the journal"; return 1; }
    got=$(ns /usr/local/bin/watchkeeper logs "$run" 2>&1) || { WHY="watchkeeper logs $run failed:$(printf '\n%s' "$got")"; return 1; }
    want=$(ns journalctl "WATCHKEEPER_RUN_ID=$run" -o json --no-pager 2>/dev/null | expected_logs)
    [ "$got" = "$want" ] || { WHY="logs $run differs from journalctl:$(printf '\n%s\n--- journalctl:\n%s' "$got" "$want")"; return 1; }
    case $got in
        *" task e2e-task $run stdout: disk almost full"*" task e2e-task $run ended: ok (exit 0) in "*) ;;
        *) WHY="logs $run lacks the output line or the record:$(printf '\n%s' "$got")"; return 1 ;;
    esac
    got=$(ns /usr/local/bin/watchkeeper logs e2e-task -n "$n" 2>&1) || { WHY="watchkeeper logs e2e-task -n $n failed:$(printf '\n%s' "$got")"; return 1; }
    [ "$(printf '%s\n' "$got" | grep -c .)" = "$n" ] || { WHY="logs e2e-task -n $n printed:$(printf '\n%s' "$got")"; return 1; }
    all=$(ns journalctl WATCHKEEPER_TASK=e2e-task -o json --no-pager 2>/dev/null | expected_logs)
    GOT=$got ALL=$all python3 -c '
import os, sys
got, every = os.environ["GOT"].split("\n"), os.environ["ALL"].split("\n")
n = len(got)
if not any(every[i:i + n] == got for i in range(len(every) - n + 1)):
    sys.exit("not %d consecutive lines of journalctl WATCHKEEPER_TASK=e2e-task" % n)
' 2>&1 || { WHY="logs e2e-task -n $n:$(printf '\n%s' "$got")"; return 1; }
    WHY="run $run: $(printf '%s\n' "$want" | grep -c .) entries as journalctl has them; the task's newest $n too"
}

# The watch rule's record (a file name that is not UTF-8 and holds $(id)) comes out escaped;
# output = "direct" lines are found by identifier and unit, as NAME[PID] output: LINE.
check_logs_watch_direct() {
    local got want
    got=$(ns /usr/local/bin/watchkeeper logs e2e-inbox --watch 2>&1) || { WHY="watchkeeper logs e2e-inbox --watch failed:$(printf '\n%s' "$got")"; return 1; }
    want=$(ns journalctl WATCHKEEPER_WATCH=e2e-inbox -o json --no-pager 2>/dev/null | expected_logs)
    [ "$got" = "$want" ] || { WHY="logs e2e-inbox differs from journalctl:$(printf '\n%s\n--- journalctl:\n%s' "$got" "$want")"; return 1; }
    printf '%s\n' "$got" | grep -qF ' ended (/var/spool/wk-e2e-in/caf\xe9 $(id).txt): ok (exit 0) in ' ||
        { WHY="no escaped record line:$(printf '\n%s' "$got")"; return 1; }
    LC_ALL=C grep -q $'\xe9' <<<"$got" && { WHY="a raw non-UTF-8 byte in the output"; return 1; }
    got=$(ns /usr/local/bin/watchkeeper logs e2e-direct -n 40 2>&1) || { WHY="watchkeeper logs e2e-direct failed:$(printf '\n%s' "$got")"; return 1; }
    printf '%s\n' "$got" | grep -Eq '^[0-9T:.-]+Z e2e-direct\[[0-9]+\] output: direct failure$' ||
        { WHY="no direct output line:$(printf '\n%s' "$got")"; return 1; }
    printf '%s\n' "$got" | grep -Eq '^[0-9T:.-]+Z task e2e-direct [0-9a-f]{16} ended: ok \(exit 0\)' ||
        { WHY="no record of e2e-direct:$(printf '\n%s' "$got")"; return 1; }
    WHY="$(printf '%s\n' "$got" | grep -c ' output: ') direct lines among the newest 40"
}

# `logs -f` started after a first run, so its one line (-n 1) says it follows; a second
# trigger's line must then appear; SIGINT ends it with 0.
check_logs_follow() {
    local out=/run/$NAME/logs-follow.out i run1 run2 said pid rc
    printf '%s\n' '' '[[task]]' 'name = "e2e-follow"' 'manual = true' 'command = ["/bin/echo", "followed {run_id}"]' |
        ns sh -c "cat >> $CONF" || { WHY="unable to add a task to $CONF"; return 1; }
    check_reload || return 1
    said=$(ns timeout 10 watchkeeper trigger e2e-follow 2>&1) || { WHY="trigger e2e-follow: $said"; return 1; }
    run1=$(printf '%s\n' "$said" | grep -oE '[0-9a-f]{16}' | head -n 1)
    for i in $(seq 50); do
        ns /usr/local/bin/watchkeeper logs "$run1" 2>/dev/null | grep -q " ended: " && break
        sleep 0.2
    done
    ns rm -f "$out" "$out.pid" "$out.rc"
    # sh starts a background command with SIGINT ignored, which would keep it from ever
    # arriving: python3 puts the default back and execs the command (same PID).
    ns sh -c "python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
        /usr/local/bin/watchkeeper logs e2e-follow -n 1 -f > $out 2>&1 & echo \$! > $out.pid; wait \$!; echo \$? > $out.rc" &
    local waiter=$!
    for i in $(seq 50); do ns test -s "$out" && break; sleep 0.2; done
    ns grep -q " task e2e-follow $run1 ended: ok" "$out" || { WHY="logs -f -n 1 did not start with the first run's record: $(ns cat "$out")"; kill "$waiter" 2>/dev/null; return 1; }
    said=$(ns timeout 10 watchkeeper trigger e2e-follow 2>&1) || { WHY="trigger e2e-follow: $said"; return 1; }
    run2=$(printf '%s\n' "$said" | grep -oE '[0-9a-f]{16}' | head -n 1)
    for i in $(seq 50); do ns grep -qF "$run2 ended: " "$out" && break; sleep 0.2; done
    pid=$(ns cat "$out.pid")
    ns kill -INT "$pid"
    for i in $(seq 50); do ns test -s "$out.rc" && break; sleep 0.2; done
    wait "$waiter" 2>/dev/null
    rc=$(ns cat "$out.rc" 2>/dev/null)
    ns grep -qF " task e2e-follow $run2 stdout: followed $run2" "$out" || { WHY="logs -f never showed the second run's line: $(ns cat "$out")"; return 1; }
    ns grep -qF "$run2 ended: ok" "$out" || { WHY="logs -f never showed the second run's record: $(ns cat "$out")"; return 1; }
    [ "$rc" = 0 ] || { WHY="logs -f exited ${rc:-not at all within 10 s} after SIGINT"; return 1; }
    WHY="$(ns grep -c . "$out") lines, exit 0 on SIGINT"
}

# Nothing to read, not allowed to read, nothing about the name: three messages, three codes.
check_logs_nothing() {
    local out rc
    ns mkdir -p "/run/$NAME/empty-journal"
    out=$(ns /usr/local/bin/watchkeeper logs e2e-task --directory "/run/$NAME/empty-journal" 2>&1); rc=$?
    [ "$rc" = 66 ] && grep -q 'it keeps nothing: no journal files in' <<<"$out" || { WHY="empty --directory: exit $rc: $out"; return 1; }
    out=$(ns setpriv --reuid=65534 --regid=65534 --clear-groups /usr/local/bin/watchkeeper logs e2e-task 2>&1); rc=$?
    [ "$rc" = 77 ] && grep -q 'are you root or in the group systemd-journal or adm' <<<"$out" || { WHY="as nobody: exit $rc: $out"; return 1; }
    out=$(ns /usr/local/bin/watchkeeper logs e2e-no-such-task 2>&1); rc=$?
    [ "$rc" = 1 ] && [ "$out" = "watchkeeper: no journal entries for task or watch rule e2e-no-such-task" ] || { WHY="unknown name: exit $rc: $out"; return 1; }
    WHY="66, 77 and 1"
}

# After the stop: the journal files are all it needs. --directory on the persistent journal
# shows the same lines.
check_logs_stopped() {
    local got again
    got=$(ns /usr/local/bin/watchkeeper logs e2e-task -n 5 2>&1) || { WHY="watchkeeper logs e2e-task failed:$(printf '\n%s' "$got")"; return 1; }
    [ "$(printf '%s\n' "$got" | grep -c ' task e2e-task ')" = 5 ] || { WHY="logs e2e-task -n 5 printed:$(printf '\n%s' "$got")"; return 1; }
    again=$(ns /usr/local/bin/watchkeeper logs e2e-task -n 5 --directory /var/log/journal 2>&1) || { WHY="logs --directory /var/log/journal failed:$(printf '\n%s' "$again")"; return 1; }
    [ "$got" = "$again" ] || { WHY="--directory /var/log/journal shows other lines:$(printf '\n%s\n---\n%s' "$got" "$again")"; return 1; }
    WHY="last: $(printf '%s\n' "$got" | tail -n 1)"
}

# Informational, for the closing notes: SIGUSR1 (sent with kill through nsenter) to the dump
# entry's arrival in journald (__REALTIME_TIMESTAMP), ten times. An upper bound: it includes
# starting nsenter and kill.
measure_dump_latency() {
    local pid i before sent arrived all=""
    pid=$(prop MainPID)
    say "info daemon RSS under systemd: $(ns awk '/^VmRSS/ {print $2, $3}' "/proc/$pid/status")"
    for i in $(seq 10); do
        before=$(count_id "$ID_DUMP")
        sent=$(date +%s%6N)
        ns kill -USR1 "$pid"
        wait_id "$ID_DUMP" "$before" || return 0
        arrived=$(journal_json "$ID_DUMP" | tail -n 1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["__REALTIME_TIMESTAMP"])')
        all="$all $(( arrived - sent ))"
    done
    printf '%s\n' $all | sort -n | awk '{v[NR]=$1} END {printf "info SIGUSR1 to dump entry in the journal: p50 %.1f ms, max %.1f ms over %d (kill via nsenter; journald receive time)\n", v[int((NR+1)/2)]/1000, v[NR]/1000, NR}' |
        while read -r line; do say "$line"; done
}

# ---------------------------------------------------------------------------
check start_ns || finish "systemd did not boot"
check install_unit || finish "the installation failed"
check check_start
[ "$(prop ActiveState)" = active ] || finish "the unit is not running"
check check_dump
measure_dump_latency
check check_catalog
check check_control
check check_reload
check check_broken_reload
check check_restored_reload
check check_task_journal
check check_direct_output
check check_cgroup_containment
check check_watch_journal
check check_logs_task
check check_logs_watch_direct
check check_logs_follow
check check_logs_nothing
# Informational, for the docs: systemd's view of the unit's sandboxing.
# E2E_SECURITY_REPORT=FILE keeps the whole table (docs/measurements/systemd-security.md).
security=$(ns systemd-analyze security "$UNIT" --no-pager 2>/dev/null)
[ -n "${E2E_SECURITY_REPORT:-}" ] && printf '%s\n' "$security" > "$E2E_SECURITY_REPORT"
exposure=$(printf '%s\n' "$security" | grep -i 'overall exposure' | sed 's/^[^A-Za-z]*//')
[ -n "$exposure" ] && say "info $exposure"
# Issue 11's bound: the shipped unit's exposure stays at most 2.0 while the jobs above
# (one as another user) ran under it.
check_security_exposure() {
    local level
    level=$(printf '%s\n' "$exposure" | grep -oE '[0-9]+\.[0-9]+' | head -n 1)
    [ -n "$level" ] || { WHY="no overall exposure in systemd-analyze security's output"; return 1; }
    awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }' || { WHY="systemd-analyze security: exposure $level, above 2.0"; return 1; }
    # PrivateNetwork= and RestrictAddressFamilies= take the network from jobs: said at start.
    local said
    ns journalctl --sync 2>/dev/null
    said=$(ns journalctl -u watchkeeper -o cat --no-pager 2>&1 | grep -F "jobs' network: none: only loopback" | head -n 1)
    [ -n "$said" ] || { WHY="no \"jobs' network: none\" line at start"; return 1; }
    # Without CAP_SYS_NICE, LimitNICE=-4 is what lets libdispatch give its higher-QoS
    # threads their nice value: if systemd could apply it, no thread may have failed.
    local pid nice_limit
    pid=$(ns systemctl show -p MainPID --value watchkeeper)
    nice_limit=$(ns cat "/proc/$pid/limits" 2>/dev/null | awk '/^Max nice priority/ { print $4 }')
    said=$(ns journalctl --no-pager -o cat 2>&1 | grep -F "Failed to set thread priority" | head -n 1)
    if [ "$nice_limit" = 24 ]; then
        [ -z "$said" ] || { WHY="libdispatch could not set a thread's priority under LimitNICE=-4: $said"; return 1; }
    else
        # A host whose root lacks CAP_SYS_RESOURCE (a container) cannot raise the limit.
        say "info LimitNICE=-4 not applied here (RLIMIT_NICE ${nice_limit:-unknown}; raising it needs CAP_SYS_RESOURCE), so libdispatch logged: ${said:-nothing}"
    fi
}
check check_security_exposure
check check_fanotify_refused || fanotify_recover
check check_fanotify_dropin || fanotify_recover
check check_stop
check check_logs_stopped
finish ""
