# Sourced by examples/demo.sh and tests/run.sh: use the checkout's virtual
# environment (.venv, created on first use), unless one is active already.
# Nothing is installed into the system Python, which Debian 12 and Ubuntu 24.04
# refuse anyway (PEP 668: "externally-managed-environment").
if [ -z "${VIRTUAL_ENV:-}" ]; then
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
