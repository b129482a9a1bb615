#!/usr/bin/env bash
# Runs each program of recursion/ in an execution of its own in the probe guest, with
# `target/release/phases` (cargo build --release -p ptc-benches --bin phases), and prints what
# each ended with: the JS error it caught, or the trap that ended the instance.
# Usage: runtime-js-wasm/probe/recursion.sh [GUEST.wasm]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
wasm="${1:-$root/target/js-probe/js.wasm}"
phases="$root/target/release/phases"
for s in "$here"/recursion/*.js; do
    # phases prints stderr only for a failed run: the program reports on stderr, then fails.
    code="try { $(cat "$s") ; console.error('RESULT no error') } catch (e) { console.error('RESULT', e && e.name, e && e.message) }; throw 'END'"
    out=$(RUST_BACKTRACE=0 timeout 60 "$phases" --component "$wasm" --n 1 --warm 0 --code "$code" 2>&1 | tr '\n' ' ')
    case "$out" in
        *RESULT*) r=$(echo "$out" | sed 's/.*RESULT/RESULT/; s/ Uncaught END.*//') ;;
        *) r="TRAP/FAIL: $(echo "$out" | cut -c1-110)" ;;
    esac
    printf "%-28s %s\n" "$(basename "$s" .js)" "$r"
done
