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
export PORT="${PORT:-8000}"  # the settings build the links in mails and alerts from it
VENV=.venv
PY="$VENV/bin/python"

say() { printf '\n==> %s\n' "$*"; }

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "start.sh needs Python 3.11 or newer; '$PYTHON' is not. Set PYTHON=/path/to/python3.11." >&2
    exit 1
fi
# Before anything else: a port another program holds would make runserver fail after the
# demo was announced at an address that program serves. SO_REUSEADDR, as runserver binds.
if ! "$PYTHON" - "$PORT" 2>/dev/null <<'PY'
import socket, sys
probe = socket.socket()
probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    probe.bind(("127.0.0.1", int(sys.argv[1])))
except (OSError, ValueError):
    sys.exit(1)
PY
then
    echo "Port $PORT on 127.0.0.1 is in use (is the demo already running?)." \
        "Pick another: PORT=8001 bash example_project/start.sh" >&2
    exit 1
fi
if [ ! -x "$PY" ]; then
    say "Creating $VENV with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$VENV"
fi

say "Installing scheduler_app and the example project into $VENV"
"$PY" -m pip install --quiet --disable-pip-version-check -e '.[metrics]'

say "Migrating the demo database"
"$PY" manage.py migrate --noinput

say "Creating the demo superuser admin / admin"
if ! output=$(env DJANGO_SUPERUSER_PASSWORD=admin "$PY" manage.py createsuperuser --noinput \
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
waiter=""
stopping=0
finished=0

signal_children() {
    for pid in $web $worker; do
        kill -s "$1" "$pid" 2>/dev/null || true
    done
}

stop_both() {
    # First Ctrl-C: one SIGTERM each, so the worker finishes its running jobs
    # (up to SCHEDULER_APP['SHUTDOWN_TIMEOUT']). A second Ctrl-C sends SIGINT,
    # the worker's second signal, which makes it exit at once.
    stopping=$((stopping + 1))
    if [ "$stopping" -eq 1 ]; then
        say "Stopping the web server and the worker (Ctrl-C again to force)"
        signal_children TERM
    else
        signal_children INT
    fi
}
trap stop_both INT TERM
# Whatever ends this script, don't leave the two running.
trap '[ "$finished" -eq 1 ] || signal_children TERM' EXIT

# Run a command in the background and wait for it. The wait builtin returns
# as soon as a trapped signal arrives, whereas a foreground child killed by
# Ctrl-C would make bash exit right after running the trap.
in_background() {
    local status=0
    "$@" &
    waiter=$!
    wait "$waiter" || status=$?
    kill "$waiter" 2>/dev/null || true
    waiter=""
    return "$status"
}

web_is_up() {
    "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "http://127.0.0.1:$PORT/admin/login/" 2>/dev/null
}

# Each child in its own process group (set -m), so a Ctrl-C reaches only this
# script, which then signals each child exactly once.
set -m
say "Starting the web server on 127.0.0.1:$PORT and a worker"
"$PY" manage.py runserver "127.0.0.1:$PORT" --noreload &
web=$!
"$PY" manage.py runworker &
worker=$!
set +m

for _ in $(seq 60); do
    if [ "$stopping" -ne 0 ] || ! kill -0 "$web" 2>/dev/null; then
        break
    fi
    if in_background web_is_up; then
        cat <<EOF

  ----------------------------------------------------------------
   scheduler_app demo is running
     Admin:  http://127.0.0.1:$PORT/admin/
     Login:  admin / admin
     Emails are printed here by the worker (console email backend).
     Ctrl-C stops the web server and the worker.
  ----------------------------------------------------------------

EOF
        break
    fi
    in_background sleep 0.5 || true
done

# Run until Ctrl-C or until either process exits; then stop the other one.
while [ "$stopping" -eq 0 ] && kill -0 "$web" 2>/dev/null && kill -0 "$worker" 2>/dev/null; do
    in_background sleep 1 || true
done
status=0
if [ "$stopping" -eq 0 ]; then
    kill -0 "$web" 2>/dev/null || echo "The web server exited; stopping the worker." >&2
    kill -0 "$worker" 2>/dev/null || echo "The worker exited; stopping the web server." >&2
    stopping=1
    signal_children TERM
    status=1
fi
# wait returns early when a trapped signal arrives; loop until both are gone.
for pid in $web $worker; do
    while kill -0 "$pid" 2>/dev/null; do
        wait "$pid" 2>/dev/null || true
    done
done
finished=1
exit "$status"
