#define _XOPEN_SOURCE 700 /* readlink */
#include "cli/train_launch.h"

#include "cli/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef CTIMM_MPIEXEC /* CMake found no MPI */
int train_launch(int argc, char **argv, int n, CtErr *err)
{
    return ct_fail(err, "--nproc-per-node %d: this build of ctimm has no MPI to start the ranks with: install the "
                        "Debian packages 'libopenmpi-dev openmpi-bin' and build ctimm again, or train in one process "
                        "(no --nproc-per-node)", n);
}
#else
int train_launch(int argc, char **argv, int n, CtErr *err)
{
    char exe[4096], np[16];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return ct_fail(err, "--nproc-per-node: cannot find this program's path: %s", strerror(errno));
    exe[len] = 0;
    snprintf(np, sizeof np, "%d", n);
    /* unbound: each rank's BLAS and loader threads spread over the cores; as
     * torchrun, N ranks whatever the core count */
    char *head[] = {CTIMM_MPIEXEC, "-np", np, "--bind-to", "none", "--oversubscribe"};
    int nhead = sizeof head / sizeof *head;
    /* room for --allow-run-as-root, this program, its arguments and NULL */
    char **v = calloc((size_t)(nhead + argc + 2), sizeof *v);
    CT_ASSERT(v != NULL);
    memcpy(v, head, sizeof head);
    /* containers and cloud images run as root, and torchrun does not mind;
     * Open MPI refuses root unless told */
    if (geteuid() == 0) {
        v[nhead++] = "--allow-run-as-root";
        fprintf(stderr, "ctimm-train: running as root: mpiexec started with --allow-run-as-root\n");
    }
    v[nhead++] = exe;
    memcpy(v + nhead, argv + 1, sizeof *v * (size_t)(argc - 1));
    fflush(stdout);
    cli_unblock_signals(); /* mpiexec forwards Ctrl-C to the ranks: it must see it */
    execv(CTIMM_MPIEXEC, v);
    ct_fail(err, "--nproc-per-node: cannot start %s: %s", CTIMM_MPIEXEC, strerror(errno));
    free(v);
    return -1;
}
#endif
