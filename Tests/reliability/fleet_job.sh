#!/bin/sh
# The fleet nemesis's job (fleet_nemesis.py): it logs its own start and end on CLOCK_REALTIME
# as JSON lines of the history watchkeeper-fleet-check reads (Sources/FleetCheck/FleetHistory.swift),
# appended to HISTORY (one short write each, O_APPEND: lines of concurrent jobs never mix).
#
#   fleet_job.sh task HOST HISTORY SECONDS
#       a fire: item task:<task>@<WATCHKEEPER_SCHEDULED_AT>; sleeps SECONDS
#   fleet_job.sh file HOST HISTORY DONE_DIRECTORY
#       a file of the shared inbox, whose content is "<name> <version> <seconds>": item
#       file:inbox:<name>#<version>; sleeps SECONDS, then links the file as
#       DONE_DIRECTORY/<name>.v<version>.<run> (the work: it fails if the file is gone), logs
#       its end ok, and only then removes the file from the inbox. A kill before the end line
#       leaves the file in the inbox, to be run again; a kill after it, a run again that the
#       checker excuses (its host was killed within the silence window). A file already gone
#       (removed by another run) is attributed to the newest version done, and ends not ok at once.
#
# SIGTERM (the daemon's stop signal: a fence, an expiry, a stop) ends it with an end line
# ok=false, so a fenced run has an end; SIGKILL leaves none, and the nemesis's fault line
# (jobs_killed) closes it.
kind=$1 host=$2 history=$3
at=$(date +%s.%N)
run="$host-$WATCHKEEPER_RUN_ID-$$"
item= started= note=

finish() {
    # Cleared before the write: a TERM between the two would otherwise write a second end.
    was=$started
    started=
    [ -n "$was" ] && printf '{"type":"end","item":"%s","host":"%s","run":"%s","t":%s,"ok":%s%s}\n' \
        "$item" "$host" "$run" "$(date +%s.%N)" "$1" "${2:+,\"note\":\"$2\"}" >> "$history"
}
trap 'finish false "stopped by SIGTERM"; exit 143' TERM INT

case $kind in
task)
    item="task:$WATCHKEEPER_TASK@$WATCHKEEPER_SCHEDULED_AT"
    pause=$4
    ;;
file)
    done_dir=$4
    name=${WATCHKEEPER_PATH##*/}
    if ! read -r _ version pause 2>/dev/null < "$WATCHKEEPER_PATH"; then
        version=gone pause= note=',"note":"file already gone"'
        for moved in "$done_dir/$name".v*; do
            [ -e "$moved" ] || continue
            number=${moved##*.v}
            number=${number%%.*}
            if [ "$version" = gone ] || [ "$number" -gt "$version" ]; then version=$number; fi
        done
    fi
    item="file:inbox:$name#$version"
    ;;
*)
    echo "fleet_job.sh: unknown kind $kind" >&2
    exit 2
    ;;
esac

printf '{"type":"start","item":"%s","host":"%s","run":"%s","t":%s%s}\n' "$item" "$host" "$run" "$at" "$note" >> "$history"
started=1
if [ -z "$pause" ]; then
    finish false
    exit 1
fi
# In the background, so that a TERM is handled at once rather than after the sleep.
sleep "$pause" &
wait $!
if [ "$kind" = file ] && ! ln -- "$WATCHKEEPER_PATH" "$done_dir/$name.v$version.$run" 2>/dev/null; then
    finish false
    exit 1
fi
# Done: the end line, the file's removal and the exit 0 go together, so a stop signal now
# cannot leave an ok end line beside a run the daemon records as stopped.
trap '' TERM INT
finish true
[ "$kind" = file ] && rm -f -- "$WATCHKEEPER_PATH"
exit 0
