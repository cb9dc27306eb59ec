/*
 * The communicator over MPI (runtime/dist.h). Every MPI call of ctimm is in
 * this file. Calls come from one thread (the trainer's); the loader's
 * threads never communicate. Built without MPI (CTIMM_HAVE_MPI unset: CMake
 * found none), it is a world of one rank and refuses a launch of several.
 */
#include "runtime/dist.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef CTIMM_HAVE_MPI
#include <mpi.h>
#include <xxhash.h>

#include "runtime/rendezvous.h"
#endif

/* Open MPI's mpirun, or a scheduler's PMIx. */
static int mpi_launched(void) { return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"); }

/* A torchrun-style variable as a number, or -1 when it is not set. */
static int env_int(const char *name, CtErr *err, int *bad)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return -1;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > INT_MAX) {
        *bad = 1;
        ct_fail(err, "%s=%s is not a rank or a count", name, s);
        return -1;
    }
    return (int)v;
}

int dist_launched(void)
{
    CtErr ignored;
    int bad = 0;
    return mpi_launched() || env_int("WORLD_SIZE", &ignored, &bad) > 1;
}

#ifdef CTIMM_HAVE_MPI
/* Seconds the ranks of a torchrun-style launch wait for each other to start. */
#define RENDEZVOUS_TIMEOUT_S 300

struct CtDist {
    int rank, world, local_rank;
    int mpi;       /* this process called MPI_Init */
    MPI_Comm comm; /* MPI_COMM_WORLD's duplicate, errors returned */
    CtCollective coll;
    CtErr failed;  /* a collective inside a graph failed: why */
    int has_failed;
    CtRendezvous *rdv; /* rank 0 of a torchrun-style launch: ompi-server */
    /* The watchdog (dist_set_timeout): when this rank entered the collective
     * it is in (ms, 0: none), and the thread checking on it. */
    atomic_llong busy_ms;
    atomic_int stop;
    double timeout_s;
    pthread_t watchdog;
    int watching;
};

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Around every collective: the watchdog's clock. */
static void enter(CtDist *d) { atomic_store(&d->busy_ms, now_ms()); }
static void leave(CtDist *d) { atomic_store(&d->busy_ms, 0); }

/* Ends the process once a collective has waited past the timeout: MPI
 * gives no way out of a collective whose peer is gone, and MPI_Abort may
 * not be called from this thread (MPI_THREAD_FUNNELED). */
static void *watch(void *arg)
{
    CtDist *d = arg;
    while (!atomic_load(&d->stop)) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        long long since = atomic_load(&d->busy_ms);
        if (since && (double)(now_ms() - since) > 1000 * d->timeout_s) {
            fprintf(stderr, "ctimm (rank %d of %d): a collective has waited %.0f s for the other ranks: one of them "
                            "died or hangs; ending this rank (--dist-timeout)\n", d->rank, d->world, d->timeout_s);
            fflush(stdout);
            _exit(DIST_TIMEOUT_STATUS);
        }
    }
    return NULL;
}

int dist_set_timeout(CtDist *d, double seconds, CtErr *err)
{
    if (d->watching || d->world == 1 || !(seconds > 0))
        return 0;
    d->timeout_s = seconds;
    if (pthread_create(&d->watchdog, NULL, watch, d))
        return ct_fail(err, "the collectives' watchdog thread could not start");
    d->watching = 1;
    return 0;
}

static int mpi_fail(int code, const char *what, CtErr *err)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    return ct_fail(err, "%s failed: %.*s", what, len, msg);
}

/* The torchrun variables that are set must agree with MPI's world. */
static int check_env(const CtDist *d, CtErr *err)
{
    const char *names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK"};
    int have[] = {d->rank, d->world, d->local_rank};
    for (int k = 0; k < 3; k++) {
        int bad = 0, v = env_int(names[k], err, &bad);
        if (bad)
            return -1;
        if (v >= 0 && v != have[k])
            return ct_fail(err, "%s=%d but the MPI launcher made this rank %d of %d (local rank %d): "
                           "leave the torchrun variables out, or set them as the launcher does",
                           names[k], v, d->rank, d->world, d->local_rank);
    }
    return 0;
}

static int graph_allreduce(void *ctx, double *buf, int64_t n)
{
    CtDist *d = ctx;
    CtErr err;
    if (dist_allreduce_sum(d, buf, (size_t)n, &err) == 0)
        return 0;
    if (!d->has_failed)
        d->failed = err;
    d->has_failed = 1;
    return -1;
}

/* This rank's place: the communicator's, the local rank torchrun's
 * LOCAL_RANK where it is set, else among the ranks sharing this machine's
 * memory. */
static int set_ranks(CtDist *d, CtErr *err)
{
    int rc, bad = 0, local = env_int("LOCAL_RANK", err, &bad);
    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->world);
    if (bad)
        return -1;
    if (local >= 0 && !mpi_launched()) {
        d->local_rank = local;
        return 0;
    }
    MPI_Comm shared;
    if ((rc = MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &shared)) != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Comm_split_type", err);
    MPI_Comm_rank(shared, &d->local_rank);
    MPI_Comm_free(&shared);
    return 0;
}

static int join_mpi(CtDist *d, CtErr *err)
{
    int provided, rc;
    /* MPI from the trainer's thread only */
    if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Init_thread", err);
    d->mpi = 1;
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &d->comm)) != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Comm_dup", err);
    return set_ranks(d, err) ? -1 : check_env(d, err);
}

/* The world of a torchrun-style launch: each rank an MPI singleton, the
 * URI of rank 0's ompi-server and its MPI port from the rendezvous
 * (runtime/rendezvous.h); rank 0 accepts the others one at a time, the
 * world so far taking part in each accept and growing by a merge, then the
 * ranks are ordered by RANK. */
static int join_torchrun(CtDist *d, int world, CtErr *err)
{
    int bad = 0, rank = env_int("RANK", err, &bad), port = bad ? -1 : env_int("MASTER_PORT", err, &bad), rc;
    const char *addr = getenv("MASTER_ADDR");
    if (bad)
        return -1;
    if (rank < 0 || rank >= world || port <= 0 || port > 65535 || !addr || !*addr)
        return ct_fail(err, "WORLD_SIZE=%d (a torchrun-style launch) needs RANK (0..%d), MASTER_ADDR and MASTER_PORT "
                       "as well, as torchrun sets them", world, world - 1);
    char uri[1024], mpi_port[MPI_MAX_PORT_NAME];
    const char *host_uri;
    if (rank == 0 ? rendezvous_host(port, &d->rdv, &host_uri, err)
                  : rendezvous_join(addr, port, RENDEZVOUS_TIMEOUT_S, uri, sizeof uri, mpi_port, sizeof mpi_port, err))
        return -1;
    if (setenv("OMPI_MCA_pmix_server_uri", rank == 0 ? host_uri : uri, 1))
        return ct_fail(err, "setenv: out of memory");
    int provided;
    if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Init_thread", err);
    d->mpi = 1;
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Comm grown, inter, merged;
    if (rank == 0) {
        if ((rc = MPI_Open_port(MPI_INFO_NULL, mpi_port)) != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Open_port", err);
        if (rendezvous_serve(d->rdv, world, mpi_port, RENDEZVOUS_TIMEOUT_S, err))
            return -1;
        MPI_Comm_dup(MPI_COMM_SELF, &grown);
    } else {
        if ((rc = MPI_Comm_connect(mpi_port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter)) != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Comm_connect to rank 0", err);
        MPI_Intercomm_merge(inter, 1, &grown);
        MPI_Comm_free(&inter);
    }
    int size;
    for (MPI_Comm_size(grown, &size); size < world; MPI_Comm_size(grown, &size)) {
        MPI_Comm_set_errhandler(grown, MPI_ERRORS_RETURN);
        if ((rc = MPI_Comm_accept(mpi_port, MPI_INFO_NULL, 0, grown, &inter)) != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Comm_accept of the next rank", err);
        MPI_Intercomm_merge(inter, 0, &merged);
        MPI_Comm_free(&inter);
        MPI_Comm_free(&grown);
        grown = merged;
    }
    if (rank == 0)
        MPI_Close_port(mpi_port);
    rc = MPI_Comm_split(grown, 0, rank, &d->comm);
    MPI_Comm_free(&grown);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Comm_split", err);
}

int dist_init(CtDist **out, CtErr *err)
{
    CtDist *d = calloc(1, sizeof *d);
    CT_ASSERT(d != NULL);
    d->world = 1;
    d->comm = MPI_COMM_NULL;
    int bad = 0, world = mpi_launched() ? 1 : env_int("WORLD_SIZE", err, &bad);
    if (bad)
        goto fail;
    if (mpi_launched() ? join_mpi(d, err) : world > 1 && (join_torchrun(d, world, err) || set_ranks(d, err)))
        goto fail;
    d->coll = (CtCollective){.ctx = d, .world_size = d->world, .allreduce_sum = graph_allreduce};
    *out = d;
    return 0;
fail:
    if (d->mpi) { /* joined but unusable: the caller leaves with dist_abort */
        *out = d;
        return -1;
    }
    rendezvous_close(d->rdv);
    free(d);
    *out = NULL;
    return -1;
}

void dist_finish(CtDist *d)
{
    if (!d)
        return;
    if (d->watching) {
        atomic_store(&d->stop, 1);
        pthread_join(d->watchdog, NULL);
    }
    if (d->mpi) {
        MPI_Comm_free(&d->comm);
        MPI_Finalize();
    }
    rendezvous_close(d->rdv);
    free(d);
}

void dist_abort(CtDist *d, int status)
{
    fflush(stdout);
    fflush(stderr);
    if (d && d->mpi) /* a torchrun-style world is not MPI_COMM_WORLD; torchrun ends the other ranks */
        MPI_Abort(d->comm != MPI_COMM_NULL ? d->comm : MPI_COMM_WORLD, status);
    exit(status);
}

/* The failure a graph's collective kept, once. */
static int sticky(CtDist *d, CtErr *err)
{
    if (!d->has_failed)
        return 0;
    *err = d->failed;
    return ct_failctx(err, "the gradient all-reduce");
}

int dist_allreduce_sum(CtDist *d, double *buf, size_t n, CtErr *err)
{
    if (sticky(d, err))
        return -1;
    for (size_t at = 0; d->world > 1 && at < n;) {
        int count = n - at > (size_t)INT_MAX ? INT_MAX : (int)(n - at);
        enter(d);
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + at, count, MPI_DOUBLE, MPI_SUM, d->comm);
        leave(d);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Allreduce", err);
        at += (size_t)count;
    }
    return 0;
}

int dist_broadcast(CtDist *d, void *buf, size_t n, int root, CtErr *err)
{
    if (sticky(d, err))
        return -1;
    for (size_t at = 0; d->world > 1 && at < n;) {
        int count = n - at > (size_t)INT_MAX ? INT_MAX : (int)(n - at);
        enter(d);
        int rc = MPI_Bcast((unsigned char *)buf + at, count, MPI_BYTE, root, d->comm);
        leave(d);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Bcast", err);
        at += (size_t)count;
    }
    return 0;
}

int dist_barrier(CtDist *d, CtErr *err)
{
    if (sticky(d, err))
        return -1;
    enter(d);
    int rc = d->world > 1 ? MPI_Barrier(d->comm) : MPI_SUCCESS;
    leave(d);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Barrier", err);
}

int dist_check_identical(CtDist *d, const void *const *chunk, const size_t *size, int n, const char *what,
                         CtErr *err)
{
    if (sticky(d, err))
        return -1;
    if (d->world == 1)
        return 0;
    XXH3_state_t *st = XXH3_createState();
    CT_ASSERT(st != NULL);
    XXH3_64bits_reset(st);
    for (int i = 0; i < n; i++)
        XXH3_64bits_update(st, chunk[i], size[i]);
    unsigned long long mine = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    unsigned long long *all = malloc(sizeof *all * (size_t)d->world);
    CT_ASSERT(all != NULL);
    enter(d);
    int rc = MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, d->comm);
    leave(d);
    if (rc != MPI_SUCCESS) {
        free(all);
        return mpi_fail(rc, "MPI_Allgather", err);
    }
    char ranks[200] = "";
    int differ = 0;
    for (int r = 1; r < d->world; r++)
        if (all[r] != all[0] && differ++ < 8)
            snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks), "%s%d (%016llx)", differ > 1 ? ", " : "",
                     r, all[r]);
    if (differ)
        ct_fail(err, "%s differ across ranks: rank 0 has XXH3 %016llx, %d other rank%s not: %s%s", what, all[0], differ,
                differ > 1 ? "s do" : " does", ranks, differ > 8 ? ", ..." : "");
    free(all);
    return differ ? -1 : 0;
}

#else /* a build without MPI: the world of one rank, the only one there is */

struct CtDist {
    int rank, world, local_rank;
    CtCollective coll;
};

#define NO_MPI "this build of ctimm has no MPI, so data-parallel training is off: install the Debian " \
               "packages 'libopenmpi-dev openmpi-bin' and build ctimm again"

int dist_init(CtDist **out, CtErr *err)
{
    int bad = 0, world = env_int("WORLD_SIZE", err, &bad);
    *out = NULL;
    if (bad)
        return -1;
    if (mpi_launched())
        return ct_fail(err, "an MPI launcher started this process as a rank, but " NO_MPI);
    if (world > 1)
        return ct_fail(err, "WORLD_SIZE=%d (a torchrun-style launch), but " NO_MPI, world);
    CtDist *d = calloc(1, sizeof *d);
    CT_ASSERT(d != NULL);
    d->world = 1;
    d->coll = (CtCollective){.ctx = d, .world_size = 1}; /* a world of one never sums */
    *out = d;
    return 0;
}

void dist_finish(CtDist *d) { free(d); }

void dist_abort(CtDist *d, int status)
{
    fflush(stdout);
    fflush(stderr);
    exit(status);
}

/* No other rank to wait for: no watchdog, and every collective is the identity. */
int dist_set_timeout(CtDist *d, double seconds, CtErr *err) { return 0; }
int dist_allreduce_sum(CtDist *d, double *buf, size_t n, CtErr *err) { return 0; }
int dist_broadcast(CtDist *d, void *buf, size_t n, int root, CtErr *err) { return 0; }
int dist_barrier(CtDist *d, CtErr *err) { return 0; }
int dist_check_identical(CtDist *d, const void *const *chunk, const size_t *size, int n, const char *what,
                         CtErr *err)
{
    return 0;
}

#endif

int dist_rank(const CtDist *d) { return d->rank; }
int dist_world_size(const CtDist *d) { return d->world; }
int dist_local_rank(const CtDist *d) { return d->local_rank; }

const CtCollective *dist_collective(CtDist *d) { return &d->coll; }
