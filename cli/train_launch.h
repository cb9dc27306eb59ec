/* ctimm-train --nproc-per-node: starting the ranks of a data-parallel run
 * on this machine, as torchrun --nproc_per_node does. */
#ifndef CTIMM_CLI_TRAIN_LAUNCH_H
#define CTIMM_CLI_TRAIN_LAUNCH_H

#include "ir/status.h"

/* Outside an MPI launcher: replaces this process by mpiexec starting this
 * command as n ranks on this machine. Returns only on failure, with err
 * set. */
int train_launch(int argc, char **argv, int n, CtErr *err);

#endif
