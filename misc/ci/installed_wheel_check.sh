#!/usr/bin/env bash
# The package as users get it. Builds the sdist and the wheel (the wheel from
# the sdist, as `python -m build` does), installs the wheel into a fresh
# virtual environment and, from a folder outside the checkout (so `import nw`
# cannot come from it), runs:
#   nw-jobs --version, nw-jobs demo (the embedded store), nw-jobs db migrate
#   on a scratch PostgreSQL database, nw-jobs serve (its page and script), a
#   worker that runs one job on that database, and a type check of user code
#   against the installed package (py.typed: a wrong call is an error).
# Any failure ends the run with a line saying which step failed.
#
#   misc/ci/installed_wheel_check.sh            # PYTHON (default: python) needs `build` and `mypy`
#   NW_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/db misc/ci/installed_wheel_check.sh
#
# The scratch database is created beside the one NW_TEST_DATABASE_URL names
# (same server) and dropped on exit.
set -euo pipefail

src="$(cd "$(dirname "$0")/../.." && pwd)"
# The Python that builds and type-checks (it has `build` and `mypy`), resolved
# now: once the fresh environment is first on PATH, `python` is that one.
python="$(command -v "${PYTHON:-python}")" || { echo "no ${PYTHON:-python} on PATH" >&2; exit 1; }
work="$(mktemp -d /tmp/nw-installed-wheel.XXXXXX)"
server_pid=""
worker_pid=""
scratch_db=""
admin_url=""

step() { printf '\n== installed wheel: %s\n' "$*"; }
fail() {
  printf '\ninstalled-wheel check FAILED: %s\n' "$*" >&2
  exit 1
}
cleanup() {
  local rc=$?
  [ -n "$worker_pid" ] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  if [ -n "$scratch_db" ]; then
    psql -q "$admin_url" -c "DROP DATABASE IF EXISTS $scratch_db WITH (FORCE)" >/dev/null 2>&1 || true
  fi
  if [ "$rc" -eq 0 ]; then
    rm -rf "$work"
  else
    echo "installed-wheel check: logs and the environment kept in $work" >&2
  fi
}
trap cleanup EXIT

[ -n "${NW_TEST_DATABASE_URL:-}" ] || fail "NW_TEST_DATABASE_URL is not set (a PostgreSQL server for the scratch database)"

step "build the sdist and the wheel"
# From a copy of the files git would commit: an nw_jobs.egg-info left in the
# checkout by `pip install -e` keeps an old file list and could hide a file
# the package's configuration no longer ships.
mkdir -p "$work/src"
git -C "$src" ls-files -z --cached --others --exclude-standard |
  (cd "$src" && xargs -0 sh -c 'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' _) |
  tar -C "$src" --null -T - -cf - | tar -C "$work/src" -xf - || fail "copying the checkout"
"$python" -m build --outdir "$work/dist" "$work/src" >"$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log" >&2; fail "python -m build"; }
wheel="$(ls "$work"/dist/*.whl)"
sdist="$(ls "$work"/dist/*.tar.gz)"
echo "built $(basename "$sdist") and $(basename "$wheel")"
version="$(basename "$wheel" | cut -d- -f2)"

step "install the wheel into a fresh virtual environment"
"$python" -m venv "$work/venv"
venv="$work/venv"
"$venv/bin/python" -m pip install -q "${wheel}[postgres,web]" >"$work/pip.log" 2>&1 ||
  { tail -30 "$work/pip.log" >&2; fail "pip install the wheel"; }

run="$work/run"  # outside the checkout: nothing here is the source tree
mkdir -p "$run"
cd "$run"
export PATH="$venv/bin:$PATH"
unset PYTHONPATH NW_JOBS_DATABASE_URL NW_JOBS_PROJECT

where="$(python -c 'import nw; print(nw.__file__)')"
case "$where" in
  "$venv"/*) echo "import nw: $where" ;;
  *) fail "import nw came from $where, not from the installed wheel" ;;
esac

step "nw-jobs --version"
got="$(nw-jobs --version)"
echo "$got"
[ "$got" = "nw-jobs $version" ] || fail "nw-jobs --version said '$got', the wheel is $version"

step "nw-jobs demo (the embedded store)"
nw-jobs demo --project "$run/demo" --plain >"$work/demo.log" 2>&1 ||
  { tail -30 "$work/demo.log" >&2; fail "nw-jobs demo"; }
tail -3 "$work/demo.log"
grep -q "succeeded" "$work/demo.log" || fail "nw-jobs demo printed no succeeded job"

step "nw-jobs db migrate (a scratch PostgreSQL database)"
scratch="nw_wheel_check_$$"
admin_url="$NW_TEST_DATABASE_URL"
psql -q "$admin_url" -c "CREATE DATABASE $scratch" >/dev/null || fail "cannot create the scratch database"
scratch_db="$scratch"
db_url="${NW_TEST_DATABASE_URL%/*}/$scratch"
nw-jobs db migrate --database-url "$db_url" | tee "$work/migrate.log" || fail "nw-jobs db migrate"
grep -q "applied" "$work/migrate.log" || fail "nw-jobs db migrate applied nothing to an empty database"
nw-jobs db migrate --database-url "$db_url" | grep -q "up to date" ||
  fail "a second nw-jobs db migrate did not find the schema up to date"

step "nw-jobs serve: the page and its script"
port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
nw-jobs serve --project "$run/demo" --port "$port" >"$work/serve.log" 2>&1 &
server_pid=$!
fetch() { python - "$@" <<'PY'
import sys, time, urllib.request
url, deadline = sys.argv[1], time.monotonic() + 60
while True:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            sys.stdout.write(answer.read().decode())
            break
    except OSError:
        if time.monotonic() > deadline:
            raise SystemExit(f"no answer from {url} in 60 s")
        time.sleep(0.2)
PY
}
fetch "http://127.0.0.1:$port/" >"$work/page.html" || { cat "$work/serve.log" >&2; fail "GET /"; }
grep -q 'static/tray.js' "$work/page.html" || fail "the page does not load static/tray.js"
fetch "http://127.0.0.1:$port/static/tray.js" >"$work/tray.js" || fail "GET /static/tray.js"
cmp -s "$work/tray.js" "$venv"/lib/python*/site-packages/nw/jobs/web/static/tray.js ||
  fail "the served script is not the installed tray.js"
fetch "http://127.0.0.1:$port/static/tray.css" >/dev/null || fail "GET /static/tray.css"
fetch "http://127.0.0.1:$port/api/jobs?limit=5" >"$work/jobs.json" || fail "GET /api/jobs"
python -c 'import json, sys; jobs = json.load(open(sys.argv[1]))["jobs"]; assert jobs, "no jobs"' \
  "$work/jobs.json" || fail "GET /api/jobs listed none of the demo's jobs"
echo "page $(wc -c <"$work/page.html") bytes, tray.js $(wc -c <"$work/tray.js") bytes, /api/jobs answers"
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=""

step "a worker runs one job (PostgreSQL)"
cat >"$run/wheel_check_kinds.py" <<'PY'
from nw import jobs


def double(project, params):
    return {"doubled": params["n"] * 2}


jobs.register_kind("check.double", "wheel_check_kinds:double")
PY
export NW_JOBS_DATABASE_URL="$db_url"
nw-jobs init --project "$run/pgproject" || fail "nw-jobs init"
job="$(nw-jobs enqueue check.double --params '{"n": 21}' --import wheel_check_kinds \
  --project "$run/pgproject" --json | python -c 'import json, sys; print(json.load(sys.stdin)["job_id"])')" ||
  fail "nw-jobs enqueue"
echo "queued $job"
nw-jobs worker --project "$run/pgproject" --import wheel_check_kinds --log-level INFO \
  >"$work/worker.log" 2>&1 &
worker_pid=$!
nw-jobs watch "$job" --project "$run/pgproject" --timeout 120 >"$work/watch.log" 2>&1 ||
  { cat "$work/watch.log" "$work/worker.log" >&2; fail "the job did not succeed on the worker"; }
nw-jobs show "$job" --project "$run/pgproject" --json >"$work/job.json"
python -c 'import json, sys; job = json.load(open(sys.argv[1])); assert job["status"] == "succeeded" and job["result"] == {"doubled": 42}, job' \
  "$work/job.json" || fail "the job's result is not what its body returned"
echo "job $job succeeded: $(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["result"])' "$work/job.json")"
kill -TERM "$worker_pid"
wait "$worker_pid" || fail "the worker did not stop cleanly on SIGTERM"
worker_pid=""
unset NW_JOBS_DATABASE_URL

step "type-check user code against the installed package (py.typed)"
cat >"$run/user_ok.py" <<'PY'
import nw
from nw import jobs

project = nw.Project.init("films/ok")
job: jobs.Job = jobs.enqueue(project, "check.double", {"n": 1})
found: jobs.Job | None = jobs.get_job(project, job.job_id)
page: list[jobs.Job] = jobs.list_jobs(project, status="failed", limit=10)
print(nw.__version__, found, page)
PY
cat >"$run/user_wrong.py" <<'PY'
import nw
from nw import jobs

project = nw.Project.init("films/wrong")
jobs.enqueue(project, 42, {"n": 1})
jobs.list_jobs(project, limit="ten")
count: int = jobs.get_job(project, "abc")
PY
"$python" -m mypy --python-executable "$venv/bin/python" --no-incremental user_ok.py ||
  fail "mypy refused correct calls against the installed package"
if "$python" -m mypy --python-executable "$venv/bin/python" --no-incremental user_wrong.py \
  >"$work/mypy_wrong.log" 2>&1; then
  fail "mypy accepted wrong calls: the installed package reads as untyped"
fi
cat "$work/mypy_wrong.log"
for line in 5 6 7; do
  grep -q "user_wrong.py:$line: error" "$work/mypy_wrong.log" ||
    fail "mypy did not flag user_wrong.py line $line"
done

printf '\ninstalled-wheel check: all passed (%s)\n' "$(basename "$wheel")"
