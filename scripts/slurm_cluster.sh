#!/usr/bin/env bash
# A one-node SLURM cluster on this (Debian) machine, for `make test-slurm`: run as root.
#
#   scripts/slurm_cluster.sh up     install what is missing, start the cluster, print its env
#   scripts/slurm_cluster.sh down   stop the daemons this script started, and only those
#   scripts/slurm_cluster.sh env    the line to source: export SLURM_CONF=...
#   scripts/slurm_cluster.sh status exit 0 when this script's cluster runs
#
# It installs slurm-wlm, munge, slurmdbd and mariadb-server with apt-get when missing
# (accounting: submitit polls sacct, and without it a job that dies without output leaves the
# launcher waiting), then starts munged, mariadbd, slurmdbd, slurmctld and slurmd in that
# order, each in the foreground of its own session, and records their PIDs; `down` stops
# exactly those PIDs, newest first. Everything (configs, keys, database, spool, logs) lives in
# $VGP_SLURM_DIR (default /tmp/vgp-slurm), on ports of its own (VGP_SLURM_PORT, +1, +2, +3), so
# a cluster the machine already runs is neither used nor disturbed: the clients find this one
# through SLURM_CONF, which `up` prints and `env` repeats. A munged already answering on
# munge's default socket is used as it is (slurm's clients reach slurmdbd through that socket
# only), and `down` leaves it running. The node has the machine's CPUs and
# 85% of its memory; one partition, `debug`.
set -euo pipefail

DIR=${VGP_SLURM_DIR:-/tmp/vgp-slurm}
PORT=${VGP_SLURM_PORT:-6917}  # slurmctld; slurmd +1, slurmdbd +2, mariadb +3
CLUSTER=vgp
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)

say() { echo "slurm_cluster: $*" >&2; }
die() { say "error: $*"; exit 1; }

install_packages() {
  local missing=()
  command -v sbatch >/dev/null || missing+=(slurm-wlm)
  command -v slurmdbd >/dev/null || missing+=(slurmdbd)
  command -v munged >/dev/null || missing+=(munge)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
  say "installing ${missing[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null
}

pid_file() { echo "$DIR/pids/$1.pid"; }

# running PID: the process exists and has not exited (a zombie waits for its parent: gone)
running() {
  [[ -r /proc/$1/stat ]] && ! grep -q '^[0-9]* (.*) Z ' "/proc/$1/stat"
}

# alive NAME: the recorded PID runs, and is still that daemon (not a PID reused since)
alive() {
  local pid
  pid=$(cat "$(pid_file "$1")" 2>/dev/null) || return 1
  running "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$1"
}

# start NAME COMMAND...: COMMAND in the foreground of a new session, its PID recorded
start() {
  local name=$1
  shift
  setsid "$@" >>"$DIR/log/$name.out" 2>&1 </dev/null &
  echo $! >"$(pid_file "$name")"
}

# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds, else fail naming WHAT and its log
wait_for() {
  local what=$1 deadline=$((SECONDS + $2))
  shift 2
  while ((SECONDS < deadline)); do
    timeout 10 "$@" >/dev/null 2>&1 && return 0
    # the PID alone: just after `start`, the child may not have exec'd the daemon yet, and its
    # command line is still this script's (a PID reused within these seconds is not a worry)
    running "$(cat "$(pid_file "$what")" 2>/dev/null)" || die "$what exited; see $DIR/log/$what.*"
    sleep 0.2
  done
  die "$what not ready in time; see $DIR/log/$what.*"
}

write_configs() {
  local host cpus memory
  host=$(hostname -s)
  cpus=$(nproc --all)
  memory=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.85}' /proc/meminfo)
  mkdir -p "$DIR"/{etc,pids,log,spool/ctld,spool/d,munge,mysql,run}
  chmod 700 "$DIR/munge"
  [[ -s $DIR/munge/munge.key ]] || {
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/munge/munge.key"
  }
  cat >"$DIR/etc/slurm.conf" <<EOF
# written by scripts/slurm_cluster.sh
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$((PORT + 2))
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MailProg=/bin/true
ReturnToService=2
MinJobAge=300
KillWait=10
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$DIR/etc/slurmdbd.conf" <<EOF
# written by scripts/slurm_cluster.sh
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((PORT + 2))
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$((PORT + 3))
StorageUser=root
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DIR/etc/slurmdbd.conf"
}

up() {
  [[ $(id -u) == 0 ]] || die "run as root (the daemons run as root here)"
  local name running=()
  for name in "${DAEMONS[@]}"; do alive "$name" && running+=("$name"); done
  if status; then
    say "already up ($DIR)"
    env_line
    return 0
  fi
  ((${#running[@]} == 0)) || die "partly up (${running[*]}); run '$0 down' first"
  install_packages
  write_configs
  local started=$SECONDS
  trap 'say "start failed: stopping what was started"; down' ERR EXIT
  export SLURM_CONF=$DIR/etc/slurm.conf
  if munge -n >/dev/null 2>&1; then
    say "using the munged already running on this machine (left alone by 'down')"
  else  # on munge's default socket: slurm's clients talk to slurmdbd only through that one
    mkdir -p /run/munge
    start munged munged --foreground --force --key-file="$DIR/munge/munge.key" \
      --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
      --seed-file="$DIR/munge/munged.seed"
    wait_for munged 20 munge -n
  fi
  if [[ ! -d $DIR/mysql/mysql ]]; then
    mariadb-install-db --user=root --datadir="$DIR/mysql" --auth-root-authentication-method=normal \
      >>"$DIR/log/mariadbd.out" 2>&1 || die "mariadb-install-db failed; see $DIR/log/mariadbd.out"
  fi
  start mariadbd mariadbd --no-defaults --user=root --datadir="$DIR/mysql" \
    --socket="$DIR/run/mysqld.sock" --pid-file="$DIR/run/mariadbd.pid" \
    --bind-address=127.0.0.1 --port=$((PORT + 3)) --log-error="$DIR/log/mariadbd.log" \
    --innodb-buffer-pool-size=64M
  wait_for mariadbd 60 mariadb-admin --no-defaults --socket="$DIR/run/mysqld.sock" ping
  start slurmdbd slurmdbd -D  # reads slurmdbd.conf beside $SLURM_CONF
  wait_for slurmdbd 60 sacctmgr -i show cluster
  sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true  # an existing one: fine
  start slurmctld slurmctld -D -f "$SLURM_CONF"
  wait_for slurmctld 60 scontrol ping
  start slurmd slurmd -D -f "$SLURM_CONF" -N "$(hostname -s)"
  wait_for slurmd 60 bash -c "sinfo -h -N -o %T | grep -qE '^(idle|mixed|allocated)'"
  trap - ERR EXIT
  say "up in $((SECONDS - started)) s: $(sinfo -h -N -o '%N %c CPUs %m MB %T')"
  env_line
}

down() {
  local name pid i t
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
    name=${DAEMONS[i]}
    if alive "$name"; then
      pid=$(cat "$(pid_file "$name")")
      kill -TERM "$pid"
      for ((t = 0; t < 150; t++)); do running "$pid" || break; sleep 0.2; done
      if running "$pid"; then kill -KILL "$pid"; fi
      say "stopped $name ($pid)"
    fi
    rm -f "$(pid_file "$name")"
  done
}

env_line() { echo "export SLURM_CONF=$DIR/etc/slurm.conf"; }

# status: exit 0 when every daemon of this script's cluster runs (munged: maybe not ours)
status() {
  local name
  for name in "${DAEMONS[@]:1}"; do alive "$name" || return 1; done
}

case ${1:-} in
  up) up ;;
  down) down ;;
  env) env_line ;;
  status) status ;;
  *) die "usage: $0 up|down|env|status" ;;
esac
