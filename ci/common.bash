# Sourced by the CI scripts that build in a virtualenv of their own
# (ci/test_wheel.sh, ci/pip-mpi.sh).  Set PROG (the prefix of their lines)
# and TOP (the repository) first.
#   say MSG / die MSG      a line on stdout / an error on stderr and exit 1
#   lap WHAT               "WHAT (N s)" since the previous lap (or the start)
#   BASE                   the interpreter to make virtualenvs from:
#                          $DDSTORE_PYTHON, else the tree's .venv, else python3
say() { echo "$PROG: $*"; }
die() { echo "$PROG: error: $*" >&2; exit 1; }
T0=$(date +%s)
step_t=$T0
lap() { local now; now=$(date +%s); say "$1 ($((now - step_t)) s)"; step_t=$now; }

if [ -n "${DDSTORE_PYTHON:-}" ]; then BASE="$DDSTORE_PYTHON"
elif [ -x "$TOP/.venv/bin/python" ]; then BASE="$TOP/.venv/bin/python"
else BASE="$(command -v python3)" || die "no Python (set DDSTORE_PYTHON)"; fi
