#!/usr/bin/env bash
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/log.txt
exec > >(tee -a $L) 2>&1
B=build/plugins
rows() { awk '/^ +[0-9]/ {print "   ", $1, $6, $8, "|", $10, $12} /error|Error|warn|WARN/'; }
bin/flagcx --plugin-dir $B bench allreduce --ranks nvidia:1,host:2 -b 256M -e 256M -w 3 -n 10 -c 0 | rows
for round in 1 2 3; do
  for F in bin/flagcx-h2dfold bin/flagcx; do
    for lay in nvidia:1,host:1 nvidia:1,host:2 nvidia:1,host:3; do
      echo "-- round $round $F $lay"
      $F --plugin-dir $B bench allreduce --ranks $lay -b 4M -e 1G -f 4 -w 3 -n 10 -c 0 | rows
    done
  done
done
bin/flagcx --plugin-dir $B bench allreduce --ranks nvidia:1,host:2 -b 300K -e 20M -f 4 -c 1 -d all -o all -w 1 -n 1 2>&1 | grep -E "Out of bounds|rror"
bin/flagcx --plugin-dir $B bench allreduce --ranks nvidia:1,host:1 -b 1G -e 1G -c 1 -w 1 -n 2 2>&1 | grep -E "Out of bounds|rror|^ +[0-9]"
