#!/usr/bin/env bash
# ofi-probe-compare: ddstore-ofi's reads next to a bare fi_read loop over the
# same provider, on this host (two processes, 127.0.0.1 for tcp).
#
#   ci/ofi-probe-compare.sh [REPEATS]          (default 5; best of REPEATS)
#
# BIN: directory with ofi_pingread and ofi_bare_read (default: bazel-bin's
# ddstore-ofi, else build/ofi).  PROVIDERS: default "tcp shm".
#
# Rows printed per provider:
#   4 KiB latency      one read per call         library vs bare (server waits on
#                                                its CQ's fd as the library's
#                                                progress thread does; shm: polls)
#   1 MiB bandwidth    16 reads in flight
#   3136 B rows        128 random rows per call  (bare: 128 in flight)
# A machine shared with other work makes single runs noisy: the best of
# REPEATS is reported, and the load average is printed.
set -euo pipefail
REPEATS=${1:-5}
TOP=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${BIN:-}" ]; then
    if [ -x "$TOP/bazel-bin/ddstore-ofi/ofi_pingread" ]; then BIN=$TOP/bazel-bin/ddstore-ofi
    else BIN=$TOP/build/ofi; fi
fi
PROVIDERS=${PROVIDERS:-"tcp shm"}

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
best_min() { sort -g | head -1; }
best_max() { sort -g | tail -1; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); best of $REPEATS runs; binaries in $BIN"
printf '%-12s %-18s %12s %12s %8s\n' provider test library bare ratio
for p in $PROVIDERS; do
    case $p in
        tcp) bp="tcp;ofi_rxm" ;;
        *) bp=$p ;;
    esac
    lib=() ; : > /tmp/ofi_cmp_lib.$$ ; : > /tmp/ofi_cmp_lat.$$ ; : > /tmp/ofi_cmp_bw.$$ ; : > /tmp/ofi_cmp_row.$$
    for _ in $(seq "$REPEATS"); do
        "$BIN/ofi_pingread" --provider "$p" --local-only --single-node -q >>/tmp/ofi_cmp_lib.$$
        "$BIN/ofi_bare_read" --provider "$bp" --server-wait --size 4096 --iters 5000 >>/tmp/ofi_cmp_lat.$$
        "$BIN/ofi_bare_read" --provider "$bp" --server-wait --size 1048576 --window 16 --iters 2000 >>/tmp/ofi_cmp_bw.$$
        "$BIN/ofi_bare_read" --provider "$bp" --server-wait --size 3136 --window 128 --iters 50000 >>/tmp/ofi_cmp_row.$$
    done
    l_lat=$(field lat_us </tmp/ofi_cmp_lib.$$ | best_min)
    l_bw=$(field bw_gbs </tmp/ofi_cmp_lib.$$ | best_max)
    l_row=$(field row_us </tmp/ofi_cmp_lib.$$ | best_min)
    b_lat=$(field us_per_read </tmp/ofi_cmp_lat.$$ | best_min)
    b_bw=$(field gb_s </tmp/ofi_cmp_bw.$$ | best_max)
    b_row=$(field us_per_read </tmp/ofi_cmp_row.$$ | best_min)
    printf '%-12s %-18s %9s us %9s us %8s\n' "$p" "4 KiB latency" "$l_lat" "$b_lat" \
        "$(awk -v a="$l_lat" -v b="$b_lat" 'BEGIN{printf "%.2f", a/b}')"
    printf '%-12s %-18s %7s GB/s %7s GB/s %8s\n' "$p" "1 MiB bandwidth" "$l_bw" "$b_bw" \
        "$(awk -v a="$l_bw" -v b="$b_bw" 'BEGIN{printf "%.2f", b/a}')"
    printf '%-12s %-18s %5s us/row %5s us/row %8s\n' "$p" "3136 B rows x128" "$l_row" "$b_row" \
        "$(awk -v a="$l_row" -v b="$b_row" 'BEGIN{printf "%.2f", a/b}')"
done
rm -f /tmp/ofi_cmp_*.$$
echo "ratio: library time / bare time (1.00 = as fast as the bare loop; < 1.5 expected on tcp)"
