#!/bin/sh
# link/prepare_split.sh ARCHIVE SHA256 DIR: the release build's split of the Swift runtime.
# Takes Swift.o out of ARCHIVE (the toolchain's libswiftCore.a) into DIR, and, when its sha256 is
# SHA256 (the Swift.o link/check_split.py was run on), splits it into DIR/split/Swift.o with
# link/split_text.py; link/ld_split.py links that. Otherwise it says so on stderr and leaves no
# split object: the runtime is linked as it came. Files are rewritten only when their contents
# change, and DIR/mode (what the link will do) only when that changes, so the Makefile can tell
# when the binary must be linked again.
set -eu
archive=$1 pinned=$2 dir=$3
here=$(dirname "$0")
mkdir -p "$dir"
llvm-ar p "$archive" Swift.o > "$dir/Swift.o.new"
if cmp -s "$dir/Swift.o.new" "$dir/Swift.o"; then rm "$dir/Swift.o.new"; else mv "$dir/Swift.o.new" "$dir/Swift.o"; fi
sum=$(sha256sum < "$dir/Swift.o" | cut -d' ' -f1)
if [ "$sum" = "$pinned" ]; then
  if [ ! -f "$dir/split/Swift.o" ] || [ "$dir/Swift.o" -nt "$dir/split/Swift.o" ] || [ "$here/split_text.py" -nt "$dir/split/Swift.o" ]; then
    mkdir -p "$dir/split"
    if python3 "$here/split_text.py" "$dir/Swift.o" "$dir/split/Swift.o.new"; then
      mv "$dir/split/Swift.o.new" "$dir/split/Swift.o"
    else
      rm -rf "$dir/split"
      echo "release: link/split_text.py did not split $archive's Swift.o: linking the Swift runtime as it came" >&2
    fi
  fi
else
  rm -rf "$dir/split"
  echo "release: $archive's Swift.o (sha256 $sum) is not the one the split was checked on ($pinned): linking the Swift runtime as it came" >&2
fi
if [ -f "$dir/split/Swift.o" ]; then mode="split $pinned"; else mode="as it came $sum"; fi
if [ "$(cat "$dir/mode" 2>/dev/null)" != "$mode" ]; then echo "$mode" > "$dir/mode"; fi
