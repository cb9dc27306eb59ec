#include "status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ct_fail(CtErr *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int ct_failctx(CtErr *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%.200s: %.300s", prefix, old);
    return -1;
}

void ct_abort(const char *file, int line, const char *expr)
{
    fprintf(stderr, "ctimm: internal error at %s:%d: %s\n", file, line, expr);
    abort();
}
