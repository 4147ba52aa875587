#!/usr/bin/env bash
# Run the whole default test suite several times in a row while other processes keep every
# core busy: a test that leans on timing fails here long before it flakes in CI.
#
#   scripts/stress-test.sh                      # 5 runs, 2 busy processes
#   scripts/stress-test.sh -n 1 -b 1 -- packages/common -x
#   make stress STRESS_RUNS=10 STRESS_BUSY=4
#
# Each run's whole output goes to a log directory (a new temp dir unless -l is given). The busy
# processes are the script's own (`yes`), ended by pid when it exits, also on Ctrl-C or TERM
# (a TERM is passed on to the running pytest as a Ctrl-C, so that it stops its daemons).
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/stress-test.sh [-n RUNS] [-b BUSY] [-l LOG_DIR] [--no-install] [--] [PYTEST_ARGS...]

Runs `.venv/bin/python -m pytest PYTEST_ARGS` (the default suite, as `make test` does) RUNS
times in a row while BUSY processes spin on the CPU, and reports each run: number, PASS or
FAIL, pytest's summary line, duration. Exits 1 if any run failed.

  -n RUNS        how many runs (default 5)
  -b BUSY        how many busy processes (default 2; 0 for none)
  -l LOG_DIR     where to keep each run's output, run-N.log (default: a new temp dir)
  --no-install   do not run `make install` first
  -h, --help     this text
  --             the rest goes to pytest (so does anything not an option above)
EOF
}

runs=5
busy=2
STOP_GRACE=120  # seconds pytest gets to stop after a Ctrl-C before it is sent another
log_dir=""
install=1
pytest_args=()

while (($#)); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        -n) [[ $# -ge 2 ]] || { echo "stress: -n needs a value" >&2; exit 2; }; runs=$2; shift 2 ;;
        -b) [[ $# -ge 2 ]] || { echo "stress: -b needs a value" >&2; exit 2; }; busy=$2; shift 2 ;;
        -l) [[ $# -ge 2 ]] || { echo "stress: -l needs a value" >&2; exit 2; }; log_dir=$2; shift 2 ;;
        --no-install) install=0; shift ;;
        --) shift; pytest_args+=("$@"); break ;;
        *) pytest_args+=("$1"); shift ;;
    esac
done

if ! [[ $runs =~ ^[0-9]+$ ]] || ((runs < 1)); then
    echo "stress: -n wants a whole number of runs >= 1, not '$runs'" >&2
    exit 2
fi
if ! [[ $busy =~ ^[0-9]+$ ]]; then
    echo "stress: -b wants a whole number of busy processes >= 0, not '$busy'" >&2
    exit 2
fi

cd "$(dirname "$0")/.."

if [[ -z $log_dir ]]; then
    log_dir=$(mktemp -d "${TMPDIR:-/tmp}/nsq-stress.XXXXXX")
else
    mkdir -p "$log_dir"
fi

if ((install)); then
    make --no-print-directory install
fi

busy_pids=()
pytest_pid=""
stop_busy() {
    local pid
    for pid in "${busy_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${busy_pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    busy_pids=()
}
on_signal() {  # $1: INT or TERM, $2: the exit status
    stop_busy
    if [[ -n $pytest_pid ]]; then
        # A Ctrl-C reached pytest as well (one process group): it stops and tears down by
        # itself. A TERM sent to this script is passed on as the Ctrl-C it stands for.
        if [[ $1 == TERM ]]; then
            kill -INT "$pytest_pid" 2>/dev/null || true
            # Python drops a KeyboardInterrupt raised inside a finalizer (a ``__del__`` run by
            # the garbage collector), and pytest then goes on with the next test: if it still
            # runs after STOP_GRACE seconds (a teardown stopping daemons takes a few), the
            # Ctrl-C is sent again.
            local waited=0
            while kill -0 "$pytest_pid" 2>/dev/null; do
                sleep 1
                waited=$((waited + 1))
                if ((waited % STOP_GRACE == 0)); then
                    kill -INT "$pytest_pid" 2>/dev/null || true
                fi
            done
        fi
        wait "$pytest_pid" 2>/dev/null || true
    fi
    echo "stress: stopped by SIG$1; logs in $log_dir" >&2
    exit "$2"
}
trap stop_busy EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM

for ((i = 0; i < busy; i++)); do
    yes >/dev/null &
    busy_pids+=("$!")
done

echo "stress: $runs run(s) of pytest ${pytest_args[*]:-(default options)}" \
    "beside $busy busy process(es) on $(nproc 2>/dev/null || echo '?') core(s); logs in $log_dir"

failed=0
summary_file="$log_dir/summary.txt"
: >"$summary_file"
for ((run = 1; run <= runs; run++)); do
    log="$log_dir/run-$run.log"
    start=$SECONDS
    status=0
    # In the background so that a signal's trap runs at once. A background job of a script
    # starts with SIGINT ignored, and Python then never turns it into KeyboardInterrupt (nor
    # can `trap - INT` undo that), so pytest is started with Python's own SIGINT handler put
    # back: a Ctrl-C, or the TERM passed on as one, stops it cleanly, daemons and all.
    .venv/bin/python -c '
import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv[0] = "pytest"
runpy.run_module("pytest", run_name="__main__", alter_sys=True)
' "${pytest_args[@]}" >"$log" 2>&1 &
    pytest_pid=$!
    wait "$pytest_pid" || status=$?
    pytest_pid=""
    elapsed=$((SECONDS - start))
    # pytest's last line, e.g. "==== 3 failed, 548 passed in 61.20s (0:01:01) ====", bare
    summary=$(grep -E '^=+ .* in [0-9.]+s( \([0-9:]+\))? =+$' "$log" | tail -n 1 |
        sed -E 's/^=+ //; s/ =+$//' || true)
    [[ -n $summary ]] || summary="no summary line (pytest exit status $status)"
    if ((status == 0)); then
        result=PASS
    else
        result="FAIL (exit $status)"
        failed=$((failed + 1))
    fi
    line="run $run/$runs: $result  $summary  (${elapsed}s)  $log"
    echo "$line"
    echo "$line" >>"$summary_file"
done

stop_busy
line="stress: $((runs - failed))/$runs run(s) passed, $failed failed, with $busy busy process(es); logs in $log_dir"
echo "$line"
echo "$line" >>"$summary_file"
((failed == 0))
