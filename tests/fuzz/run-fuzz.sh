#!/usr/bin/env bash
# Runs one libFuzzer target over its seed corpus and its regressions without writing into the
# tree: run-fuzz.sh BINARY NAME short|long RUNS
#
# libFuzzer adds the inputs it finds to the first corpus directory it is given, so that is a
# fresh temporary one; tests/fuzz/corpus/NAME and tests/fuzz/regressions/NAME follow, read only.
# A crash leaves its input in a temporary directory, printed with the command that reproduces
# it. Short runs are repeatable (-seed=1); long ones keep what they found for a corpus merge.
# Environment: TESSERA_FUZZ_RUNS (inputs, instead of RUNS), TESSERA_FUZZ_SECONDS (a time limit
# for long runs, default 3600), TESSERA_FUZZ_ARGS (more libFuzzer flags).
set -uo pipefail

if [ $# -ne 4 ]; then
  echo "usage: $0 BINARY NAME short|long RUNS" >&2
  exit 2
fi
bin=$(readlink -f "$1") name=$2 mode=$3 runs=${TESSERA_FUZZ_RUNS:-$4}
here=$(cd "$(dirname "$0")" && pwd)
seeds=$here/corpus/$name
regressions=$here/regressions/$name

work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-fuzz-$name.XXXXXX") || exit 1
mkdir -p "$work/new" "$work/crashes"

args=(-runs="$runs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024
      -artifact_prefix="$work/crashes/" -print_final_stats=1)
if [ "$mode" = short ]; then
  args+=(-seed=1)
else
  args+=(-max_total_time="${TESSERA_FUZZ_SECONDS:-3600}")
fi
if [ -f "$here/dicts/$name.dict" ]; then
  args+=(-dict="$here/dicts/$name.dict")
fi
# shellcheck disable=SC2206 # word splitting of the extra flags is the point
args+=(${TESSERA_FUZZ_ARGS:-})
dirs=("$work/new" "$seeds")
[ -d "$regressions" ] && dirs+=("$regressions")

# Undefined behaviour stops the run like a crash does (leaks are reported by libFuzzer itself);
# lsan.supp names the one leak at exit that is gRPC's, not ours.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$here/lsan.supp
# keras_h5 runs libhdf5 in this process, which the product runs in a child (see the target):
# its suppression names a frame deep inside libhdf5, which only the slow unwinder sees, and a
# size libhdf5 reads from the file and asks malloc for gets NULL, as from glibc, not an abort.
# (A campaign run with -detect_leaks=0 may pass ASAN_OPTIONS=fast_unwind_on_malloc=1, 4x faster.)
if [ "$name" = keras_h5 ]; then
  export ASAN_OPTIONS=fast_unwind_on_malloc=0:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}
fi


echo "fuzz $name ($mode): $bin ${args[*]} ${dirs[*]}"
"$bin" "${args[@]}" "${dirs[@]}"
rc=$?

found=$(find "$work/crashes" -type f 2>/dev/null)
if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
  echo
  echo "fuzz $name: FAILED (exit $rc)"
  for f in $found; do
    echo "  input:      $f"
    echo "  reproduce:  $bin $f"
    known=
    for r in "$regressions"/*; do
      [ -f "$r" ] && cmp -s "$f" "$r" && known=$r
    done
    if [ -n "$known" ]; then
      echo "  it is the regression $known: not fixed yet"
    else
      echo "  keep it:    mkdir -p $regressions && cp $f $regressions/"
    fi
  done
  # libFuzzer's status for a crash is 77, which meson would count as a skip
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ]; then rc=1; fi
  # A long run keeps what it found: a failure at exit (a leak) names no input to replay.
  if [ "$mode" = long ]; then
    echo "  corpus:     $work/new"
  else
    rm -rf "$work/new"
  fi
  exit "$rc"
fi
if [ "$mode" = long ]; then
  echo "fuzz $name: new inputs in $work/new (merge: $bin -merge=1 $seeds $work/new)"
else
  rm -rf "$work"
fi
exit 0
