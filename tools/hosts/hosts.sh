#!/usr/bin/env bash
# Emulated hosts: N "hosts" on one Linux machine, each with its own network
# namespace (eth0 on a bridge), host name, pid namespace and mount namespace
# with a private /dev/shm, for trying multi-host jobs without a cluster.
# Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN), iproute2 and util-linux.
# internal/testkit/hosts.go drives this same script for the Go tests.
#
#   hosts.sh [-p PREFIX] up [--decoy] N   make hosts PREFIX0..PREFIX<N-1>
#   hosts.sh [-p PREFIX] exec I CMD...    run CMD inside host I (in this directory)
#   hosts.sh [-p PREFIX] run [-n R] [--port P] [--out DIR] -- CMD...
#                                         start R ranks of CMD per host (flagcx launcher env)
#   hosts.sh [-p PREFIX] addr I | pid I   host I's address, its init process (pid here)
#   hosts.sh [-p PREFIX] kill I           crash host I: every process in it is killed
#   hosts.sh [-p PREFIX] stop I | cont I  SIGSTOP / SIGCONT every process of host I
#   hosts.sh [-p PREFIX] link I down|up   pull / plug host I's cable
#   hosts.sh [-p PREFIX] check I          fail if host I has processes or /dev/shm files left
#   hosts.sh [-p PREFIX] down             remove everything up made
#
# -s DIR keeps the set's state (init pids) under DIR instead of
# /run/flagcx-hosts ($FLAGCX_HOSTS_STATE).
# The prefix (default "fxh-", or $FLAGCX_HOSTS_PREFIX) names the network
# namespaces (PREFIX0.., PREFIXsw for the bridge) and the host names, so that
# several sets can coexist. Nothing is added to the machine's own network:
# the bridge lives in its own namespace PREFIXsw, and every set uses
# 10.199.0.0/24 on its own bridge (host I is 10.199.0.<I+1>).
set -euo pipefail

PREFIX=${FLAGCX_HOSTS_PREFIX:-fxh-}
SUBNET=10.199.0
DECOY_SUBNET=10.198.0
STATE_ROOT=${FLAGCX_HOSTS_STATE:-/run/flagcx-hosts}

die() {
	echo "hosts.sh: $*" >&2
	exit 2
}

state() { echo "$STATE_ROOT/$PREFIX"; }
count() {
	[[ -f $(state)/n ]] || die "no emulated hosts with prefix '$PREFIX' (run: $0 -p '$PREFIX' up N)"
	cat "$(state)/n"
}
host_index() {
	local n
	n=$(count)
	[[ $1 =~ ^[0-9]+$ ]] && ((10#$1 < n)) || die "host index '$1' is not one of 0..$((n - 1))"
	echo $((10#$1))
}
init_pid() { cat "$(state)/$(host_index "$1").pid"; }
addr() { echo "$SUBNET.$(($(host_index "$1") + 1))"; }

need() {
	local t
	for t in ip unshare nsenter mount; do
		command -v "$t" >/dev/null || die "needs '$t' (apt-get install iproute2 util-linux mount)"
	done
	[[ $(id -u) == 0 ]] || die "needs root (network and pid namespaces), e.g. sudo $0 $*"
}

# start_init runs host i's init: pid 1 of the host's pid namespace, in its
# network namespace, with its host name and /dev/shm. It reaps orphans (bash
# as pid 1 waits for any child) and holds the namespaces until killed; its
# sleep is named $IDLE so that check and signal_all pass it by.
IDLE=flagcx-hosts-idle
start_init() {
	local i=$1 name="$PREFIX$1" dir
	dir=$(state)
	# setsid: the host outlives this shell and ignores its terminal's signals.
	setsid ip netns exec "$name" unshare --pid --mount --uts --fork --mount-proc --kill-child \
		bash -c 'hostname "$1" && mount -t tmpfs -o size=256m,mode=1777 tmpfs /dev/shm && touch "$2" &&
			exec bash -c "trap \"exit 0\" TERM; while :; do (exec -a \"$3\" sleep 3600) & wait; done"' \
		init "$name" "$dir/$i.ready" "$IDLE" </dev/null >"$dir/$i.log" 2>&1 &
	local upid=$! k child=""
	for ((k = 0; k < 100; k++)); do
		if [[ -f $dir/$i.ready ]]; then
			child=$(cat "/proc/$upid/task/$upid/children" 2>/dev/null || true)
			child=${child%% *}
			[[ -n $child ]] && break
		fi
		kill -0 "$upid" 2>/dev/null || die "host $name did not start: $(cat "$dir/$i.log")"
		sleep 0.1
	done
	[[ -n $child ]] || die "host $name did not start within 10 s: $(cat "$dir/$i.log")"
	echo "$child" >"$dir/$i.pid"
}

up() {
	local decoy=0
	if [[ ${1:-} == --decoy ]]; then
		decoy=1
		shift
	fi
	local n=${1:-}
	[[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 250)) || die "up needs a host count 1..250, got '${n}'"
	need up
	[[ ! -e $(state) ]] || die "hosts with prefix '$PREFIX' exist already ($(state)): run '$0 -p $PREFIX down' first"
	mkdir -p "$(state)"
	echo "$n" >"$(state)/n"
	local sw="${PREFIX}sw" i h
	ip netns add "$sw"
	ip -n "$sw" link add br0 type bridge
	ip -n "$sw" link set br0 up
	for ((i = 0; i < n; i++)); do
		h="$PREFIX$i"
		ip netns add "$h"
		ip -n "$h" link set lo up
		if ((decoy)); then
			# An up interface ahead of eth0 by index whose subnet reaches
			# nobody: what a multi-NIC host's unreachable interface looks like.
			# (A veth pair inside the host: dummy interfaces need a module
			# that containers may lack.)
			ip -n "$h" link add dcy0 type veth peer name dcy0p
			ip -n "$h" addr add "$DECOY_SUBNET.$((i + 1))/24" dev dcy0
			ip -n "$h" link set dcy0p up
			ip -n "$h" link set dcy0 up
		fi
		ip link add "h$i" netns "$sw" type veth peer name eth0 netns "$h"
		ip -n "$sw" link set "h$i" master br0 up
		ip -n "$h" addr add "$SUBNET.$((i + 1))/24" dev eth0
		ip -n "$h" link set eth0 up
		start_init "$i"
	done
}

down() {
	local dir i pid ns
	dir=$(state)
	if [[ -d $dir ]]; then
		for f in "$dir"/*.pid; do
			[[ -f $f ]] || continue
			pid=$(cat "$f")
			kill -KILL "$pid" 2>/dev/null || true
		done
		for f in "$dir"/*.pid; do
			[[ -f $f ]] || continue
			pid=$(cat "$f")
			for ((i = 0; i < 50; i++)); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
		done
	fi
	# Namespaces of this prefix only: PREFIX<digits> and PREFIXsw. Whatever
	# still runs in them (a set whose state is lost) is killed first.
	for ns in $(ip netns list | awk '{print $1}'); do
		case ${ns#"$PREFIX"} in
		"$ns") ;;
		sw | [0-9] | [0-9][0-9] | [0-9][0-9][0-9])
			for pid in $(ip netns pids "$ns" 2>/dev/null); do
				kill -KILL "$pid" 2>/dev/null || true
			done
			ip netns del "$ns"
			;;
		esac
	done
	rm -rf "$dir"
}

in_host() {
	local pid
	pid=$(init_pid "$1")
	shift
	kill -0 "$pid" 2>/dev/null || die "host $PREFIX$1 is not running (killed?)"
	nsenter -t "$pid" --net --pid --mount --uts --wd="$PWD" -- "$@"
}

# signal_all signals every process of host i but its init.
signal_all() {
	local i=$1 sig=$2
	in_host "$i" bash -c 'for p in /proc/[0-9]*; do p=${p#/proc/}; [[ $p == 1 || $p == $$ || $(tr "\0" " " 2>/dev/null </proc/$p/cmdline) == "'"$IDLE"' "* ]] || kill -'"$sig"' "$p" 2>/dev/null; done; true'
}

# cont_nsenters resumes the nsenter processes (outside the host) that
# started commands in the host whose init is pid: nsenter stops itself when
# its child stops, and would otherwise never reap it.
cont_nsenters() {
	local pid=$1 p
	for p in /proc/[0-9]*; do
		[[ $(tr "\0" " " 2>/dev/null <"$p/cmdline") == "nsenter -t $pid "* ]] && kill -CONT "${p#/proc/}" 2>/dev/null
	done
	true
}

check() {
	local i=$1
	in_host "$i" bash -c '
		left=""
		for p in /proc/[0-9]*; do
			p=${p#/proc/}
			[[ $p == 1 || $p == $$ || $(tr "\0" " " 2>/dev/null </proc/$p/cmdline) == "'"$IDLE"' "* ]] && continue
			[[ -r /proc/$p/cmdline ]] || continue
			left+=" $p:$(tr "\0" " " </proc/$p/cmdline)"
		done
		shm=$(ls -A /dev/shm)
		[[ -z $left && -z $shm ]] && exit 0
		echo "host $(hostname): left behind: processes:${left:- none}; /dev/shm: ${shm:-empty}" >&2
		exit 1'
}

# launch starts R ranks per host with the variables flagcx reads
# (launch/env.go): FLAGCX_COMM_ID on host 0, FLAGCX_NRANKS,
# FLAGCX_RANK, FLAGCX_LOCAL_RANK, FLAGCX_LOCAL_SIZE and one random
# FLAGCX_COMM_SECRET for the job. With --out DIR each rank writes
# DIR/rank<r>.log (stdout), .err (stderr) and .rc (its exit status); else its lines are
# prefixed with its host and rank. Exits 1 if any rank failed.
launch() {
	local per=1 port=29317 out=""
	while (($#)); do
		case $1 in
		-n) per=$2; shift 2 ;;
		--port) port=$2; shift 2 ;;
		--out) out=$2; shift 2 ;;
		--) shift; break ;;
		*) break ;;
		esac
	done
	(($#)) || die "run needs a command: run [-n R] [--port P] [--out DIR] -- CMD..."
	[[ $per =~ ^[0-9]+$ ]] && ((per >= 1)) || die "-n needs ranks per host >= 1, got '$per'"
	local n i l r pids=() secret
	n=$(count)
	secret=${FLAGCX_COMM_SECRET:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
	[[ -z $out ]] || mkdir -p "$out"
	for ((i = 0; i < n; i++)); do
		for ((l = 0; l < per; l++)); do
			r=$((i * per + l))
			local envs=(FLAGCX_COMM_ID="$SUBNET.1:$port" FLAGCX_COMM_SECRET="$secret" FLAGCX_NRANKS=$((n * per))
				FLAGCX_RANK=$r FLAGCX_LOCAL_RANK=$l FLAGCX_LOCAL_SIZE=$per)
			if [[ -n $out ]]; then
				(
					rc=0
					in_host "$i" env "${envs[@]}" "$@" >"$out/rank$r.log" 2>"$out/rank$r.err" || rc=$?
					echo "$rc" >"$out/rank$r.rc"
					exit "$rc"
				) &
			else
				(in_host "$i" env "${envs[@]}" "$@" 2>&1 | sed -u "s/^/$PREFIX$i\/rank$r: /"; exit "${PIPESTATUS[0]}") &
			fi
			pids+=($!)
		done
	done
	local fail=0
	for r in "${!pids[@]}"; do
		if ! wait "${pids[$r]}"; then
			echo "hosts.sh: rank $r failed" >&2
			fail=1
		fi
	done
	return $fail
}

while [[ ${1:-} == -p || ${1:-} == -s ]]; do
	case $1 in
	-p) PREFIX=$2 ;;
	-s) STATE_ROOT=$2 ;;
	esac
	shift 2
done
# A prefix ends in a non-digit, so that down's PREFIX<digits> never matches
# another set's namespaces.
[[ $PREFIX =~ ^[A-Za-z]([A-Za-z0-9_-]{0,29}[A-Za-z_-])?$ ]] || die "prefix '$PREFIX': letters, digits, '-' or '_', at most 31, not ending in a digit"
cmd=${1:-}
shift || true
case $cmd in
up) up "$@" ;;
down) down ;;
exec) (($# >= 2)) || die "exec needs a host index and a command"; in_host "$@" ;;
run) launch "$@" ;;
addr) addr "${1:-}" ;;
pid) init_pid "${1:-}" ;;
kill) kill -KILL "$(init_pid "${1:-}")" ;;
stop) signal_all "$(host_index "${1:-}")" STOP ;;
cont)
	cont_nsenters "$(init_pid "${1:-}")"
	signal_all "$(host_index "${1:-}")" CONT
	;;
link)
	[[ ${2:-} == up || ${2:-} == down ]] || die "link needs a host index and 'up' or 'down'"
	ip -n "${PREFIX}sw" link set "h$(host_index "$1")" "$2"
	;;
check) check "$(host_index "${1:-}")" ;;
*) die "usage: $0 [-p PREFIX] up [--decoy] N | exec I CMD... | run [-n R] [--port P] [--out DIR] -- CMD... | addr I | pid I | kill I | stop I | cont I | link I down|up | check I | down" ;;
esac
