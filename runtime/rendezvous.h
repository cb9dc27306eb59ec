/*
 * The start-up of a torchrun-style launch (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT, as `torchrun --nproc_per_node N --no_python ctimm-train ...`
 * or a scheduler sets them) without an MPI launcher. Open MPI's processes
 * started apart can connect to each other (MPI_Comm_connect/accept) only
 * through an ompi-server that all of them know, so rank 0 starts one (Open
 * MPI's own tool) and serves its URI and rank 0's MPI port name on
 * MASTER_ADDR:MASTER_PORT over TCP, as torch's TCPStore serves NCCL's unique
 * id: a few hundred bytes of start-up; every byte of training goes through
 * MPI. runtime/dist.c builds the world from them. No MPI here.
 */
#ifndef CTIMM_RENDEZVOUS_H
#define CTIMM_RENDEZVOUS_H

#include <stddef.h>

#include "ir/status.h"

typedef struct CtRendezvous CtRendezvous;

/* Rank 0: listens on `port` (every address) and starts ompi-server; *uri,
 * its address for OMPI_MCA_pmix_server_uri, lives as long as *out. */
int rendezvous_host(int port, CtRendezvous **out, const char **uri, CtErr *err);
/* Rank 0: gives the URI and mpi_port to the other world - 1 ranks as they
 * come, failing when they have not all come within timeout_s seconds. */
int rendezvous_serve(CtRendezvous *r, int world, const char *mpi_port, int timeout_s, CtErr *err);
/* Stops ompi-server (once every rank has left MPI) and frees r; NULL is
 * fine. */
void rendezvous_close(CtRendezvous *r);
/* Ranks > 0: the URI and rank 0's MPI port name from addr:port, trying to
 * connect until timeout_s seconds have passed (rank 0 may start later). */
int rendezvous_join(const char *addr, int port, int timeout_s, char *uri, size_t nuri, char *mpi_port, size_t nport,
                    CtErr *err);

#endif
