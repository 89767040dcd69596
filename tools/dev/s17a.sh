#!/usr/bin/env bash
# Session 17 device A/B: registered AllReduce on nvidia:1,host:2 / host:3
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/log.txt
exec > >(tee -a $L) 2>&1
echo "== $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"; df -h /dev/shm | tail -1
B=build/plugins
rows() { awk '/^ +[0-9]/ {print "   ", $1, $6, $7, $8, $9, "|", $10, $11, $12, $13} /error|Error|warn|WARN/'; }
bin/copybw -plugin-dir $B -size 256M,1G -n 10
# warm-up (a fresh machine's first rounds read low)
bin/flagcx --plugin-dir $B bench allreduce --ranks nvidia:1,host:2 -b 256M -e 256M -w 3 -n 10 -c 0 | rows
for round in 1 2 3; do
  for v in old new noreg; do
    case $v in old) F=bin/flagcx-old; E="";; new) F=bin/flagcx; E="";; noreg) F=bin/flagcx; E="FLAGCX_SHM_REGISTER=0";; esac
    for lay in nvidia:1,host:2 nvidia:1,host:3; do
      echo "-- round $round $v $lay"
      env $E $F --plugin-dir $B bench allreduce --ranks $lay -b 64M -e 1G -f 4 -w 3 -n 10 -c 0 | rows
    done
  done
done
echo "== exactness, new build, registered"
bin/flagcx --plugin-dir $B bench all --ranks nvidia:1,host:2 -b 300K -e 20M -f 4 -c 1 -d all -o all -w 1 -n 1 2>&1 | grep -E "Out of bounds|rror" ; 
FLAGCX_NET_CHUNK_SIZE=1M bin/flagcx --plugin-dir $B bench allreduce --ranks nvidia:1,host:3 -b 300K -e 20M -f 4 -c 1 -d all -o all -w 1 -n 1 2>&1 | grep -E "Out of bounds|rror"
bin/flagcx --plugin-dir $B bench allreduce --ranks nvidia:1,host:2 -b 256M -e 256M -c 1 -w 1 -n 2 2>&1 | grep -E "Out of bounds|rror|^ +[0-9]"
echo "== 700 B new / old"
for F in bin/flagcx bin/flagcx-old bin/flagcx bin/flagcx-old; do $F --plugin-dir $B bench allreduce --ranks nvidia:1,host:3 -b 700 -e 700 -w 100 -n 2000 -c 1 | awk -v f=$F '/^ +[0-9]/ {print f, $6, "/", $10, "us, wrong:", $9, $13}'; done
