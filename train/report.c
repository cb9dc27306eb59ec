#include "train/report.h"

#include <stdarg.h>
#include <stdio.h>

void report_log(const TrainReport *r, const char *fmt, ...)
{
    if (!r || !r->log)
        return;
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    r->log(r->ctx, line);
}

void report_pass_begin(const TrainReport *r, const char *label, size_t total)
{
    if (r && r->pass_begin)
        r->pass_begin(r->ctx, label, total);
}

void report_pass_update(const TrainReport *r, size_t done)
{
    if (r && r->pass_update)
        r->pass_update(r->ctx, done);
}

void report_pass_end(const TrainReport *r)
{
    if (r && r->pass_end)
        r->pass_end(r->ctx);
}
