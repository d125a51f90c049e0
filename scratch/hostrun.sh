#!/bin/bash
cd /work/wt/p1-matrixverdicts
echo "lock acquired $(date -u)"
s=$(date +%s)
target/release/deps/compare_ab-25ccfc7b3450cc0a --ignored --test-threads=1 --nocapture
echo "compare_ab rc=$? in $(( $(date +%s)-s )) s"
s=$(date +%s)
d=/var/tmp/p1-matrixverdicts-auto; rm -rf $d; mkdir -p $d; chmod 711 $d
NO_COLOR=1 target/release/vmbench matrix --runs-dir $d/runs --work-dir $d/work --db $d/db.sqlite \
  --runtime 4 --ramp 1 --size 32M --disk-mib 128 --memory 384 \
  --hypervisor qemu --backend local --format raw --repeat auto --max-repeats 6
echo "auto rc=$? in $(( $(date +%s)-s )) s"
echo "done $(date -u)"
