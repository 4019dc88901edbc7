#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine and runs it: Debian's prometheus (promtool),
# prometheus-alertmanager (amtool), prometheus-node-exporter (benchmark comparison), configurable-http-proxy
# (JupyterHub's proxy), kubectl, chromium (renders the baseline report), victoria-metrics (single node,
# vmalert, vmagent: the multi-cluster test), slurmctld/slurmd/slurm-client/munge (a real Slurm for job
# attribution); the package with its dev extras in .venv; then ruff, mypy and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_need=()
command -v promtool >/dev/null || apt_need+=(prometheus)
command -v amtool >/dev/null || apt_need+=(prometheus-alertmanager)
command -v prometheus-node-exporter >/dev/null || apt_need+=(prometheus-node-exporter)
command -v configurable-http-proxy >/dev/null || apt_need+=(node-configurable-http-proxy)
command -v kubectl >/dev/null || apt_need+=(kubernetes-client)
command -v chromium >/dev/null || apt_need+=(chromium)
command -v vmalert >/dev/null || apt_need+=(victoria-metrics)
# a one-node Slurm for the job attribution test (tests/deploy/test_slurm_live.py): ~12 s, 8 MB
[ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/munged ] || apt_need+=(slurmctld slurmd slurm-client munge)
if [ ${#apt_need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_need[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>/dev/null || true
.venv/bin/python -m pip install -q -e '.[dev]'
export PATH="$PWD/.venv/bin:$PATH"

ruff check .
ruff format --check . || { echo "ruff format would change files: run 'ruff format .'"; exit 1; }
mypy
# Two workers, each test file whole on one worker (--dist loadfile: a module's Prometheus or Alertmanager
# fixture starts once): 573 s of pytest on 2 cores against 1,022 s serial, the same tests. Pass
# `-n 0` for a serial run; later options win.
exec pytest -q -p no:cacheprovider -n 2 --dist loadfile "$@"
