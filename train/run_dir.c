#include "train/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* mkdir -p. */
static int make_dirs(const char *dir, CtErr *err)
{
    char p[1024];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return ct_fail(err, "--output %s: the path is too long", dir);
    for (char *c = p + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            if (mkdir(p, 0755) && errno != EEXIST)
                return ct_fail(err, "cannot create %s: %s", p, strerror(errno));
            *c = '/';
        }
    if (mkdir(p, 0755) && errno != EEXIST)
        return ct_fail(err, "cannot create %s: %s", p, strerror(errno));
    return 0;
}

/* Whether dir holds nothing but "." and "..". */
static int dir_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    int empty = 1;
    while (empty && (de = readdir(d)))
        empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
    closedir(d);
    return empty;
}

int run_dir_new(const char *want, char *got, size_t n, CtErr *err)
{
    if (make_dirs(want, err))
        return -1;
    if (dir_empty(want)) {
        snprintf(got, n, "%s", want);
        return 0;
    }
    for (int k = 1; k < 10000; k++) {
        if (snprintf(got, n, "%s-%d", want, k) >= (int)n)
            return ct_fail(err, "--output %s: the path is too long", want);
        if (mkdir(got, 0755) == 0 || (errno == EEXIST && dir_empty(got)))
            return 0;
        if (errno != EEXIST)
            return ct_fail(err, "cannot create %s: %s", got, strerror(errno));
    }
    return ct_fail(err, "--output %s: %s-1 to %s-9999 are all taken; choose another --output", want, want, want);
}
