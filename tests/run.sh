#!/usr/bin/env bash
# The one test command (README, .ci/run): from nothing to lint + tests.
# Creates .venv when missing, installs the pinned `test` extra of pyproject.toml once per
# pyproject revision (a stamp file records it), then runs ruff and pytest. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${VENV:-.venv}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  # The pinned stack (trl 1.16.0) needs Python 3.11+; the scripts themselves run on 3.9+.
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "tests/run.sh: needs Python 3.11+ for the pinned test stack; set PYTHON=python3.11" >&2
    exit 2
  }
  "$python" -m venv "$venv"
fi

stamp="$venv/.stack-$("$venv/bin/python" -c \
  'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest()[:16])')"
if [ ! -f "$stamp" ]; then
  reqs="$venv/test-requirements.txt"
  "$venv/bin/python" - > "$reqs" <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["test"]))
PY
  # torch alone first, so that no other package can pull a CUDA build of it.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$(grep '^torch==' "$reqs")"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs"
  rm -f "$venv"/.stack-*
  touch "$stamp"
fi

"$venv/bin/ruff" check scripts tests
"$venv/bin/ruff" format --check scripts tests
"$venv/bin/python" -m pytest "$@"
