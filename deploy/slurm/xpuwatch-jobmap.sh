#!/bin/sh
# xpuwatch Slurm prolog and epilog: record which job holds which accelerator of this node, for the exporter's
# job_mapping (docs/bare-metal.md "Slurm"). One script for both; in slurm.conf of every GPU/NPU node:
#
#   Prolog=/etc/slurm/xpuwatch-jobmap.sh
#   Epilog=/etc/slurm/xpuwatch-jobmap.sh
#   PrologFlags=Alloc        # the prolog runs at allocation, before the job's first step
#
# (or copy it into the prolog.d/ and epilog.d/ folders a site's Prolog=/Epilog= globs already run). slurmd runs
# it as root with SLURM_SCRIPT_CONTEXT=prolog_slurmd / epilog_slurmd (or give "prolog" / "epilog" as its
# first argument) and the job's SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_PARTITION and device variables.
#
# It writes MAP_DIR in dcgm-exporter's --hpc-job-mapping-dir format (one file per device index, one job id per
# line), so dcgm-exporter can read the same folder, plus jobs/<id> with the job's user and partition:
#   prolog: adds the job id to the file of each device in the first of SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES,
#           ROCR_VISIBLE_DEVICES, ASCEND_VISIBLE_DEVICES that is set (indices; anything else is logged and
#           skipped); writes jobs/<id>;
#   epilog: removes the job id from every device file that lists it (whatever the variables say) and deletes
#           files left empty and jobs/<id>.
# Every change is made under one lock (flock on MAP_DIR/.lock) and lands by rename, so the exporter never
# reads half a file, and two jobs sharing a card (shards, MPS, oversubscription) never lose each other's line:
# an epilog removes its own job only, never a file another job is in.
#
# It never fails: a Prolog that exits non-zero drains the node, so every problem is logged (syslog, tag
# xpuwatch-jobmap, and stderr, which slurmd logs at debug level) and it exits 0. slurmd gives prolog and
# epilog no PATH, hence the one below.

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022

MAP_DIR=${XPUWATCH_JOB_MAPPING_DIR:-/run/xpuwatch/jobs}   # the exporter's job_mapping.dir
LOCK_WAIT=10                                              # seconds to wait for another prolog/epilog
DEVICE_VARS="SLURM_JOB_GPUS CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES ASCEND_VISIBLE_DEVICES"
# A site's overrides of the three settings above, if any (a root-owned file).
[ -r /etc/xpuwatch/slurm-jobmap.conf ] && . /etc/xpuwatch/slurm-jobmap.conf

say() {
	logger -t xpuwatch-jobmap -p daemon.warning -- "$*" 2>/dev/null
	echo "xpuwatch-jobmap: $*" >&2
}

case "${1:-${SLURM_SCRIPT_CONTEXT:-}}" in
prolog | prolog_slurmd) mode=add ;;
epilog | epilog_slurmd) mode=remove ;;
*)
	say "neither prolog nor epilog (SLURM_SCRIPT_CONTEXT=${SLURM_SCRIPT_CONTEXT:-unset}, argument ${1:-none}); nothing done"
	exit 0
	;;
esac

job=${SLURM_JOB_ID:-}
case $job in
'' | *[!0-9A-Za-z_.:+-]*)
	say "job id '${job}' is not one; nothing recorded"
	exit 0
	;;
esac

# One printable word of at most 128 characters, as the exporter takes it for a label value.
word() {
	printf '%s' "$1" | tr -cd '[:graph:]' | cut -c1-128
}

devices=
for var in $DEVICE_VARS; do
	eval "val=\${$var:-}"
	if [ -n "$val" ]; then
		devices=$val
		break
	fi
done

if ! mkdir -p "$MAP_DIR/jobs" 2>/dev/null; then
	say "cannot create $MAP_DIR/jobs; job $job not recorded"
	exit 0
fi
chmod 755 "$MAP_DIR" "$MAP_DIR/jobs" 2>/dev/null

# Serialise every prolog and epilog of this node on one lock; past LOCK_WAIT go on (each write is still a
# rename, so the exporter never reads a torn file; only a concurrent update of the same file could be lost).
# ("command exec": a failed redirection of a plain exec would end the script, and fail the prolog)
if { command exec 9>>"$MAP_DIR/.lock"; } 2>/dev/null; then
	flock -w "$LOCK_WAIT" 9 || say "lock $MAP_DIR/.lock not taken in ${LOCK_WAIT}s; job $job going on without it"
else
	say "cannot open $MAP_DIR/.lock; job $job going on without the lock"
fi

# replace FILE: move FILE.tmp.$$ over FILE, or remove both when it is empty
replace() {
	if [ -s "$1.tmp.$$" ]; then
		mv -f "$1.tmp.$$" "$1" || say "cannot write $1"
	else
		rm -f "$1.tmp.$$" "$1"
	fi
}

if [ "$mode" = add ]; then
	[ -n "$devices" ] || exit 0 # a job without accelerators: nothing to record
	recorded=
	for dev in $(printf '%s' "$devices" | tr ',' ' '); do
		case $dev in
		'' | *[!0-9]*)
			say "job $job: device '$dev' is not an index; not recorded"
			continue
			;;
		esac
		f="$MAP_DIR/$dev"
		{
			[ -f "$f" ] && grep -vxF -- "$job" "$f"
			echo "$job"
		} >"$f.tmp.$$" 2>/dev/null
		replace "$f"
		recorded=1
	done
	if [ -n "$recorded" ]; then
		{
			echo "user=$(word "${SLURM_JOB_USER:-}")"
			echo "partition=$(word "${SLURM_JOB_PARTITION:-}")"
		} >"$MAP_DIR/jobs/$job.tmp.$$"
		mv -f "$MAP_DIR/jobs/$job.tmp.$$" "$MAP_DIR/jobs/$job" || say "cannot write $MAP_DIR/jobs/$job"
	fi
else
	for f in "$MAP_DIR"/*; do
		case ${f##*/} in
		*[!0-9.]* | .* | '*') continue ;; # only device files (N or N.M)
		esac
		[ -f "$f" ] && grep -qxF -- "$job" "$f" || continue
		grep -vxF -- "$job" "$f" >"$f.tmp.$$"
		replace "$f"
	done
	rm -f "$MAP_DIR/jobs/$job"
fi
exit 0
