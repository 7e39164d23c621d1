#!/usr/bin/env bash
# slurm_cluster.sh NIBBLE: `nibble batch --slurm` on a real Slurm cluster of one node, started here:
# munged, slurmctld and slurmd from Debian's packages (slurm-wlm, munge) on localhost with a minimal
# slurm.conf (CPU-only node, no accounting), all state in a temporary folder. A job array of two
# `nibble calibrate --path cpu --config tiny` elements (one per seed) runs through sbatch; then
# `nibble batch --collect` finds both done, and, with one result removed, that one failed and the
# sbatch line that resubmits it. Exit 77 (CTest: skipped) with the reason when the packages are not
# installed; every daemon is stopped on the way out.
set -uo pipefail
nibble=${1:?usage: slurm_cluster.sh path/to/nibble}
for tool in munged mungekey slurmctld slurmd sbatch squeue sinfo; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool is not installed (Debian: apt-get install slurm-wlm munge; scripts/setup.sh installs them)"
    exit 77
  fi
done
d=$(mktemp -d /tmp/nibble-slurm-XXXXXX)
chmod 700 "$d"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$d"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$d"/*.log; do echo "== $f"; tail -n 20 "$f"; done
  exit 1
}

# munge: a key of our own and a socket in the folder.
mungekey --create --keyfile="$d/munge.key" >/dev/null 2>&1 || dd if=/dev/urandom of="$d/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$d/munge.key"
munged --force --foreground --key-file="$d/munge.key" --socket="$d/munge.sock" --pid-file="$d/munged.pid" \
  --log-file="$d/munged.log" --seed-file="$d/munged.seed" >"$d/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$d/munge.sock" ] && break; sleep 0.1; done
[ -S "$d/munge.sock" ] || fail "munged did not start"

host=$(hostname -s)
port=$((20000 + RANDOM % 20000))
mkdir -p "$d/state" "$d/spool"
cat >"$d/slurm.conf" <<CONF
ClusterName=nibbletest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge.sock
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName=nibble0 NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=nibble0 Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$d/slurm.conf"
slurmctld -D -i -f "$d/slurm.conf" >"$d/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N nibble0 -f "$d/slurm.conf" >"$d/slurmd.out" 2>&1 &
pids+=($!)
ok=""
for _ in $(seq 60); do
  state=$(sinfo -h -o %T 2>/dev/null | head -1)
  [ "$state" = "idle" ] && ok=1 && break
  sleep 1
done
[ -n "$ok" ] || fail "the node did not come up idle (sinfo: ${state:-nothing})"
echo "ok   a one-node Slurm cluster is up (slurmctld port $port)"

cat >"$d/manifest.json" <<JSON
{"name": "slurmtest", "out": "results", "timeout_seconds": 300,
 "runs": [{"command": "calibrate", "task": "megakernel-int4-weight-decode", "configs": ["tiny"], "seeds": [0, 1],
           "split_seeds": true, "args": ["--path", "cpu", "--threads", "1"]}]}
JSON
export NIBBLE_CACHE_DIR="$d/cache"
out=$("$nibble" batch "$d/manifest.json" --slurm --partition debug --time 10:00 2>&1) || fail "nibble batch --slurm: $out"
echo "$out"
job=$(echo "$out" | sed -n 's/.*submitted job array \([0-9]*\).*/\1/p')
[ -n "$job" ] || fail "no job id in: $out"
grep -q "gres" "$d/results/slurm/slurmtest.sbatch" && fail "a CPU-only array asked for a GPU"
for _ in $(seq 120); do
  [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
  sleep 1
done
[ -z "$(squeue -h -j "$job" 2>/dev/null)" ] || fail "job array $job still queued or running after 120 s"
c=$("$nibble" batch "$d/manifest.json" --collect 2>&1)
rc=$?
echo "$c"
[ $rc -eq 0 ] || fail "--collect exit $rc"
echo "$c" | grep -q "2 done (0 of them not passed), 0 failed, 0 missing of 2" || fail "--collect did not find both elements done"
ls "$d"/results/slurm/slurmtest-"${job}"_*.out >/dev/null 2>&1 || fail "no element output files"
echo "ok   the array's 2 elements ran nibble calibrate and --collect found both done"

rm "$d"/results/calibrate-megakernel-int4-weight-decode-tiny-s1-$(printf "[0-9a-f]%.0s" 1 2 3 4 5 6 7 8).json
c=$("$nibble" batch "$d/manifest.json" --collect 2>&1)
rc=$?
echo "$c"
[ $rc -eq 1 ] || fail "--collect with a result removed: exit $rc, not 1"
echo "$c" | grep -q "resubmit: sbatch --array=1 " || fail "--collect did not give the resubmit command for element 1"
echo "ok   a removed result is a failed element with its resubmit command"
