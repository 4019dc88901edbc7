#!/bin/bash
# usage: slurm-down.sh DIR  -> cancel jobs, stop slurmd, slurmctld, munged (that order), by PID
# Copied verbatim from the project reference "Running a one-node Slurm with stand-in GPUs for tests"
# (shared/reference/slurm-local.md, sections 2 and 3), where it was run on this machine as written.
D=$1; export SLURM_CONF=$D/etc/slurm.conf
if [ -f "$D/log/slurmctld.bgpid" ]; then
  jobs=$(squeue -h -o %i 2>/dev/null); [ -n "$jobs" ] && scancel --full $jobs   # every user's jobs
  for i in $(seq 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
fi
for n in slurmd slurmctld munged; do
  f="$D/log/$n.bgpid"; [ -f "$f" ] || continue; p=$(cat "$f")
  if kill -TERM "$p" 2>/dev/null; then
    for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -KILL "$p"
  fi
  rm -f "$f"
done
# safety net: a slurmstepd of a job still running outlives slurmd and ignores SIGTERM; so do the job's processes
for e in /proc/[0-9]*/environ; do
  p=${e#/proc/}; p=${p%/environ}; [ "$p" = $$ ] && continue
  env_p=$( { tr '\0' '\n' < "$e"; } 2>/dev/null ) || continue
  grep -qx "SLURM_CONF=$D/etc/slurm.conf" <<<"$env_p" || continue
  if [ "$(cat /proc/$p/comm 2>/dev/null)" = slurmstepd ] || grep -q '^SLURM_JOB_ID=' <<<"$env_p"; then
    kill -KILL "$p" 2>/dev/null
  fi
done
exit 0
