#!/usr/bin/env bash
# Which Landlock rule the CUDA driver needs here: landlock_probe with rule sets from nibble's to all of /.
set -uo pipefail
source scripts/env.sh
d=reports/h200/sandbox-ledger
nvcc -O1 -o /tmp/llp $d/landlock_probe.cpp -lcudart 2>&1 | head -5
ro="ro:/usr ro:/lib ro:/lib64 ro:/lib32 ro:/bin ro:/sbin ro:/etc ro:/opt ro:/proc ro:/sys ro:/run"
run() { echo "== $*"; /tmp/llp "$@" 2>&1 | tail -2; }
run $ro rw:/dev
run scope $ro rw:/dev
run $ro rw:/dev rw:/tmp
run $ro rw:/dev rw:/proc
run $ro rw:/dev rw:/proc/self
run $ro rw:/dev rw:/sys
run $ro rw:/dev rw:/run
run $ro rw:/dev ro:/
run $ro rw:/dev rw:/proc rw:/sys rw:/tmp rw:/run rw:/var rw:/root
run rw:/
ls -la /usr/local/nvidia /usr/local/nvidia/lib64 2>&1 | head -5; mount | grep -E "nvidia|gpu" | head; ls -la /dev | grep -i nvidia
