#!/usr/bin/env bash
# Fuzz the method-2 handshake record parser (ddstore-ofi/fuzz/handshake_fuzz.c).
#
#   ci/fuzz-handshake.sh [SECONDS]          libFuzzer (clang, ASan + UBSan) for
#                                              SECONDS (default 60) over a copy of
#                                              ddstore-ofi/fuzz/corpus
#   ci/fuzz-handshake.sh [SECONDS] --merge  the same, then merge the inputs that
#                                              add coverage into the tree's corpus
#   ci/fuzz-handshake.sh --replay           no libFuzzer: gcc + ASan + UBSan, runs
#                                              every corpus file once (seconds; CI)
#   ... -- ARGS                                extra libFuzzer arguments
#
# Exit status: 0 = no crash; 1 = a crash (its input's path is printed; the build
# directory is kept); 2 = usage or build error.  Builds in a temporary directory
# under /tmp (removed on success; KEEP=1 keeps it).  One fuzzing process (the
# machine's cores are shared); CC / FUZZ_CC override gcc / clang.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
cd "$TOP"

secs=60 merge=0 replay=0 extra=()
while [ $# -gt 0 ]; do
    case "$1" in
    --merge) merge=1 ;;
    --replay) replay=1 ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    '' | *[!0-9]*) echo "fuzz-handshake: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    *) secs=$1 ;;
    esac
    shift
done
if [ "$replay" = 1 ] && [ "$merge" = 1 ]; then
    echo "fuzz-handshake: --replay and --merge do not go together" >&2
    exit 2
fi

CORPUS=$TOP/ddstore-ofi/fuzz/corpus
# What the fuzz target links: the record module (codec and file names) and
# the core files it calls (dds_error, DDS_LOG and the logger's settings,
# dds_dtype_size/_name, files.h).  No generated header needed.
SRCS=(ddstore-ofi/fuzz/handshake_fuzz.c ddstore-ofi/transport/ddofi_hs.c
      ddstore-ofi/transport/ddofi_hs_files.c
      ddstore-core/src/dds_errors.c ddstore-core/src/dds_log.c
      ddstore-core/src/dds_types.c ddstore-core/src/dds_files.c
      ddstore-core/src/dds_config.c)
INCS=(-Iddstore-core/include -Iddstore-core/src -Iddstore-ofi/include)
COPTS=(-std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror)

BUILD=$(mktemp -d /tmp/ddshs-fuzz.XXXXXX)
keep=${KEEP:-0}
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$BUILD"; fi; }
trap cleanup EXIT

if [ "$replay" = 1 ]; then
    CC=${CC:-gcc}
    "$CC" "${COPTS[@]}" -fsanitize=address,undefined -fno-sanitize-recover=all \
        -fno-omit-frame-pointer -DDDS_FUZZ_REPLAY_MAIN "${INCS[@]}" "${SRCS[@]}" \
        -o "$BUILD/handshake_replay" -lpthread || { echo "fuzz-handshake: build failed" >&2; exit 2; }
    if ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
       UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:abort_on_error=1 \
       "$BUILD/handshake_replay" "$CORPUS"; then
        exit 0
    fi
    echo "fuzz-handshake: replay FAILED over $CORPUS" >&2
    exit 1
fi

FUZZ_CC=${FUZZ_CC:-clang}
"$FUZZ_CC" "${COPTS[@]}" -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined "${INCS[@]}" "${SRCS[@]}" \
    -o "$BUILD/handshake_fuzz" -lpthread || { echo "fuzz-handshake: build failed" >&2; exit 2; }

mkdir -p "$BUILD/corpus" "$BUILD/crashes"
cp "$CORPUS"/* "$BUILD/corpus/"
echo "fuzz-handshake: ${secs}s over a copy of $CORPUS ($(ls "$CORPUS" | wc -l) seeds) in $BUILD"
set +e
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$BUILD/handshake_fuzz" -max_total_time="$secs" -max_len=8192 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$BUILD/crashes/" ${extra[@]+"${extra[@]}"} \
    "$BUILD/corpus" 2>&1 | tee "$BUILD/fuzz.log" | grep -v -e '^#[0-9].*\(NEW\|REDUCE\|pulse\)' -e '^stat::'
status=${PIPESTATUS[0]}
set -e
crashes=$(find "$BUILD/crashes" -type f 2>/dev/null)
if [ "$status" != 0 ] || [ -n "$crashes" ]; then
    keep=1
    echo "fuzz-handshake: CRASH (libFuzzer exit $status); log: $BUILD/fuzz.log" >&2
    for f in $crashes; do
        echo "fuzz-handshake: crash input: $f" >&2
    done
    echo "fuzz-handshake: reproduce: $BUILD/handshake_fuzz <crash input>" >&2
    exit 1
fi
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$BUILD/fuzz.log")
if [ "$merge" = 1 ]; then
    before=$(ls "$CORPUS" | wc -l)
    "$BUILD/handshake_fuzz" -merge=1 -max_len=8192 "$CORPUS" "$BUILD/corpus" \
        >"$BUILD/merge.log" 2>&1 || { keep=1; echo "fuzz-handshake: merge failed: $BUILD/merge.log" >&2; exit 1; }
    echo "fuzz-handshake: merged into $CORPUS: $before -> $(ls "$CORPUS" | wc -l) files"
fi
echo "fuzz-handshake: no crash (${execs:-?} executions)"
