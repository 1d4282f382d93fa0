# Sourced by scripts/test and scripts/demo: `ensure_venv EXTRAS` makes $VENV (Python 3.11+) and
# installs the project into it, editable, with EXTRAS (e.g. "dev"). The install runs only when
# the venv is new or pyproject.toml, the extras or the checkout changed since the last one (a
# stamp file in the venv records them); code changes need none, the install is editable.
ensure_venv() {
  local extras=$1
  local python=${PYTHON:-python3}
  if [ ! -x "$VENV/bin/python" ]; then
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
      || { echo "sql_lease needs Python 3.11+ (set PYTHON=python3.x)" >&2; exit 2; }
    "$python" -m venv "$VENV"
  fi
  local stamp="$VENV/.sql_lease-install-$extras"
  local want
  want="$("$VENV/bin/python" -c 'import hashlib, sys
print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest(), *sys.argv[1:])' \
    "$extras" "$PWD")"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$extras]"
  printf '%s\n' "$want" >"$stamp"
}
