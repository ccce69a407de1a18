#!/usr/bin/env bash
# Start a throw-away one-node Slurm cluster on loopback (munge, slurmctld, slurmd) for the Slurm launcher's
# end-to-end sweep test (sourced by .ci/run). Installs Debian's slurm-wlm and munge when they are missing; sets
# RLEXP_TEST_SLURM and SLURM_CONF; rlexp_ci_stop_slurm (called on exit by .ci/run) stops the daemons.
set -euo pipefail
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi
SLURM_DIR=$(mktemp -d /tmp/rlexp-slurm.XXXXXX)
mkdir -p "$SLURM_DIR/state" "$SLURM_DIR/spool" "$SLURM_DIR/munge"
NODE=$(hostname -s)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
# munge: a key of its own, a socket in the cluster's folder
dd if=/dev/urandom of="$SLURM_DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 700 "$SLURM_DIR/munge"; chmod 400 "$SLURM_DIR/munge/munge.key"
MUNGE_SOCKET="$SLURM_DIR/munge/munge.socket"
/usr/sbin/munged --force --key-file="$SLURM_DIR/munge/munge.key" --socket="$MUNGE_SOCKET" \
  --pid-file="$SLURM_DIR/munge/munged.pid" --log-file="$SLURM_DIR/munge/munged.log" \
  --seed-file="$SLURM_DIR/munge/munged.seed"
cat > "$SLURM_DIR/slurm.conf" <<CONF
ClusterName=rlexp-ci
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
SlurmdLogFile=$SLURM_DIR/slurmd.log
SlurmctldPort=${RLEXP_SLURMCTLD_PORT:-16817}
SlurmdPort=${RLEXP_SLURMD_PORT:-16818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$SLURM_DIR/slurm.conf"
/usr/sbin/slurmctld -f "$SLURM_CONF"
/usr/sbin/slurmd -f "$SLURM_CONF"
rlexp_ci_stop_slurm() {
  local pids=()
  for file in "$SLURM_DIR/slurmd.pid" "$SLURM_DIR/slurmctld.pid" "$SLURM_DIR/munge/munged.pid"; do
    [ -f "$file" ] && pids+=("$(cat "$file")")
  done
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
  for _ in $(seq 1 50); do  # the daemons write their last files as they go: remove the folder after them
    kill -0 "${pids[@]}" 2>/dev/null || break
    sleep 0.2
  done
  rm -rf "$SLURM_DIR" 2>/dev/null || true
}
for _ in $(seq 1 30); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)' && break
  sleep 1
done
sinfo -h -o %T | grep -qE '^(idle|mixed)' || { echo "Slurm did not come up:"; tail -5 "$SLURM_DIR/slurmctld.log" "$SLURM_DIR/slurmd.log"; exit 1; }
export RLEXP_TEST_SLURM=1
echo "Slurm $(sinfo --version | awk '{print $2}') on $NODE: $(nproc) CPUs, $MEM_MB MB, partition debug"
