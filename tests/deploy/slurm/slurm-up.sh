#!/bin/bash
# usage: slurm-up.sh DIR   -> one-node Slurm with 4 stand-in GPUs under DIR
# Copied verbatim from the project reference "Running a one-node Slurm with stand-in GPUs for tests"
# (shared/reference/slurm-local.md, sections 2 and 3), where it was run on this machine as written.
set -euo pipefail
D=$1; CTLD_PORT=${CTLD_PORT:-6817}; SLURMD_PORT=${SLURMD_PORT:-6818}
mkdir -p "$D"/{munge,etc,state,spool,log,dev,out}
chmod 755 "$D" "$D/munge"                       # munged: socket dir path must be o+x
mungekey --create --keyfile="$D/munge/munge.key"  # 0600 root:root
for i in 0 1 2 3; do mknod -m 666 "$D/dev/gpu$i" c 195 "$i"; done   # must be char/block devices

cat > "$D/etc/slurm.conf" <<EOF
ClusterName=testcluster
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.socket
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/log/slurmctld.pid
SlurmdPidFile=$D/log/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MailProg=/bin/true
Prolog=$D/etc/prolog.sh
Epilog=$D/etc/epilog.sh
PrologFlags=Alloc
NodeName=localhost CPUs=2 Gres=gpu:4 State=UNKNOWN
PartitionName=gpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
cat > "$D/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=localhost Name=gpu File=$D/dev/gpu[0-3]
EOF
for s in prolog epilog; do
cat > "$D/etc/$s.sh" <<EOF
#!/bin/sh
env | sort > "$D/out/$s.\$SLURM_JOB_ID.env"
date +%s.%N > "$D/out/$s.\$SLURM_JOB_ID.time"
exit 0
EOF
chmod 755 "$D/etc/$s.sh"; done

export SLURM_CONF=$D/etc/slurm.conf
cd "$D"
munged --foreground --socket="$D/munge/munge.socket" --key-file="$D/munge/munge.key" \
  --log-file="$D/munge/munged.log" --pid-file="$D/munge/munged.pid" \
  --seed-file="$D/munge/munged.seed" > "$D/log/munged.out" 2>&1 &
echo $! > "$D/log/munged.bgpid"
for i in $(seq 50); do [ -S "$D/munge/munge.socket" ] && break; sleep 0.1; done
slurmctld -D -c > "$D/log/slurmctld.out" 2>&1 &
echo $! > "$D/log/slurmctld.bgpid"
for i in $(seq 100); do scontrol ping 2>/dev/null | grep -q ' UP' && break; sleep 0.1; done
slurmd -D -N localhost > "$D/log/slurmd.out" 2>&1 &
echo $! > "$D/log/slurmd.bgpid"
for i in $(seq 300); do [ "$(sinfo -h -n localhost -o %T 2>/dev/null)" = idle ] && exit 0; sleep 0.1; done
echo "slurm did not come up; see $D/log" >&2; exit 1
