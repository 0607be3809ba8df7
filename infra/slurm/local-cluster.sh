#!/bin/bash
# A two-node SLURM cluster on this machine, from Debian's packages, for trying infra/slurm/train.sbatch
# without a real cluster (tests/slow/cluster/test_slurm.py submits to it).
#
#   infra/slurm/local-cluster.sh up      # install slurmctld, slurmd, slurm-client and munge if missing; start
#                                        # munged, slurmctld and two slurmd (node1, node2); print the partition
#   infra/slurm/local-cluster.sh down    # cancel the jobs, stop every daemon `up` started
#   infra/slurm/local-cluster.sh status  # the daemons `up` started that are running (exit 1: none)
#
# Both are idempotent. Everything lives in one state folder, LOCAL_CLUSTER_DIR (default: /tmp/foundry-slurm):
# slurm.conf, cgroup.conf, a munge key of its own, the daemons' pid files, logs, spool and state save folders;
# nothing is written under /etc. The two nodes are two slurmd on this host (`slurmd -N node1` and `-N node2`),
# each on a port of its own on 127.0.0.1, so jobs see two node names (SLURMD_NODENAME) on one kernel: no network
# namespaces, no cgroups (proctrack/linuxproc, task/none). Each node declares 8 CPUs whatever the machine has,
# so that train.sbatch's `--cpus-per-task=8` fits. The daemons run as root: run this as root (or it uses sudo).
# Ports: LOCAL_CLUSTER_PORT (default 16817) for slurmctld, the next two for the nodes.
#
# The client commands read the cluster's slurm.conf from SLURM_CONF: `up` prints the line to export.
set -euo pipefail

STATE=${LOCAL_CLUSTER_DIR:-/tmp/foundry-slurm}
PORT=${LOCAL_CLUSTER_PORT:-16817}
NODES=(node1 node2)
CONF=$STATE/slurm.conf
MUNGE_SOCKET=$STATE/munge/munge.socket.2 # readable by every user: the client commands talk to it
MUNGE_KEY=$STATE/munge-key/munge.key      # root's alone
export SLURM_CONF=$CONF

die() {
    echo "local-cluster: $*" >&2
    exit 1
}

if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "the SLURM daemons run as root; run this as root"
    exec sudo LOCAL_CLUSTER_DIR="$STATE" LOCAL_CLUSTER_PORT="$PORT" "$0" "$@"
fi

install_packages() {
    local missing=()
    for pair in slurmctld:slurmctld slurmd:slurmd sinfo:slurm-client munged:munge; do
        command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
    done
    if ((${#missing[@]})); then
        echo "local-cluster: installing ${missing[*]}"
        # The packages' own services are not used (they read /etc); where the package manager starts one, it
        # stays as the package set it up.
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# pid of a daemon `up` started, if it is running: its pid file names a live process with the expected name.
alive() {
    local pidfile=$1 name=$2 pid
    [[ -f $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] && echo "$pid"
}

write_config() {
    mkdir -p "$STATE"/{munge,munge-key,log,ctld} "${NODES[@]/#/$STATE/spool-}"
    chmod 755 "$STATE" "$STATE/munge"
    chmod 700 "$STATE/munge-key"
    if [[ ! -s $MUNGE_KEY ]]; then
        head -c 1024 /dev/urandom >"$MUNGE_KEY"
        chmod 400 "$MUNGE_KEY"
    fi
    local host i node_lines=""
    host=$(hostname -s)
    for i in "${!NODES[@]}"; do
        node_lines+="NodeName=${NODES[$i]} NodeHostname=$host NodeAddr=127.0.0.1 Port=$((PORT + 1 + i)) CPUs=8 State=UNKNOWN"$'\n'
    done
    cat >"$CONF" <<EOF
# Written by infra/slurm/local-cluster.sh: a two-node cluster on one host.
ClusterName=foundry-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool-%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
$node_lines
PartitionName=foundry Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$STATE/cgroup.conf" <<EOF
# Written by infra/slurm/local-cluster.sh: no cgroup plugin is configured (proctrack/linuxproc, task/none).
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
EOF
}

wait_idle() {
    local deadline=$((SECONDS + 60)) states
    while ((SECONDS < deadline)); do
        states=$(sinfo --noheader --nodes="$(IFS=,; echo "${NODES[*]}")" --Node --format=%T 2>/dev/null || true)
        if [[ $(grep -cx 'idle\|mixed\|allocated' <<<"$states") -eq ${#NODES[@]} ]]; then
            return 0
        fi
        sleep 0.5
    done
    sinfo --Node --long >&2 || true
    die "the nodes did not come up within 60 s; see the logs in $STATE/log/"
}

up() {
    install_packages
    write_config
    if ! alive "$STATE/munged.pid" munged >/dev/null; then
        munged --force --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" \
            --pid-file="$STATE/munged.pid" --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge-key/munged.seed"
    fi
    if ! alive "$STATE/slurmctld.pid" slurmctld >/dev/null; then
        slurmctld -f "$CONF" -i  # -i: a state file of an earlier `up` that does not read is skipped, not fatal
    fi
    local node
    for node in "${NODES[@]}"; do
        if ! alive "$STATE/slurmd-$node.pid" slurmd >/dev/null; then
            slurmd -f "$CONF" -N "$node"
        fi
    done
    wait_idle
    sinfo --Node --format="%P %N %T %c"
    echo "export SLURM_CONF=$CONF"
}

# Stops daemons `up` started, given as PIDFILE:NAME pairs: SIGTERM to all at once, SIGKILL to any left after 20 s.
stop() {
    local pair pid pids=() deadline=$((SECONDS + 20))
    for pair in "$@"; do
        pid=$(alive "${pair%%:*}" "${pair#*:}") && pids+=("$pid")
    done
    ((${#pids[@]})) || return 0
    kill "${pids[@]}" 2>/dev/null || true
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null; do
            if ((SECONDS >= deadline)); then
                kill -KILL "$pid" 2>/dev/null || true
                break
            fi
            sleep 0.1
        done
    done
}

down() {
    if alive "$STATE/slurmctld.pid" slurmctld >/dev/null; then
        scancel --full --quiet --partition=foundry 2>/dev/null || true
        local deadline=$((SECONDS + 30))
        while [[ -n $(squeue --noheader --format=%i 2>/dev/null) ]] && ((SECONDS < deadline)); do
            sleep 0.5
        done
    fi
    local node slurmds=()
    for node in "${NODES[@]}"; do
        slurmds+=("$STATE/slurmd-$node.pid:slurmd")
    done
    stop "${slurmds[@]}"
    stop "$STATE/slurmctld.pid:slurmctld"
    stop "$STATE/munged.pid:munged"
    echo "local-cluster: down"
}

status() {
    local found=1 daemon pid
    for daemon in munged slurmctld "${NODES[@]/#/slurmd-}"; do
        pid=$(alive "$STATE/$daemon.pid" "${daemon%%-*}") || continue
        echo "$daemon $pid"
        found=0
    done
    return $found
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
*) die "usage: $0 up|down|status" ;;
esac
