#!/usr/bin/env bash
# Packs a device command's output folder for the trip back: the device returns at most 8 files from $OUT
# (the first 8 by name), and the row scripts write more (session 27's
# vsa_row.sh call lost its FastWan trace and denoise log that way). Every file in DIR except those named
# goes into DIR/logs.tgz and is removed; a script that is killed before this keeps its files as written.
#   bash bench/pack_out.sh DIR [KEEP ...]      e.g. bash bench/pack_out.sh "$OUT" summary.md
set -u
dir=${1:?usage: pack_out.sh DIR [KEEP ...]}
shift
list=$(mktemp)
(cd "$dir" && find . -type f ! -name logs.tgz | sed 's|^\./||' | sort) >"$list"
for keep in "$@"; do grep -vxF -- "$keep" "$list" >"$list.k"; mv "$list.k" "$list"; done
if [ -s "$list" ]; then
  (cd "$dir" && tar czf logs.tgz -T "$list" && xargs -d '\n' rm -f <"$list") &&
    echo "pack_out: $(wc -l <"$list") files into $dir/logs.tgz (tar xzf logs.tgz to read them)"
fi
rm -f "$list"
