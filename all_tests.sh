#!/usr/bin/env bash
# The one test command: sets up .venv (see scripts/setup_venv.sh), then runs the default suite
# and the slow suite. Extra arguments go to both pytest runs, e.g. ./all_tests.sh -x -k vtrace
set -euo pipefail
cd "$(dirname "$0")"

VENV="${SFX_VENV:-.venv}"
PY="$VENV/bin/python"
t_start=$SECONDS
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

scripts/setup_venv.sh
t_setup=$((SECONDS - t_start))

# count NAME LOG: the number before "NAME" in pytest's closing line ("3 failed, 10 passed in 2.1s")
count() {
    local line
    line="$(grep -E '(passed|failed|error|skipped|deselected|no tests ran).* in [0-9.]+s' "$2" | tail -n 1 || true)"
    echo "$line" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' | head -n 1 || echo 0
}

# suite NAME MARKER [pytest args]: runs pytest, output both shown and kept; sets rc_NAME, t_NAME
suite() {
    local name="$1" marker="$2" t0=$SECONDS rc=0
    shift 2
    echo "== $name suite (-m '$marker') =="
    "$PY" -m pytest -p no:cacheprovider --durations=15 -m "$marker" "$@" 2>&1 | tee "$logs/$name.log" || rc=${PIPESTATUS[0]}
    printf -v "rc_$name" '%d' "$rc"
    printf -v "t_$name" '%d' "$((SECONDS - t0))"
}

suite default "not slow" "$@"

# The runner's Slurm tests (slow) run against a real single-node Slurm cluster on this machine,
# which scripts/local_slurm/start.sh installs (once) and starts when we are root on Debian/Ubuntu.
# There SFX_REQUIRE_SLURM=1 makes those tests fail, not skip, if the cluster does not work;
# elsewhere they skip. SFX_SLURM=0 leaves the cluster alone. scripts/local_slurm/stop.sh stops it.
start_local_slurm() {
    local t0=$SECONDS
    if [ "${SFX_SLURM:-1}" = 0 ]; then
        slurm_note="not started (SFX_SLURM=0): Slurm tests skip"
    elif [ "$(id -u)" -ne 0 ] || [ ! -f /etc/debian_version ]; then
        slurm_note="not started (needs root on Debian/Ubuntu): Slurm tests skip"
    else
        echo "== local Slurm cluster (scripts/local_slurm/start.sh) =="
        if scripts/local_slurm/start.sh; then
            slurm_note="up"
        else
            slurm_note="start.sh FAILED: Slurm tests fail"
        fi
        export SFX_REQUIRE_SLURM=1
    fi
    t_slurm=$((SECONDS - t0))
}

t_slow=0
t_slurm=0
slurm_note="not started (default suite failed)"
slow_note="skipped (default suite failed)"
rc_slow=0
if [ "$rc_default" -eq 0 ]; then
    start_local_slurm
    scripts/install_chromium.sh  # the docs site's browser test (slow); it skips, saying why, without chromium
    # SFX_EXTENDED=1: the slow suite with its extended tests too (pytest.ini's "extended" marker)
    if [ "${SFX_EXTENDED:-0}" = 1 ]; then slow_marker="slow"; else slow_marker="slow and not extended"; fi
    suite slow "$slow_marker" "$@"
    slow_note="exit $rc_slow"
    if [ "$rc_slow" -eq 5 ]; then
        # pytest's "no tests collected": having no slow test (or a -k that selects none) is fine
        slow_note="no slow tests selected"
        rc_slow=0
    fi
fi

passed=0 failed=0 skipped=0
for log in "$logs"/*.log; do
    passed=$((passed + $(count passed "$log")))
    failed=$((failed + $(count failed "$log") + $(count error "$log")))
    skipped=$((skipped + $(count skipped "$log")))
done

echo "== timing =="
printf '  setup          %5ds\n' "$t_setup"
printf '  default suite  %5ds  (exit %d)\n' "$t_default" "$rc_default"
printf '  local slurm    %5ds  (%s)\n' "$t_slurm" "$slurm_note"
printf '  slow suite     %5ds  (%s)\n' "$t_slow" "$slow_note"
printf '  total          %5ds\n' "$((SECONDS - t_start))"
# both suites in one closing line (the slow suite's own may say only "N deselected")
echo "total: $passed passed, $failed failed, $skipped skipped"

if [ "$rc_default" -ne 0 ]; then
    exit "$rc_default"
fi
exit "$rc_slow"
