#!/usr/bin/env bash
# Criterion rows of two commits side by side in one run, e.g. before and after a change:
#
#   benches/criterion-ab.sh OLD_BENCH_BIN NEW_BENCH_BIN ROUNDS FILTER...
#
# OLD_BENCH_BIN and NEW_BENCH_BIN are the `engine` criterion bench executables of two builds
# (`cargo bench -p ptc-benches --bench engine --no-run` prints the path as
# `Executable benches/engine.rs (target/release/deps/engine-HASH)`; build the older one in a
# `git worktree add` checkout with a CARGO_TARGET_DIR of its own). Each FILTER is an exact
# criterion bench id (`BIN --bench --list` prints them all). For each of ROUNDS rounds and each
# FILTER, the script runs the old binary then the new one (the new one first in every other
# round, to cancel drift) as
#
#   BIN --bench --exact FILTER --warm-up-time 1 --measurement-time 3 --noplot
#
# each with CRITERION_HOME in a temporary directory of its own (so neither compares against the
# other's saved baseline), takes the point estimate of criterion's `time: [low MID high]` line
# in µs, and at the end prints, per FILTER, the median over the rounds of old and new, new/old,
# and the number of rounds measured. (A group that sets its own warm-up or measurement time in
# benches/benches/engine.rs keeps it: criterion's per-group settings win over these flags.)
#
# The bench needs nothing relative to its working directory (the component is embedded, the
# python-data artifacts' path is compiled in, servers bind free ports; the compiled-component
# cache is $XDG_CACHE_HOME/ptc-engine or ~/.cache/ptc-engine, keyed by what is compiled). Set
# OLD_DIR / NEW_DIR to run a binary from another directory anyway (e.g. its own checkout);
# both default to the current one. KEEP_LOGS=1 keeps each run's output (its directory is
# printed at the end).
set -euo pipefail

usage() {
    cat >&2 <<'EOF'
usage: benches/criterion-ab.sh OLD_BENCH_BIN NEW_BENCH_BIN ROUNDS FILTER...
  FILTER: exact criterion bench ids, e.g.
    pass/library  pass/grpc  sequential_100/library  sequential_100/grpc
    session/pass_library  session/pass_grpc
  (`BIN --bench --list` prints every id.)
  env: OLD_DIR / NEW_DIR (working directory of each binary; default: the current one),
       KEEP_LOGS=1 (keep each run's output)
EOF
    exit 2
}

[[ $# -ge 4 ]] || usage
OLD_BIN=$(realpath "$1")
NEW_BIN=$(realpath "$2")
ROUNDS=$3
shift 3
FILTERS=("$@")
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, not '$ROUNDS'" >&2; usage; }
for bin in "$OLD_BIN" "$NEW_BIN"; do
    [[ -x $bin ]] || { echo "not an executable: $bin" >&2; exit 2; }
done
OLD_DIR=$(realpath "${OLD_DIR:-.}")
NEW_DIR=$(realpath "${NEW_DIR:-.}")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/criterion-ab.XXXXXX")
mkdir -p "$WORK/home-old" "$WORK/home-new" "$WORK/logs"
cleanup() {
    if [[ ${KEEP_LOGS:-0} == 1 ]]; then
        echo "logs kept in $WORK/logs" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
RESULTS=$WORK/results # lines: FILTER SIDE MICROSECONDS

# Runs one side on one filter; appends its point estimate to $RESULTS.
measure() {
    local side=$1 filter=$2 round=$3 bin dir log us
    if [[ $side == old ]]; then bin=$OLD_BIN dir=$OLD_DIR; else bin=$NEW_BIN dir=$NEW_DIR; fi
    log=$WORK/logs/$round-${filter//\//_}-$side.log
    if ! (cd "$dir" && CRITERION_HOME="$WORK/home-$side" "$bin" --bench --exact "$filter" \
        --warm-up-time 1 --measurement-time 3 --noplot --color never) >"$log" 2>&1; then
        echo "round $round: $side $filter failed; its output ends:" >&2
        tail -n 20 "$log" >&2
        return 0
    fi
    # `ID  time:   [low MID high]` (the ID on a line of its own when long); a later
    # `change: time: [...%]` line has no unit, so it does not match.
    us=$(awk '
        match($0, /time:[ \t]+\[[0-9.]+ [^ ]+ [0-9.]+ [^ ]+ [0-9.]+ [^ ]+\]/) {
            split(substr($0, RSTART, RLENGTH), f, /[][ \t]+/)
            # f: "time:" low unit MID unit high unit
            v = f[4]; u = f[5]
            if (u == "ps") v /= 1e6; else if (u == "ns") v /= 1e3;
            else if (u == "µs" || u == "us") v = v; else if (u == "ms") v *= 1e3;
            else if (u == "s") v *= 1e6; else next
            printf "%.3f\n", v; exit
        }' "$log")
    if [[ -z $us ]]; then
        echo "round $round: $side $filter printed no time line (is '$filter' a bench id? see --list); its output ends:" >&2
        tail -n 20 "$log" >&2
        return 0
    fi
    printf '%s %s %s\n' "$filter" "$side" "$us" >>"$RESULTS"
    printf 'round %d/%d  %-28s %-3s %12.3f µs\n' "$round" "$ROUNDS" "$filter" "$side" "$us" >&2
}

touch "$RESULTS"
for ((round = 1; round <= ROUNDS; round++)); do
    if ((round % 2)); then order=(old new); else order=(new old); fi
    for filter in "${FILTERS[@]}"; do
        for side in "${order[@]}"; do
            measure "$side" "$filter" "$round"
        done
    done
done

median() { # of the values of FILTER SIDE in $RESULTS; empty if none
    awk -v f="$1" -v s="$2" '$1 == f && $2 == s { print $3 }' "$RESULTS" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) printf "%.3f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
count() { awk -v f="$1" -v s="$2" '$1 == f && $2 == s { n++ } END { print n + 0 }' "$RESULTS"; }

echo
echo "old: $OLD_BIN"
echo "new: $NEW_BIN"
printf '%-28s %14s %14s %9s %7s\n' filter "old median µs" "new median µs" new/old rounds
for filter in "${FILTERS[@]}"; do
    old=$(median "$filter" old) new=$(median "$filter" new)
    n_old=$(count "$filter" old) n_new=$(count "$filter" new)
    ratio=-
    if [[ -n $old && -n $new ]]; then ratio=$(awk -v o="$old" -v n="$new" 'BEGIN { printf "%.3f", n / o }'); fi
    rounds=$n_old
    [[ $n_old == "$n_new" ]] || rounds="$n_old/$n_new"
    printf '%-28s %14s %14s %9s %7s\n' "$filter" "${old:--}" "${new:--}" "$ratio" "$rounds"
done
