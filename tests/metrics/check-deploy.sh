#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# deploy/ checked with the real tools:
#   - the systemd unit, with `systemd-analyze verify` (offline: no running
#     systemd needed), on a copy whose ExecStart names the built kvtier;
#   - the Prometheus configuration and alert rules, with `promtool check
#     config` and `promtool check rules`, and the alerts' behaviour with
#     `promtool test rules` (kvtier-alerts-test.yml);
#   - the two-node example, run with --check (it picks free ports, starts
#     two `kvtier serve` nodes, checks them and stops them by PID).
# A check whose tool is missing is skipped; all missing: exit 77 (skip).
#
# Usage: check-deploy.sh UNIT DEPLOY_DIR ALERTS_TEST KVTIER
set -euo pipefail

unit=$1 deploy=$2 alerts_test=$3 kvtier=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-check-deploy.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ran=0

# quiet: the tools' output goes to the log only when they fail
quietly() {
  local out
  if ! out=$("$@" 2>&1); then
    printf '%s\n' "$out" >&2
    echo "FAILED: $*" >&2
    exit 1
  fi
  printf '%s\n' "$out"
}

if command -v systemd-analyze >/dev/null; then
  sed "s|^ExecStart=[^ ]*|ExecStart=$kvtier|" "$unit" > "$tmp/kvtier-serve.service"
  out=$(quietly systemd-analyze verify --man=no "$tmp/kvtier-serve.service")
  # warnings (an unknown key, a bad value) leave the exit status at 0
  if [ -n "$out" ]; then
    printf '%s\n' "$out" >&2
    echo "FAILED: systemd-analyze verify printed warnings" >&2
    exit 1
  fi
  echo "ok: systemd-analyze verify kvtier-serve.service"
  ran=$((ran + 1))
else
  echo "skip: systemd-analyze is not installed (Debian: systemd)"
fi

if command -v promtool >/dev/null; then
  cp "$deploy/prometheus.yml" "$deploy/kvtier-alerts.yml" "$tmp/"
  out=$(cd "$tmp" && quietly promtool check config prometheus.yml)
  if grep -qi warning <<<"$out"; then
    printf '%s\n' "$out" >&2
    echo "FAILED: promtool check config printed warnings" >&2
    exit 1
  fi
  echo "ok: promtool check config prometheus.yml"
  (cd "$tmp" && quietly promtool check rules kvtier-alerts.yml) >/dev/null
  echo "ok: promtool check rules kvtier-alerts.yml"
  cp "$alerts_test" "$tmp/kvtier-alerts-test.yml"
  (cd "$tmp" && quietly promtool test rules kvtier-alerts-test.yml) >/dev/null
  echo "ok: promtool test rules kvtier-alerts-test.yml"
  ran=$((ran + 1))
else
  echo "skip: promtool is not installed (Debian: prometheus)"
fi

if command -v python3 >/dev/null && command -v curl >/dev/null; then
  KVTIER=$kvtier quietly bash "$deploy/two-nodes.sh" --check
  ran=$((ran + 1))
else
  echo "skip: two-nodes.sh needs python3 and curl"
fi

[ "$ran" -gt 0 ] || exit 77
