/* A growable text buffer: dumps and summaries are written into one, so the
 * caller decides where the text goes (stdout, a golden file, a test). */
#ifndef CTIMM_BUF_H
#define CTIMM_BUF_H

#include <stddef.h>

typedef struct CtBuf {
    char *s;
    size_t len, cap;
} CtBuf;

void buf_printf(CtBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_free(CtBuf *b);

#endif
