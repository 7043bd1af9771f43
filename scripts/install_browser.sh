#!/usr/bin/env bash
# The console's browser tests (tests/console/) drive Debian's chromium through Playwright.
# Install it with apt-get when it is missing and we are root (CI); otherwise say how.
set -u
for b in chromium chromium-browser; do
  if command -v "$b" >/dev/null 2>&1; then
    echo "browser ok: $("$b" --version 2>/dev/null | head -n 1)"
    exit 0
  fi
done
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "cqlstream: installing Debian's chromium for the console's browser tests (apt-get) ..."
  export DEBIAN_FRONTEND=noninteractive
  if apt-get update -q && apt-get install -y -q --no-install-recommends chromium; then
    echo "browser ok: $(chromium --version 2>/dev/null | head -n 1)"
    exit 0
  fi
  echo "cqlstream: apt-get could not install chromium" >&2
fi
cat >&2 <<'MSG'
cqlstream: no chromium found (needed only by the console's browser tests, tests/console/).
  Debian/Ubuntu:  sudo apt-get install -y chromium
  or set CQLSTREAM_CHROMIUM to a Chromium/Chrome executable.
Those tests are skipped, with this reason, while no browser is found.
MSG
exit 1
