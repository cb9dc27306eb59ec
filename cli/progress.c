#include "cli/progress.h"

#include "cli/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void draw(Progress *p)
{
    enum { WIDTH = 30 };
    size_t fill = p->total ? p->done * WIDTH / p->total : 0;
    char bar[WIDTH + 1];
    for (size_t i = 0; i < WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = 0;
    double el = cli_now() - p->t0, eta = p->done ? el * (double)(p->total - p->done) / (double)p->done : 0;
    printf("\r\033[K%s [%s] %zu/%zu  %.0fs elapsed, %.0fs left", p->label, bar, p->done, p->total, el, eta);
    fflush(stdout);
    p->shown = 1;
    p->last = cli_now();
}

static void clear(Progress *p)
{
    if (p->shown) {
        printf("\r\033[K");
        p->shown = 0;
    }
}

void progress_begin(Progress *p, const char *label, size_t total, int tty)
{
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->total = total;
    p->tty = tty < 0 ? isatty(STDOUT_FILENO) : tty;
    p->t0 = cli_now();
    if (p->tty)
        draw(p);
}

void progress_update(Progress *p, size_t done)
{
    p->done = done;
    if (p->tty && (cli_now() - p->last >= 0.1 || done == p->total))
        draw(p);
}

void progress_log(Progress *p, const char *fmt, ...)
{
    va_list ap;
    if (p->tty)
        clear(p);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (p->tty)
        draw(p);
    else
        fflush(stdout);
}

void progress_end(Progress *p)
{
    if (p->tty)
        clear(p);
    fflush(stdout);
}
