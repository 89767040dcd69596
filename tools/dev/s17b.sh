#!/usr/bin/env bash
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/log.txt
exec > >(tee -a $L) 2>&1
B=build/plugins
rows() { awk '/^ +[0-9]/ {print "   ", $1, $6, $8, "|", $10, $12} /error|Error|warn|WARN/'; }
bin/flagcx --plugin-dir $B bench allreduce --ranks nvidia:1,host:2 -b 256M -e 256M -w 3 -n 10 -c 0 | rows
for round in 1 2; do
  for lay in nvidia:1,host:1 nvidia:1,host:2; do
    for c in 512K 1M 2M default; do
      echo "-- round $round $lay chunk $c"
      if [ $c = default ]; then E=""; else E="FLAGCX_NET_CHUNK_SIZE=$c"; fi
      env $E bin/flagcx --plugin-dir $B bench allreduce --ranks $lay -b 4M -e 256M -f 4 -w 3 -n 10 -c 0 | rows
    done
  done
done
echo "-- old nvidia:1,host:1"
bin/flagcx-old --plugin-dir $B bench allreduce --ranks nvidia:1,host:1 -b 4M -e 256M -f 4 -w 3 -n 10 -c 0 | rows
