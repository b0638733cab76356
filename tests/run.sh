#!/usr/bin/env bash
# The one test command (README, .ci/run): from nothing to lint + tests.
# Creates .venv when missing, installs the pinned `test` extra of pyproject.toml once per
# pyproject revision (a stamp file records it), then runs ruff and pytest. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${VENV:-.venv}"
python="${PYTHON:-python3}"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"

stamp="$venv/.stack-$(sha256sum pyproject.toml | cut -c1-16)"
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
