#!/usr/bin/env bash
# A plan longer than one device call (at most 10 minutes) on the lent GPU
# machine: engines started once serve every cell of the plan, where a call
# per step would start them again each time (an 8B engine: 100 to 150 s).
#   bash scripts/gpu-background.sh start PLAN [ARG...]
#       runs `bash PLAN ARG...` in a process session of its own, which the
#       machine keeps running after the call returns (device README: only such
#       processes outlive their call) until the machine goes back; PLAN
#       writes what it keeps under $PLAN_OUT ($GPU_PLAN_ROOT/out, the root
#       /tmp/gpu-plan unless named).
#   bash scripts/gpu-background.sh wait SECONDS
#       waits until the plan ends or SECONDS pass, packs $PLAN_OUT into
#       $OUT/plan.tgz (one file back, whatever the plan wrote) and prints the
#       end of the plan's output.
# Chain the calls (`start`, then `wait 540` again and again): the machine goes
# back 30 s after a call ends, and the plan with it. Every `wait` brings back
# all the plan has written so far, so a machine taken back loses only the
# step in flight.
set -uo pipefail
root=${GPU_PLAN_ROOT:-/tmp/gpu-plan}
export PLAN_OUT=$root/out
case ${1:-} in
  start)
    shift
    [ $# -ge 1 ] || { echo "usage: $0 start PLAN [ARG...]" >&2; exit 2; }
    if [ -f "$root/pid" ] && [ ! -f "$root/exit-status" ] && kill -0 "$(cat "$root/pid")" 2>/dev/null; then
      echo "a plan is still running (pid $(cat "$root/pid")): wait for it" >&2; exit 4
    fi
    mkdir -p "$PLAN_OUT"
    rm -f "$root/exit-status"
    : > "$root/log"
    # The call's $OUT is emptied before the next call: the plan writes under
    # $PLAN_OUT instead.
    setsid bash -c 'bash "$@" >> "'"$root"'/log" 2>&1; echo $? > "'"$root"'/exit-status"' \
      plan "$@" < /dev/null > /dev/null 2>&1 &
    echo $! > "$root/pid"
    echo "plan started (pid $!): $*" ;;
  wait)
    limit=${2:?usage: $0 wait SECONDS}
    [ -f "$root/log" ] || { echo "no plan was started on this machine" >&2; exit 3; }
    started=$SECONDS
    while [ ! -f "$root/exit-status" ] && [ $((SECONDS - started)) -lt "$limit" ]; do
      sleep 5
    done
    # -h: what the plan links from $PLAN_OUT (a step's files while it runs) too.
    tar -czhf "${OUT:-.}/plan.tgz" -C "$PLAN_OUT" . 2>/dev/null
    tail -n "${TAIL:-40}" "$root/log"
    if [ -f "$root/exit-status" ]; then
      echo "=== plan ended, exit status $(cat "$root/exit-status")"
    else
      echo "=== plan still running after $limit s"
    fi ;;
  *) echo "usage: $0 start PLAN [ARG...] | wait SECONDS" >&2; exit 2 ;;
esac
