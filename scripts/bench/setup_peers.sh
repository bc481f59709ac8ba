#!/usr/bin/env bash
# Create the benchmark virtualenv holding the peer job runners (pgqueuer, procrastinate).
#
#   scripts/bench/setup_peers.sh                 # -> <repo>/.venv-bench
#   BENCH_VENV=/tmp/venv-bench scripts/bench/setup_peers.sh
#   PYTHON=python3.11 scripts/bench/setup_peers.sh
#
# The peers live only in this virtualenv: they are not dependencies of the runner package.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${BENCH_VENV:-$repo/.venv-bench}"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating virtualenv $venv"
    "$python" -m venv "$venv"
fi
# Keep the virtualenv out of git wherever it is placed.
printf '*\n' > "$venv/.gitignore"

"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r "$here/requirements-peers.txt"

"$venv/bin/python" - <<'PY'
from importlib.metadata import version
import sys
print("python", sys.version.split()[0])
for name in ("pgqueuer", "procrastinate", "psycopg"):
    print(name, version(name))
PY
echo "ok: run the benchmarks with $venv/bin/python scripts/bench/peers_throughput.py"
