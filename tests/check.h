/* Minimal test helpers: CHECK records a failure with file:line and goes on;
 * a test's main returns check_done(), non-zero when anything failed. */
#ifndef CTIMM_CHECK_H
#define CTIMM_CHECK_H

#include <math.h>
#include <stdio.h>

static int check_failures;

#define CHECK(cond) do { if (!(cond)) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { if (!(cond)) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_NEAR(a, b, tol) CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g", (double)(a), (double)(b))

static inline int check_done(const char *name)
{
    if (check_failures)
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
    else
        printf("%s: ok\n", name);
    return check_failures ? 1 : 0;
}

#endif
