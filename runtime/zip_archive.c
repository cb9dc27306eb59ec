/*
 * The zip reader: end of central directory record (zip64's when a field
 * overflows), central directory, then each entry's local header on demand.
 * Every offset and size is checked against the buffer before it is used;
 * the entry count is bounded by the directory's size (46 bytes an entry),
 * so a corrupt count cannot make us allocate more than the file holds.
 */
#include "runtime/zip_archive.h"

#include <stdlib.h>
#include <string.h>

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define END_LEN 22
#define CENTRAL_LEN 46
#define LOCAL_LEN 30
#define MAX_COMMENT 65535u

static uint32_t rd16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const unsigned char *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
/* CRC-32 (the zip polynomial, reflected), with its table made per call:
 * 256 entries cost less than reading one storage, and no state is shared. */
static uint32_t crc32_of(const unsigned char *p, uint64_t n)
{
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    uint32_t crc = 0xFFFFFFFFu;
    for (uint64_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}
#endif

void zip_close(ZipArchive *z)
{
    if (!z)
        return;
    for (int i = 0; i < z->n; i++)
        free(z->e[i].name);
    free(z->e);
    memset(z, 0, sizeof *z);
}

/* Where the central directory is and how many entries it claims. */
typedef struct Directory {
    uint64_t offset, size, count;
} Directory;

/* The end record: the last signature whose comment ends the file. */
static int find_end(const char *path, const unsigned char *b, size_t size, size_t *at, CtErr *err)
{
    if (size < END_LEN)
        return ct_fail(err, "%s: %zu bytes, too short for a zip archive (truncated?)", path, size);
    size_t lowest = size - END_LEN > MAX_COMMENT ? size - END_LEN - MAX_COMMENT : 0;
    for (size_t pos = size - END_LEN + 1; pos-- > lowest;) {
        if (rd32(b + pos) == SIG_END && pos + END_LEN + rd16(b + pos + 20) == size) {
            *at = pos;
            return 0;
        }
    }
    return ct_fail(err, "%s: no zip end-of-directory record at its end (truncated or not a zip archive)", path);
}

/* Zip64's end record, found through the locator just before the plain one. */
static int read_end64(const char *path, const unsigned char *b, size_t size, size_t end, Directory *d, CtErr *err)
{
    if (end < 20 || rd32(b + end - 20) != SIG_LOCATOR64)
        return ct_fail(err, "%s: the zip end record needs zip64's but there is no zip64 locator", path);
    uint64_t off = rd64(b + end - 12);
    if (off > end - 20 || end - 20 - off < 56 || rd32(b + off) != SIG_END64)
        return ct_fail(err, "%s: the zip64 end record is not where its locator says (corrupt?)", path);
    if (rd32(b + off + 16) || rd32(b + off + 20))
        return ct_fail(err, "%s: a zip archive split over several disks is not supported", path);
    d->count = rd64(b + off + 32);
    d->size = rd64(b + off + 40);
    d->offset = rd64(b + off + 48);
    return 0;
}

static int read_directory(const char *path, const unsigned char *b, size_t size, Directory *d, CtErr *err)
{
    size_t end = 0;
    if (find_end(path, b, size, &end, err))
        return -1;
    if (rd16(b + end + 4) || rd16(b + end + 6))
        return ct_fail(err, "%s: a zip archive split over several disks is not supported", path);
    d->count = rd16(b + end + 10);
    d->size = rd32(b + end + 12);
    d->offset = rd32(b + end + 16);
    if ((d->count == 0xFFFF || d->size == 0xFFFFFFFFu || d->offset == 0xFFFFFFFFu) &&
        read_end64(path, b, size, end, d, err))
        return -1;
    if (d->offset > end || d->size > end - d->offset)
        return ct_fail(err, "%s: the zip central directory (%llu bytes at %llu) lies outside the archive (truncated?)",
                       path, (unsigned long long)d->size, (unsigned long long)d->offset);
    if (d->count > d->size / CENTRAL_LEN)
        return ct_fail(err, "%s: the zip directory claims %llu entries in %llu bytes (corrupt?)", path,
                       (unsigned long long)d->count, (unsigned long long)d->size);
    return 0;
}

/* Zip64's extra field: the 64-bit values of the fields that hold 0xFFFFFFFF,
 * in the order size, compressed size, local header offset. */
static int read_zip64_extra(const unsigned char *x, uint32_t xlen, ZipEntry *e)
{
    uint64_t *want[3] = {e->size == 0xFFFFFFFFu ? &e->size : NULL, e->csize == 0xFFFFFFFFu ? &e->csize : NULL,
                         e->local == 0xFFFFFFFFu ? &e->local : NULL};
    for (uint32_t at = 0; at + 4 <= xlen;) {
        uint32_t id = rd16(x + at), len = rd16(x + at + 2);
        if (at + 4 + len > xlen)
            return -1;
        if (id == 1) {
            uint32_t k = 0;
            for (int f = 0; f < 3; f++) {
                if (!want[f])
                    continue;
                if (k + 8 > len)
                    return -1;
                *want[f] = rd64(x + at + 4 + k);
                k += 8;
            }
            return 0;
        }
        at += 4 + len;
    }
    return want[0] || want[1] || want[2] ? -1 : 0;
}

/* One central directory record at *pos (inside [.., limit)), advancing pos. */
static int read_central(const char *path, const unsigned char *b, uint64_t *pos, uint64_t limit, ZipEntry *e,
                        CtErr *err)
{
    const unsigned char *c = b + *pos;
    if (limit - *pos < CENTRAL_LEN || rd32(c) != SIG_CENTRAL)
        return ct_fail(err, "%s: zip directory record at byte %llu is broken (corrupt?)", path,
                       (unsigned long long)*pos);
    uint32_t nlen = rd16(c + 28), xlen = rd16(c + 30), clen = rd16(c + 32);
    if (limit - *pos - CENTRAL_LEN < (uint64_t)nlen + xlen + clen)
        return ct_fail(err, "%s: zip directory record at byte %llu runs past the directory", path,
                       (unsigned long long)*pos);
    if (memchr(c + CENTRAL_LEN, 0, nlen))
        return ct_fail(err, "%s: a zip entry's name holds a NUL byte", path);
    e->flags = (uint16_t)rd16(c + 8);
    e->method = (uint16_t)rd16(c + 10);
    e->crc = rd32(c + 16);
    e->csize = rd32(c + 20);
    e->size = rd32(c + 24);
    e->local = rd32(c + 42);
    e->name = malloc(nlen + 1);
    if (!e->name)
        return ct_fail(err, "%s: out of memory reading the zip directory", path);
    memcpy(e->name, c + CENTRAL_LEN, nlen);
    e->name[nlen] = 0;
    if (read_zip64_extra(c + CENTRAL_LEN + nlen, xlen, e))
        return ct_fail(err, "%s: zip entry '%.200s': its zip64 sizes are missing or broken", path, e->name);
    *pos += CENTRAL_LEN + nlen + xlen + clen;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const ZipEntry *)a)->name, ((const ZipEntry *)b)->name);
}

int zip_open(const char *path, const void *buf, size_t size, ZipArchive *z, CtErr *err)
{
    memset(z, 0, sizeof *z);
    const unsigned char *b = buf;
    Directory d = {0, 0, 0};
    if (read_directory(path, b, size, &d, err))
        return -1;
    z->buf = b;
    z->size = size;
    z->e = calloc(d.count + 1, sizeof *z->e);
    if (!z->e)
        return ct_fail(err, "%s: out of memory for %llu zip entries", path, (unsigned long long)d.count);
    uint64_t pos = d.offset, limit = d.offset + d.size;
    for (uint64_t i = 0; i < d.count; i++, z->n++) {
        if (read_central(path, b, &pos, limit, &z->e[i], err)) {
            free(z->e[i].name);
            goto fail;
        }
    }
    qsort(z->e, (size_t)z->n, sizeof *z->e, by_name);
    for (int i = 1; i < z->n; i++) {
        if (!strcmp(z->e[i - 1].name, z->e[i].name)) {
            ct_fail(err, "%s: zip entry '%.200s' appears twice", path, z->e[i].name);
            goto fail;
        }
    }
    return 0;
fail:
    zip_close(z);
    return -1;
}

int zip_find(const ZipArchive *z, const char *name)
{
    ZipEntry key = {.name = (char *)name};
    const ZipEntry *e = z->n ? bsearch(&key, z->e, (size_t)z->n, sizeof *z->e, by_name) : NULL;
    return e ? (int)(e - z->e) : -1;
}

int zip_entry_data(ZipArchive *z, int i, const unsigned char **data, uint64_t *size, CtErr *err)
{
    ZipEntry *e = &z->e[i];
    if (e->flags & 1)
        return ct_fail(err, "zip entry '%.200s' is encrypted", e->name);
    if (e->method != 0)
        return ct_fail(err, "zip entry '%.200s' is compressed (method %u%s); torch.save stores every entry as is: "
                       "was the archive repacked?", e->name, e->method, e->method == 8 ? ", deflate" : "");
    if (e->csize != e->size)
        return ct_fail(err, "zip entry '%.200s' is stored but its sizes differ (%llu, %llu)", e->name,
                       (unsigned long long)e->csize, (unsigned long long)e->size);
    size_t nlen = strlen(e->name);
    if (e->local > z->size || z->size - e->local < LOCAL_LEN || rd32(z->buf + e->local) != SIG_LOCAL)
        return ct_fail(err, "zip entry '%.200s': no local header at byte %llu (truncated?)", e->name,
                       (unsigned long long)e->local);
    const unsigned char *l = z->buf + e->local;
    uint64_t start = e->local + LOCAL_LEN + rd16(l + 26) + rd16(l + 28);
    if (rd16(l + 26) != nlen || start > z->size || memcmp(l + LOCAL_LEN, e->name, nlen))
        return ct_fail(err, "zip entry '%.200s': its local header names another entry (corrupt?)", e->name);
    if (e->size > z->size - start)
        return ct_fail(err, "zip entry '%.200s': its %llu bytes run past the end of the archive (truncated?)", e->name,
                       (unsigned long long)e->size);
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION /* mutated entries reach the unpickler, CRC or not */
    if (!e->checked) {
        uint32_t crc = crc32_of(z->buf + start, e->size);
        if (crc != e->crc)
            return ct_fail(err, "zip entry '%.200s': CRC-32 %08x, but the directory says %08x (corrupt?)", e->name,
                           crc, e->crc);
        e->checked = 1;
    }
#endif
    *data = z->buf + start;
    *size = e->size;
    return 0;
}
