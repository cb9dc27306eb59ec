/*
 * Tar indexing for the tar dataset: one pass over the 512-byte headers with
 * pread, recording each image member's data offset and size, so samples are
 * later read by offset without unpacking. Understands POSIX ustar (prefix +
 * name), GNU long names ('L'), pax extended headers ('x': path, size) and
 * GNU base-256 sizes; directories, links and other non-files are skipped.
 * A member named *.tar is indexed in place one level deep (timm's tar of
 * tars): its members' paths get the member's name without .tar as folder.
 *
 * Stricter than Python's tarfile, which stops quietly at the first bad
 * header: a header with a wrong checksum, or a member running past the end
 * of the file, is an error naming the archive and the offset.
 */
#include "runtime/data/dataset_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 512
#define MAX_NAME 65536

typedef struct TarCtx {
    const char *path; /* the archive, for messages */
    int fd;
    DsBuild *b;
    /* ds_tar_walk: every file member goes here instead */
    int (*member)(void *ctx, const char *name, uint64_t off, uint64_t size, CtErr *err);
    void *ctx;
} TarCtx;

static int read_at(TarCtx *t, void *buf, size_t n, uint64_t off, CtErr *err)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(t->fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return ct_fail(err, "%s: read failed at offset %llu: %s", t->path, (unsigned long long)(off + got),
                           strerror(errno));
        }
        if (r == 0)
            return ct_fail(err, "%s: unexpected end of file at offset %llu (truncated archive?)", t->path,
                           (unsigned long long)(off + got));
        got += (size_t)r;
    }
    return 0;
}

/* A numeric header field: octal text (NUL/space padded) or GNU base-256. */
static int parse_num(const unsigned char *f, int n, uint64_t *out)
{
    uint64_t v = 0;
    if (f[0] & 0x80) {
        if (f[0] != 0x80)
            return -1; /* negative or too large */
        for (int i = 1; i < n; i++) {
            if (v >> 56)
                return -1;
            v = v << 8 | f[i];
        }
        *out = v;
        return 0;
    }
    int i = 0;
    while (i < n && (f[i] == ' ' || f[i] == 0))
        i++;
    int digits = 0;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (v >> 60)
            return -1;
        v = v * 8 + (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != 0)
            return -1;
    *out = v;
    return 0;
}

/* Checks the header checksum: the sum of its bytes with the checksum field
 * read as spaces, unsigned (POSIX) or signed (some old tars). */
static int checksum_ok(const unsigned char *h)
{
    uint64_t want;
    if (parse_num(h + 148, 8, &want) != 0)
        return 0;
    long us = 0, ss = 0;
    for (int i = 0; i < BLOCK; i++) {
        unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
        us += c;
        ss += (signed char)c;
    }
    return (uint64_t)us == want || (long)want == ss;
}

static int all_zero(const unsigned char *h)
{
    for (int i = 0; i < BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

static size_t field_len(const unsigned char *f, size_t n)
{
    size_t i = 0;
    while (i < n && f[i])
        i++;
    return i;
}

/* Reads pax records "LEN key=value\n" from data, picking path and size. */
static int parse_pax(TarCtx *t, const char *data, size_t n, char **path, uint64_t *size, int *has_size,
                     uint64_t at, CtErr *err)
{
    size_t i = 0;
    while (i < n) {
        if (data[i] == 0)
            break;
        size_t len = 0, j = i;
        while (j < n && data[j] >= '0' && data[j] <= '9' && len < n)
            len = len * 10 + (size_t)(data[j++] - '0');
        if (j >= n || data[j] != ' ' || len == 0 || len > n - i || data[i + len - 1] != '\n')
            return ct_fail(err, "%s: corrupt pax header at offset %llu", t->path, (unsigned long long)at);
        const char *kv = data + j + 1, *end = data + i + len - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq)
            return ct_fail(err, "%s: corrupt pax record at offset %llu", t->path, (unsigned long long)at);
        size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
        if (klen == 4 && !memcmp(kv, "path", 4)) {
            free(*path);
            *path = malloc(vlen + 1);
            if (!*path)
                return ct_fail(err, "out of memory");
            memcpy(*path, eq + 1, vlen);
            (*path)[vlen] = 0;
        } else if (klen == 4 && !memcmp(kv, "size", 4)) {
            uint64_t v = 0;
            for (size_t k = 0; k < vlen; k++) {
                char c = eq[1 + k];
                if (c < '0' || c > '9' || v > UINT64_MAX / 10 - 10)
                    return ct_fail(err, "%s: bad pax size at offset %llu", t->path, (unsigned long long)at);
                v = v * 10 + (uint64_t)(c - '0');
            }
            *size = v;
            *has_size = 1;
        }
        i += len;
    }
    return 0;
}

/* Adds an image member. prefix: the enclosing member tar's name without
 * .tar ("" at the top level), which also becomes the front of its folder. */
static int add_member(TarCtx *t, const char *prefix, const char *child_tar, const char *name, uint64_t off,
                      uint64_t size, CtErr *err)
{
    DsBuild *b = t->b;
    /* label: the leaf folder of join(prefix, dirname(name)), as timm's _label_from_paths */
    const char *slash = strrchr(name, '/');
    size_t dlen = slash ? (size_t)(slash - name) : 0;
    char *joined = malloc(strlen(prefix) + dlen + 2);
    if (!joined)
        return ct_fail(err, "out of memory");
    if (*prefix && dlen)
        sprintf(joined, "%s/%.*s", prefix, (int)dlen, name);
    else if (*prefix)
        strcpy(joined, prefix);
    else
        sprintf(joined, "%.*s", (int)dlen, name);
    size_t jl = strlen(joined);
    while (jl && joined[jl - 1] == '/')
        joined[--jl] = 0;
    const char *leaf = strrchr(joined, '/');
    leaf = leaf ? leaf + 1 : joined;

    DsEntry e = {.off = off, .size = size};
    int rc = ds_str(b, name, strlen(name), &e.key, err);
    if (!rc && child_tar) {
        size_t n = strlen(child_tar) + strlen(name) + 2;
        char *full = malloc(n);
        if (!full) {
            rc = ct_fail(err, "out of memory");
        } else {
            snprintf(full, n, "%s:%s", child_tar, name);
            rc = ds_str(b, full, strlen(full), &e.name, err);
            free(full);
        }
    } else {
        e.name = e.key;
    }
    if (!rc)
        rc = ds_str(b, leaf, strlen(leaf), &e.label, err);
    if (!rc)
        rc = ds_add(b, e, err);
    free(joined);
    return rc;
}

/* Scans the archive bytes [base, limit). depth 0: the file itself; 1: a member tar. */
static int scan(TarCtx *t, uint64_t base, uint64_t limit, int depth, const char *prefix, const char *child_tar,
                CtErr *err)
{
    unsigned char h[BLOCK];
    char *long_name = NULL, *pax_path = NULL;
    uint64_t pax_size = 0;
    int has_pax_size = 0, rc = 0, members = 0;
    const char *where = child_tar ? child_tar : "";
    for (uint64_t pos = base; pos < limit;) {
        if (limit - pos < BLOCK) {
            rc = ct_fail(err, "%s%s%s: truncated header at offset %llu", t->path, *where ? ":" : "", where,
                         (unsigned long long)pos);
            break;
        }
        if ((rc = read_at(t, h, BLOCK, pos, err)))
            break;
        if (all_zero(h))
            break; /* end of archive */
        if (!checksum_ok(h)) {
            rc = ct_fail(err, "%s%s%s: corrupt tar header at offset %llu (bad checksum)%s", t->path,
                         *where ? ":" : "", where, (unsigned long long)pos,
                         pos == base && members == 0 ? "; not a tar archive?" : "");
            break;
        }
        members++;
        uint64_t size;
        if (parse_num(h + 124, 12, &size) != 0) {
            rc = ct_fail(err, "%s: bad member size in the header at offset %llu", t->path, (unsigned long long)pos);
            break;
        }
        char type = (char)h[156];
        if (has_pax_size && type != 'x' && type != 'L' && type != 'K')
            size = pax_size;
        uint64_t data = pos + BLOCK;
        if (size > limit - data) {
            rc = ct_fail(err, "%s%s%s: member at offset %llu runs past the end of the archive (%llu bytes; truncated?)",
                         t->path, *where ? ":" : "", where, (unsigned long long)pos, (unsigned long long)size);
            break;
        }
        uint64_t next = data + (size + BLOCK - 1) / BLOCK * BLOCK;
        if (next > limit)
            next = limit;
        if (type == 'L' || type == 'x') {
            if (size > MAX_NAME) {
                rc = ct_fail(err, "%s: oversized %s header at offset %llu", t->path, type == 'L' ? "long-name" : "pax",
                             (unsigned long long)pos);
                break;
            }
            char *buf = malloc(size + 1);
            if (!buf) {
                rc = ct_fail(err, "out of memory");
                break;
            }
            if ((rc = read_at(t, buf, size, data, err))) {
                free(buf);
                break;
            }
            buf[size] = 0;
            if (type == 'L') {
                free(long_name);
                long_name = buf;
            } else {
                rc = parse_pax(t, buf, size, &pax_path, &pax_size, &has_pax_size, pos, err);
                free(buf);
                if (rc)
                    break;
            }
            pos = next;
            continue;
        }
        /* the member's name: pax path, GNU long name, or ustar prefix/name */
        char name[512];
        const char *nm;
        if (pax_path) {
            nm = pax_path;
        } else if (long_name) {
            nm = long_name;
        } else {
            size_t nl = field_len(h, 100), pl = 0;
            if (!memcmp(h + 257, "ustar", 5) && memcmp(h + 257, "ustar  ", 8) != 0)
                pl = field_len(h + 345, 155); /* POSIX prefix (not in old GNU headers) */
            if (pl)
                snprintf(name, sizeof name, "%.*s/%.*s", (int)pl, (const char *)h + 345, (int)nl, (const char *)h);
            else
                snprintf(name, sizeof name, "%.*s", (int)nl, (const char *)h);
            nm = name;
        }
        size_t len = strlen(nm);
        int is_file = type == '0' || type == '7' || (type == 0 && !(len && nm[len - 1] == '/'));
        if (is_file && len && t->member) {
            if ((rc = t->member(t->ctx, nm, data, size, err)))
                break;
        } else if (is_file && len) {
            const char *base_name = strrchr(nm, '/');
            base_name = base_name ? base_name + 1 : nm;
            size_t bl = strlen(base_name);
            if (ds_is_tar_name(base_name, bl)) {
                if (depth == 0) {
                    /* prefix for its members: join(prefix, name without .tar) */
                    char *sub = malloc(strlen(prefix) + bl + 2);
                    if (!sub) {
                        rc = ct_fail(err, "out of memory");
                        break;
                    }
                    if (*prefix)
                        sprintf(sub, "%s/%.*s", prefix, (int)(bl - 4), base_name);
                    else
                        sprintf(sub, "%.*s", (int)(bl - 4), base_name);
                    rc = scan(t, data, data + size, 1, sub, nm, err);
                    free(sub);
                    if (rc)
                        break;
                }
            } else if (ds_is_image_name(base_name, bl)) {
                if ((rc = add_member(t, prefix, child_tar, nm, data, size, err)))
                    break;
            }
        }
        free(long_name);
        free(pax_path);
        long_name = pax_path = NULL;
        has_pax_size = 0;
        pos = next;
    }
    free(long_name);
    free(pax_path);
    if (!rc && members == 0 && depth == 0)
        rc = ct_fail(err, "%s: empty tar archive", t->path);
    return rc;
}

int ds_tar_scan(const char *path, int fd, DsBuild *b, CtErr *err)
{
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0)
        return ct_fail(err, "%s: cannot seek: %s", path, strerror(errno));
    if (end == 0)
        return ct_fail(err, "%s: empty file, not a tar archive", path);
    TarCtx t = {.path = path, .fd = fd, .b = b};
    return scan(&t, 0, (uint64_t)end, 0, "", NULL, err);
}

int ds_tar_walk(const char *path, int fd, int (*member)(void *ctx, const char *name, uint64_t off, uint64_t size,
                                                         CtErr *err),
                void *ctx, CtErr *err)
{
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0)
        return ct_fail(err, "%s: cannot seek: %s", path, strerror(errno));
    if (end == 0)
        return ct_fail(err, "%s: empty file, not a tar archive", path);
    TarCtx t = {.path = path, .fd = fd, .member = member, .ctx = ctx};
    return scan(&t, 0, (uint64_t)end, 0, "", NULL, err);
}
