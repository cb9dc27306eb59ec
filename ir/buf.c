#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "status.h"

void buf_printf(CtBuf *b, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        b->s = realloc(b->s, cap);
        CT_ASSERT(b->s != NULL);
        b->cap = cap;
    }
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

void buf_free(CtBuf *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}
