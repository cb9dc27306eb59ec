/* Minimal test helpers: CHECK records a failure with file:line and goes on;
 * a test's main returns check_done(), non-zero when anything failed. */
#ifndef CTIMM_CHECK_H
#define CTIMM_CHECK_H

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int check_failures;

#define CHECK(cond) do { if (!(cond)) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { if (!(cond)) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_NEAR(a, b, tol) CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g", (double)(a), (double)(b))

/* CRC-32 bit by bit: apart from the zip reader's table, so one cannot hide
 * the other's mistake. */
static inline unsigned test_crc32(const unsigned char *p, size_t n)
{
    unsigned c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

/* The test data folder (CTIMM_TEST_DATA, set by ctest). */
/* ||a - b|| / ||b|| over n floats (||a - b|| when b is zero), in double. */
static inline double test_rel_err(const float *a, const float *b, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

static inline const char *test_data_dir(void)
{
    const char *d = getenv("CTIMM_TEST_DATA");
    return d ? d : "tests/data";
}

/* A whole file (malloc'd, a NUL past its *n bytes), or NULL when it cannot
 * be read. */
static inline char *test_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (s && fread(s, 1, (size_t)len, f) == (size_t)len) {
        s[len] = 0;
        *n = (size_t)len;
    } else {
        free(s);
        s = NULL;
    }
    fclose(f);
    return s;
}

/* A whole file as a NUL-terminated string (malloc'd), or NULL. */
static inline char *test_read_text(const char *path)
{
    size_t n;
    return test_read_file(path, &n);
}

/* rm -rf path: a test's scratch folder (or a file in its place). */
static inline void test_rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    char sub[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub)
            continue;
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            test_rm_tree(sub);
        else
            unlink(sub);
    }
    closedir(d);
    rmdir(path);
}

static inline int check_done(const char *name)
{
    if (check_failures)
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
    else
        printf("%s: ok\n", name);
    return check_failures ? 1 : 0;
}

#endif
