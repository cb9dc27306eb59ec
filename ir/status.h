/*
 * Errors for user-facing failures: functions return 0 on success or -1 and
 * fill a CtErr with one readable line (what failed, where, what to do).
 * Programmer errors (broken invariants) go through CT_ASSERT instead.
 */
#ifndef CTIMM_STATUS_H
#define CTIMM_STATUS_H

#include <stdarg.h>

typedef struct CtErr {
    char msg[512];
} CtErr;

/* Formats the message into err (if not NULL) and returns -1, so callers can
 * write `return ct_fail(err, "...", ...);`. */
int ct_fail(CtErr *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes an existing message with more context ("loading X: <old msg>"). */
int ct_failctx(CtErr *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Returned instead of -1 by work that ended early because its caller asked
 * it to stop (a stop flag raised by SIGINT or SIGTERM, runtime/backend.h):
 * err says so, and a tool exits 130 rather than reporting a failure. */
#define CT_INTERRUPTED (-2)

/* Broken invariants inside ctimm, never bad user input. */
void ct_abort(const char *file, int line, const char *expr) __attribute__((noreturn));
#define CT_ASSERT(x) do { if (!(x)) ct_abort(__FILE__, __LINE__, #x); } while (0)

#endif
