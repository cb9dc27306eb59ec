/*
 * A zip archive's entries, read from its bytes in memory: what torch.save
 * writes (its zip format since torch 1.6: every entry stored, none
 * compressed). The central directory is the index; zip64 sizes and offsets
 * (archives over 4 GiB) are read. An entry's bytes are handed out only
 * after its local header agrees with the directory, its span lies inside
 * the archive, it is stored (a compressed or encrypted entry is refused by
 * name) and its CRC-32 matches (not checked in a fuzzing build, so that
 * mutated entries reach their reader).
 */
#ifndef CTIMM_ZIP_ARCHIVE_H
#define CTIMM_ZIP_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>

#include "ir/status.h"

typedef struct ZipEntry {
    char *name;
    uint64_t local;  /* offset of its local header */
    uint64_t size;   /* uncompressed */
    uint64_t csize;  /* as stored */
    uint32_t crc;
    uint16_t method, flags;
    int checked;     /* its bytes were checked once already */
} ZipEntry;

/* Entries sorted by name; buf is borrowed and must outlive the archive. */
typedef struct ZipArchive {
    const unsigned char *buf;
    size_t size;
    ZipEntry *e;
    int n;
} ZipArchive;

/* Reads the central directory of buf; path only names the file in messages.
 * A duplicate name is refused. */
int zip_open(const char *path, const void *buf, size_t size, ZipArchive *z, CtErr *err);
void zip_close(ZipArchive *z);
/* The index of the entry called name, or -1. */
int zip_find(const ZipArchive *z, const char *name);
/* The bytes of entry i, checked as the header says (the first time only). */
int zip_entry_data(ZipArchive *z, int i, const unsigned char **data, uint64_t *size, CtErr *err);

#endif
