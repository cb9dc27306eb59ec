/*
 * runtime/rendezvous.h: a listening socket and ompi-server on rank 0, a
 * client on the others. What goes over the socket: the URI line and the
 * port-name line, then rank 0 closes it.
 */
#define _GNU_SOURCE /* prctl's PR_SET_PDEATHSIG */
#include "runtime/rendezvous.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct CtRendezvous {
    int listen_fd;
    pid_t server; /* ompi-server */
    char uri[1024];
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Waits up to the deadline for fd to be readable (or, write, writable);
 * 0 when it is. */
static int wait_fd(int fd, int write, double deadline)
{
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0)
            return -1;
        struct pollfd p = {fd, (short)(write ? POLLOUT : POLLIN), 0};
        int rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc > 0)
            return 0;
        if (rc < 0 && errno != EINTR)
            return -1;
    }
}

/* ompi-server started, killed with rank 0 if that dies first. Its URI
 * comes in a file: on a pipe it would wait in stdio's buffer until the
 * server exits. */
static int start_server(CtRendezvous *r, CtErr *err)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/ctimm-ompi-server-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return ct_fail(err, "rendezvous: a file for ompi-server's address in %s: %s", tmp && *tmp ? tmp : "/tmp",
                       strerror(errno));
    close(fd);
    r->server = fork();
    if (r->server < 0) {
        unlink(path);
        return ct_fail(err, "rendezvous: fork: %s", strerror(errno));
    }
    if (r->server == 0) {
        sigset_t none; /* the caller may block signals (the tools block SIGINT and SIGTERM): not the server */
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        execlp("ompi-server", "ompi-server", "--no-daemonize", "--report-uri", path, (char *)NULL);
        _exit(127);
    }
    size_t n = 0;
    for (double deadline = now_s() + 30; now_s() < deadline && !memchr(r->uri, '\n', n);) {
        if (waitpid(r->server, NULL, WNOHANG) == r->server) {
            r->server = 0;
            break;
        }
        nanosleep(&(struct timespec){0, 20000000}, NULL);
        FILE *f = fopen(path, "r");
        n = f ? fread(r->uri, 1, sizeof r->uri - 1, f) : 0;
        if (f)
            fclose(f);
        r->uri[n] = 0;
    }
    unlink(path);
    char *nl = strchr(r->uri, '\n');
    if (!nl || nl == r->uri)
        return ct_fail(err, "rendezvous: ompi-server (Open MPI) did not report its address; it must be on the PATH "
                            "(Debian: openmpi-bin)");
    *nl = 0;
    return 0;
}

int rendezvous_host(int port, CtRendezvous **out, const char **uri, CtErr *err)
{
    CtRendezvous *r = calloc(1, sizeof *r);
    CT_ASSERT(r != NULL);
    r->listen_fd = -1;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    int rc = getaddrinfo(NULL, service, &hints, &ai), one = 1, zero = 0;
    if (rc) {
        ct_fail(err, "rendezvous: MASTER_PORT=%d: %s", port, gai_strerror(rc));
        goto fail;
    }
    int why = 0;
    for (struct addrinfo *p = ai; p && r->listen_fd < 0; p = p->ai_next) {
        r->listen_fd = socket(p->ai_family, SOCK_STREAM, 0);
        if (r->listen_fd < 0) {
            why = errno;
            continue;
        }
        setsockopt(r->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (p->ai_family == AF_INET6) /* IPv4 clients too */
            setsockopt(r->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        if (bind(r->listen_fd, p->ai_addr, p->ai_addrlen) || listen(r->listen_fd, 128)) {
            why = errno;
            close(r->listen_fd);
            r->listen_fd = -1;
        }
    }
    if (r->listen_fd < 0) {
        ct_fail(err, "rendezvous: cannot listen on MASTER_PORT=%d: %s (another job's port? choose a free one)", port,
                strerror(why));
        freeaddrinfo(ai);
        goto fail;
    }
    freeaddrinfo(ai);
    if (start_server(r, err))
        goto fail;
    *uri = r->uri;
    *out = r;
    return 0;
fail:
    rendezvous_close(r);
    *out = NULL;
    return -1;
}

/* All of buf to fd before the deadline. */
static int send_all(int fd, const char *buf, size_t n, double deadline)
{
    while (n > 0) {
        if (wait_fd(fd, 1, deadline))
            return -1;
        ssize_t put = send(fd, buf, n, MSG_NOSIGNAL);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return -1;
        buf += put;
        n -= (size_t)put;
    }
    return 0;
}

int rendezvous_serve(CtRendezvous *r, int world, const char *mpi_port, int timeout_s, CtErr *err)
{
    size_t len = strlen(r->uri) + strlen(mpi_port) + 3;
    char *msg = malloc(len);
    CT_ASSERT(msg != NULL);
    snprintf(msg, len, "%s\n%s\n", r->uri, mpi_port);
    double deadline = now_s() + timeout_s;
    int served = 0;
    while (served < world - 1) {
        if (wait_fd(r->listen_fd, 0, deadline)) {
            ct_fail(err, "rendezvous: %d of the %d other ranks came within %d s (are they started, with this "
                         "MASTER_ADDR and MASTER_PORT?)", served, world - 1, timeout_s);
            break;
        }
        int fd = accept(r->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        served += send_all(fd, msg, strlen(msg), deadline) == 0;
        close(fd);
    }
    free(msg);
    return served == world - 1 ? 0 : -1;
}

void rendezvous_close(CtRendezvous *r)
{
    if (!r)
        return;
    if (r->listen_fd >= 0)
        close(r->listen_fd);
    if (r->server > 0) {
        kill(r->server, SIGTERM);
        waitpid(r->server, NULL, 0);
    }
    free(r);
}

/* A connected socket to addr:port, or -1 once the deadline has passed. */
static int connect_until(const char *addr, int port, double deadline, CtErr *err)
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(addr, service, &hints, &ai);
    if (rc)
        return ct_fail(err, "rendezvous: MASTER_ADDR=%s: %s", addr, gai_strerror(rc));
    int fd = -1;
    while (fd < 0 && now_s() < deadline) {
        for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
            fd = socket(p->ai_family, SOCK_STREAM, 0);
            if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen)) {
                close(fd);
                fd = -1;
            }
        }
        if (fd < 0)
            nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    freeaddrinfo(ai);
    if (fd < 0)
        ct_fail(err, "rendezvous: rank 0 did not answer at MASTER_ADDR=%s MASTER_PORT=%d", addr, port);
    return fd;
}

int rendezvous_join(const char *addr, int port, int timeout_s, char *uri, size_t nuri, char *mpi_port, size_t nport,
                    CtErr *err)
{
    double deadline = now_s() + timeout_s;
    int fd = connect_until(addr, port, deadline, err);
    if (fd < 0)
        return -1;
    char buf[4096];
    size_t n = 0;
    while (n + 1 < sizeof buf && wait_fd(fd, 0, deadline) == 0) {
        ssize_t got = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = 0;
    char *nl1 = strchr(buf, '\n'), *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
    if (!nl2 || (size_t)(nl1 - buf) >= nuri || (size_t)(nl2 - nl1 - 1) >= nport)
        return ct_fail(err, "rendezvous: rank 0 at MASTER_ADDR=%s MASTER_PORT=%d sent no MPI address (%zu bytes; "
                            "is something else listening there?)", addr, port, n);
    *nl1 = *nl2 = 0;
    snprintf(uri, nuri, "%s", buf);
    snprintf(mpi_port, nport, "%s", nl1 + 1);
    return 0;
}
