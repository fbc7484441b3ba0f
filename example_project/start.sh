#!/usr/bin/env bash
# Try scheduler_app on this machine: bash example_project/start.sh
#
# Sets up .venv at the repository root (with $PYTHON, default python3; needs
# Python 3.11+), migrates the demo database, creates the superuser admin/admin,
# schedules demo jobs, then runs the web server and a worker together.
# Ctrl-C stops both. Environment: PYTHON, PORT (default 8000), DATABASE_URL.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
PORT="${PORT:-8000}"
VENV=.venv
PY="$VENV/bin/python"

say() { printf '\n==> %s\n' "$*"; }

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "start.sh needs Python 3.11 or newer; '$PYTHON' is not. Set PYTHON=/path/to/python3.11." >&2
    exit 1
fi
if [ ! -x "$PY" ]; then
    say "Creating $VENV with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$VENV"
fi

say "Installing scheduler_app and the example project into $VENV"
"$PY" -m pip install --quiet --disable-pip-version-check -e .

say "Migrating the demo database"
"$PY" manage.py migrate --noinput

say "Creating the demo superuser admin / admin"
if ! output=$(DJANGO_SUPERUSER_PASSWORD=admin "$PY" manage.py createsuperuser --noinput \
    --username admin --email admin@example.com 2>&1); then
    case "$output" in
        *"already taken"*) echo "User admin already exists; keeping it." ;;
        *) echo "$output" >&2; exit 1 ;;
    esac
else
    echo "$output"
fi

say "Scheduling demo jobs"
"$PY" manage.py seed_demo

web=""
worker=""
stopping=0

stop_both() {
    # First Ctrl-C: one SIGTERM each, so the worker finishes its running jobs
    # (up to SCHEDULER_APP['SHUTDOWN_TIMEOUT']). A second Ctrl-C sends SIGINT,
    # the worker's second signal, which makes it exit at once.
    stopping=$((stopping + 1))
    if [ "$stopping" -eq 1 ]; then
        say "Stopping the web server and the worker (Ctrl-C again to force)"
        signal=TERM
    else
        signal=INT
    fi
    for pid in $web $worker; do
        kill -s "$signal" "$pid" 2>/dev/null || true
    done
}
trap stop_both INT TERM

# Each child in its own process group (set -m), so a Ctrl-C reaches only this
# script, which then signals each child exactly once.
set -m
say "Starting the web server on 127.0.0.1:$PORT and a worker"
"$PY" manage.py runserver "127.0.0.1:$PORT" --noreload &
web=$!
"$PY" manage.py runworker &
worker=$!
set +m

"$PY" - "$PORT" <<'EOF' || true
import sys, time, urllib.request

url = "http://127.0.0.1:%s/admin/login/" % sys.argv[1]
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen(url, timeout=2)
        break
    except OSError:
        time.sleep(0.3)
EOF
if [ "$stopping" -eq 0 ] && kill -0 "$web" 2>/dev/null; then
    cat <<EOF

  ----------------------------------------------------------------
   scheduler_app demo is running
     Admin:  http://127.0.0.1:$PORT/admin/
     Login:  admin / admin
     Emails are printed here by the worker (console email backend).
     Ctrl-C stops the web server and the worker.
  ----------------------------------------------------------------

EOF
fi

# Run until Ctrl-C or until either process exits; then stop the other one.
while [ "$stopping" -eq 0 ] && kill -0 "$web" 2>/dev/null && kill -0 "$worker" 2>/dev/null; do
    sleep 1
done
if [ "$stopping" -eq 0 ]; then
    kill -0 "$web" 2>/dev/null || echo "The web server exited; stopping the worker." >&2
    kill -0 "$worker" 2>/dev/null || echo "The worker exited; stopping the web server." >&2
    stopping=1
    for pid in $web $worker; do
        kill -s TERM "$pid" 2>/dev/null || true
    done
    failed=1
else
    failed=0
fi
# wait returns early when a trapped signal arrives; loop until both are gone.
for pid in $web $worker; do
    while kill -0 "$pid" 2>/dev/null; do
        wait "$pid" 2>/dev/null || true
    done
done
exit "$failed"
