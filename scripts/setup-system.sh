#!/usr/bin/env bash
# Installs the system tools the tests and notebooks use, from Debian's apt, when root and missing.
# Prints what it did; never fails the build just because a tool is absent without root.
set -u
need=()
command -v eu-stack >/dev/null 2>&1 || need+=(elfutils)
command -v perf >/dev/null 2>&1 || need+=(linux-perf)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v stap >/dev/null 2>&1 || need+=(systemtap)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v gcore >/dev/null 2>&1 || need+=(gdb)
command -v g++ >/dev/null 2>&1 || need+=(g++)
# --memory's sampled tracker is a C extension built at first use: it needs the kernel's Python headers.
py=.venv/bin/python; [ -x "$py" ] || py=python3
"$py" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  2>/dev/null || need+=(python3-dev)
command -v perl >/dev/null 2>&1 || need+=(perl)
command -v node >/dev/null 2>&1 || need+=(nodejs)   # speedscope's app, for tests/test_speedscope_app.py
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -eq 0 ]; then
  echo "system tools: all present"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "system tools missing (${need[*]}); not root, so not installing. Tests that need them will say so." >&2
  exit 0
fi
echo "installing from apt: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/tmp/profmagic-apt.log 2>&1 || {
  echo "apt-get install failed; see /tmp/profmagic-apt.log" >&2; tail -20 /tmp/profmagic-apt.log >&2; exit 1; }
