set -e
S=/var/tmp/s-pools-manual; rm -rf $S; mkdir -p $S; chmod 711 $S
/work/wt/s-pools/target/release/vmbench matrix --runs-dir $S/runs --work-dir $S/work --db $S/db.sqlite \
  --hypervisor qemu --backend local --format qcow2 --prealloc full --host-pool-dir local=$S/base \
  --runtime 3 --ramp 1 --size 32M --disk-mib 128 --memory 384 > $S/out.txt 2>&1 || { echo FAIL; tail -30 $S/out.txt; }
echo "--- base dir after the run:"; find $S/base
echo "--- pools:"; virsh -c qemu:///system pool-list --all --name
python3 - <<'PY'
import json,glob
for f in glob.glob('/var/tmp/s-pools-manual/runs/*/cells/*/result.json'):
    r=json.load(open(f)); p=r['params']
    print(r['outcome'], {k:p.get(k) for k in ['pool','dir','image','preallocation','preallocation_method','libvirt_allocation','libvirt_prealloc_flag','filesystem']})
PY
