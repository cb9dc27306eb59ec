#!/bin/sh
# distributed_train.sh NUM_PROC [ctimm-train arguments...]: timm's
# distributed_train.sh (torchrun --nproc_per_node=NUM_PROC train.py ...) for
# ctimm: NUM_PROC data-parallel ranks on this machine, started through MPI by
# ctimm-train --nproc-per-node. Across machines, run mpirun yourself:
#   mpirun -np 16 -H node1:8,node2:8 --bind-to none ctimm-train ...
# ctimm-train is $CTIMM_TRAIN, else the one built in build/, else on PATH.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: distributed_train.sh NUM_PROC [ctimm-train arguments...]" >&2
    exit 2
fi
num_proc=$1
shift
train=${CTIMM_TRAIN:-$(dirname "$0")/../build/ctimm-train}
[ -x "$train" ] || train=$(command -v ctimm-train) || {
    echo "distributed_train.sh: no ctimm-train (build it, put it on PATH or set CTIMM_TRAIN)" >&2
    exit 2
}
exec "$train" --nproc-per-node "$num_proc" "$@"
