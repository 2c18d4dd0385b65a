#!/bin/bash
# Runs fanotify-probe.c as a service with the shipped unit's sandbox, under a real systemd
# booted in the end-to-end test's namespace (Tests/e2e/systemd-e2e.sh --ns-init), once per
# variant of the unit, and prints what each step of the probe got. Root only.
#
#   docs/measurements/fanotify-unit/run-in-e2e.sh [VARIANT...]
#   SECURITY_OUT=DIR docs/measurements/fanotify-unit/run-in-e2e.sh
#
# The second form writes systemd-analyze security's table for the installed unit without
# and with the drop-in (DIR/without.txt, DIR/with.txt) instead.
# The probe's unit is systemd/watchkeeper.service with its ExecStart= replaced by the probe
# (Type=oneshot, no watchdog); each variant is a drop-in added to it (see VARIANTS below).
# The probe watches a tmpfs mounted in the namespace and, from outside the service's own
# mount namespace, the harness writes a file into it. Results: ../fanotify-unit.md.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
E2E=$REPO/Tests/e2e/systemd-e2e.sh
NAME=watchkeeper-e2e
PATH_IN_NS=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORK=$(mktemp -d /tmp/fanotify-unit.XXXXXX)
DROPIN=$REPO/systemd/fanotify.conf

gcc -O2 -Wall -o "$WORK/fanotify-probe" "$HERE/fanotify-probe.c" || exit 1

# Boot as systemd-e2e.sh's start_ns does (its --ns-init does the mounts), without its checks.
root=$(findmnt -n -r -t cgroup2 -o TARGET | head -n 1)
CGROUP=$root/fanotify-unit-$$
mkdir "$CGROUP"
: >"$WORK/console"
(
    echo "$BASHPID" >"$CGROUP/cgroup.procs" || exit 1
    exec setpriv --pdeathsig SIGKILL unshare --cgroup --pid --mount --uts --ipc --net --fork --mount-proc \
        --kill-child=SIGKILL -- "$E2E" --ns-init "$REPO" /bin/true "$WORK/console"
) </dev/null >"$WORK/boot.log" 2>&1 &
UNSHARE_PID=$! NS_PID=
cleanup() {
    [ -n "$NS_PID" ] && kill -KILL "$NS_PID" 2>/dev/null
    wait "$UNSHARE_PID" 2>/dev/null
    for _ in $(seq 50); do grep -qx 'populated 0' "$CGROUP/cgroup.events" 2>/dev/null && break; sleep 0.1; done
    find "$CGROUP" -depth -type d -exec rmdir {} + 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
ns() {
    nsenter --target "$NS_PID" --mount --pid --cgroup --uts --ipc --net -- \
        env -i PATH="$PATH_IN_NS" LANG=C.UTF-8 SYSTEMD_PAGER=cat SYSTEMD_COLORS=0 "$@"
}
for _ in $(seq 100); do
    NS_PID=$(pgrep -P "$UNSHARE_PID" | head -n 1)
    [ -n "$NS_PID" ] && [ "$(cat "/proc/$NS_PID/comm" 2>/dev/null)" = systemd ] && break
    NS_PID=; sleep 0.1
done
[ -n "$NS_PID" ] || { cat "$WORK/boot.log"; exit 1; }
for _ in $(seq 300); do
    case $(ns systemctl is-system-running 2>/dev/null) in running|degraded) break ;; esac
    sleep 0.2
done

ns sh -c 'cat > /usr/local/bin/fanotify-probe && chmod 0755 /usr/local/bin/fanotify-probe' <"$WORK/fanotify-probe"
# A tmpfs the service sees through its own mount namespace (PrivateMounts=yes), and a
# directory on the namespace's overlay /var, to compare.
ns sh -c 'mkdir -p /var/spool/fan-tmpfs /var/spool/fan-overlay && mount -t tmpfs fan-tmpfs /var/spool/fan-tmpfs'
sed -e 's|^Type=notify|Type=oneshot|' -e '/^ExecStartPre=/d' -e '/^ExecReload=/d' -e '/^WatchdogSec=/d' \
    -e '/^Restart/d' -e '/^NotifyAccess=/d' -e 's|^ExecStart=.*|ExecStart=/usr/local/bin/fanotify-probe ${PROBE_DIR} 3|' \
    "$REPO/systemd/watchkeeper.service" | ns sh -c 'cat > /etc/systemd/system/fanprobe.service'
ns mkdir -p /etc/systemd/system/fanprobe.service.d

# VARIANT: drop-in text (besides the directory the probe watches).
declare -A VARIANTS=(
    [shipped]=''
    [cap-only]=$'[Service]\nCapabilityBoundingSet=CAP_SYS_ADMIN'
    [syscalls-only]=$'[Service]\nSystemCallFilter=fanotify_init fanotify_mark open_by_handle_at'
    [drop-in]=$(cat "$DROPIN")
    [drop-in,no-CAP_DAC_READ_SEARCH]=$(cat "$DROPIN"; printf '\nCapabilityBoundingSet=~CAP_DAC_READ_SEARCH')
    [drop-in,PrivateUsers=yes]=$(cat "$DROPIN"; printf '\nPrivateUsers=yes')
    [drop-in,ProtectKernelTunables=no,PrivateMounts=no,RestrictNamespaces=no,NoNewPrivileges=no]=$(cat "$DROPIN";
        printf '\nProtectKernelTunables=no\nPrivateMounts=no\nRestrictNamespaces=no\nNoNewPrivileges=no')
)
ORDER=(shipped cap-only syscalls-only drop-in drop-in,no-CAP_DAC_READ_SEARCH drop-in,PrivateUsers=yes
       drop-in,ProtectKernelTunables=no,PrivateMounts=no,RestrictNamespaces=no,NoNewPrivileges=no)
[ $# -gt 0 ] && ORDER=("$@")

run_variant() {
    local variant=$1 dir=$2 inv
    { printf '%s\n' "${VARIANTS[$variant]}"; printf '[Service]\nEnvironment=PROBE_DIR=%s\n' "$dir"; } |
        ns sh -c 'cat > /etc/systemd/system/fanprobe.service.d/variant.conf'
    ns systemctl daemon-reload
    ns rm -f "$dir/from-outside" "$dir/probe-self"
    ns systemctl reset-failed fanprobe.service 2>/dev/null
    ns systemctl start --no-block fanprobe.service
    sleep 1.5
    # Now: a oneshot unit that succeeded is unloaded with its invocation id (nothing holds it).
    inv=$(ns systemctl show -p InvocationID --value fanprobe.service)
    ns sh -c "echo outside > $dir/from-outside"
    for _ in $(seq 50); do
        case $(ns systemctl show -p ActiveState --value fanprobe.service) in activating|active) sleep 0.2 ;; *) break ;; esac
    done
    ns journalctl --sync
    echo "== $variant on $dir: $(ns systemctl show -p Result --value fanprobe.service)"
    echo "   CapabilityBoundingSet: $(ns systemctl show -p CapabilityBoundingSet --value fanprobe.service)"
    ns journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$inv" | sed 's/^/   /'
}
if [ -n "${SECURITY_OUT:-}" ]; then
    # systemd-analyze security on the unit as `make install-files` installs it, without and
    # with the drop-in where docs/operations.md puts it.
    mkdir -p "$SECURITY_OUT"
    sed 's|@BINDIR@|/usr/local/bin|g' "$REPO/systemd/watchkeeper.service" | ns sh -c 'cat > /etc/systemd/system/watchkeeper.service'
    ns systemctl daemon-reload
    ns systemd-analyze security watchkeeper.service --no-pager >"$SECURITY_OUT/without.txt" 2>&1
    ns systemctl show -p CapabilityBoundingSet -p DropInPaths watchkeeper.service >>"$SECURITY_OUT/without.txt"
    ns install -D -m 0644 /dev/stdin /etc/systemd/system/watchkeeper.service.d/fanotify.conf <"$DROPIN"
    ns systemctl daemon-reload
    ns systemd-analyze security watchkeeper.service --no-pager >"$SECURITY_OUT/with.txt" 2>&1
    ns systemctl show -p CapabilityBoundingSet -p DropInPaths watchkeeper.service >>"$SECURITY_OUT/with.txt"
    ns systemctl show -p SystemCallFilter watchkeeper.service | tr ' ' '\n' | grep -E 'fanotify|handle_at' |
        sed 's/^/SystemCallFilter has /' >>"$SECURITY_OUT/with.txt"
    exit 0
fi
for v in "${ORDER[@]}"; do
    run_variant "$v" /var/spool/fan-tmpfs
done
run_variant drop-in /var/spool/fan-overlay
