/*
 * safetensors: write->read round trip over several dtypes (scalar, empty
 * tensor, metadata), the reference file tests/data/test_resnet.safetensors,
 * and hand-crafted broken files that st_read must refuse with a message
 * naming the offending tensor or the reason; the same parse from memory
 * (st_parse). Scratch files live in a fresh directory under /tmp, removed
 * at the end.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/safetensors.h"
#include "tests/check.h"

static char tmpdir[64];

static void tmp_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* Counts leftover "<x>.tmp.<pid>" files from st_write in the scratch dir. */
static int count_temp_files(void)
{
    int n = 0;
    DIR *d = opendir(tmpdir);
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp."))
            n++;
    closedir(d);
    return n;
}

/* Writes a raw safetensors file: declared header length, header text, then
 * ndata zero bytes. */
static void write_raw(const char *path, uint64_t declared_len, const char *header, size_t ndata)
{
    FILE *fp = fopen(path, "wb");
    CHECKF(fp != NULL, "cannot create %s", path);
    if (!fp)
        return;
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)(declared_len >> (8 * i));
    fwrite(len, 1, 8, fp);
    fwrite(header, 1, strlen(header), fp);
    for (size_t i = 0; i < ndata; i++)
        fputc(0, fp);
    fclose(fp);
}

/* Expects st_read of path to fail, leave out empty, and mention want. */
static void expect_read_fails(const char *path, const char *want)
{
    StFile f;
    CtErr err = {{0}};
    int rc = st_read(path, &f, &err);
    CHECKF(rc == -1, "st_read(%s) should fail (expected '%s')", path, want);
    CHECKF(strstr(err.msg, want) != NULL, "message '%s' lacks '%s'", err.msg, want);
    CHECKF(strstr(err.msg, path) != NULL, "message '%s' lacks the file name", err.msg);
    CHECK(f.ntensors == 0 && f.tensors == NULL && f.nmeta == 0);
    st_free(&f);
}

/* Writes a crafted header with a correct length and expects st_read to fail. */
static void expect_header_fails(const char *name, const char *header, size_t ndata,
                                const char *want)
{
    char path[256];
    tmp_path(path, sizeof path, name);
    write_raw(path, strlen(header), header, ndata);
    expect_read_fails(path, want);
    remove(path);
}

static void check_tensor(const StFile *f, const char *name, CtDType dtype, int ndim,
                         const int64_t *shape, const void *data, size_t nbytes)
{
    const StTensor *t = st_find(f, name);
    CHECKF(t != NULL, "tensor %s missing", name);
    if (!t)
        return;
    CHECKF(t->dtype == dtype, "%s dtype %d", name, (int)t->dtype);
    CHECKF(t->ndim == ndim, "%s ndim %d", name, t->ndim);
    for (int i = 0; i < ndim && i < t->ndim; i++)
        CHECKF(t->shape[i] == shape[i], "%s shape[%d] = %lld", name, i, (long long)t->shape[i]);
    CHECKF(t->nbytes == nbytes, "%s nbytes %zu", name, t->nbytes);
    CHECKF(t->data != NULL && (uintptr_t)t->data % 8 == 0, "%s data not 8-aligned", name);
    if (t->nbytes == nbytes && nbytes)
        CHECKF(memcmp(t->data, data, nbytes) == 0, "%s data differs", name);
}

/* Reads the header length of a file, or 0. */
static uint64_t file_header_len(const char *path, long *file_size)
{
    unsigned char b[8] = {0};
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 0;
    size_t got = fread(b, 1, 8, fp);
    fseek(fp, 0, SEEK_END);
    *file_size = ftell(fp);
    fclose(fp);
    uint64_t n = 0;
    for (int i = 7; i >= 0 && got == 8; i--)
        n = n << 8 | b[i];
    return n;
}

static void test_round_trip(void)
{
    float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-7f, -1e7f};
    double f64[4] = {3.141592653589793, -1e300, 2.5e-310, 0.0};
    int64_t i64_scalar = -9007199254740993LL;
    int64_t i64[3] = {INT64_MIN, 0, INT64_MAX};
    uint8_t u8[5] = {0, 1, 127, 128, 255};
    StTensor ts[] = {
        {"weight.f32", CT_F32, 2, {2, 3}, sizeof f32, f32},
        {"x.f64", CT_F64, 1, {4}, sizeof f64, f64},
        {"step", CT_I64, 0, {0}, sizeof i64_scalar, &i64_scalar},
        {"ids", CT_I64, 3, {1, 3, 1}, sizeof i64, i64},
        {"bytes", CT_U8, 1, {5}, sizeof u8, u8},
        {"empty", CT_F32, 2, {0, 3}, 0, NULL},
        {"odd \"name\"/\\ é", CT_U8, 1, {1}, 1, u8 + 4},
    };
    int n = (int)(sizeof ts / sizeof ts[0]);
    const char *keys[] = {"model", "note"};
    const char *vals[] = {"resnet", "line\nbreak \"quoted\""};
    char path[256];
    tmp_path(path, sizeof path, "rt.safetensors");
    CtErr err = {{0}};

    CHECKF(st_write(path, ts, n, keys, vals, 2, &err) == 0, "st_write: %s", err.msg);
    CHECK(count_temp_files() == 0);
    long size = 0;
    uint64_t hlen = file_header_len(path, &size);
    CHECKF(hlen % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hlen);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += ts[i].nbytes;
    CHECKF((uint64_t)size == 8 + hlen + total, "file size %ld, offsets not consecutive?", size);

    StFile f;
    CHECKF(st_read(path, &f, &err) == 0, "st_read: %s", err.msg);
    CHECK(f.ntensors == n);
    for (int i = 0; i < n; i++)
        check_tensor(&f, ts[i].name, ts[i].dtype, ts[i].ndim, ts[i].shape, ts[i].data,
                     ts[i].nbytes);
    /* The order of the file is the order given to st_write. */
    for (int i = 0; i < n && i < f.ntensors; i++)
        CHECKF(strcmp(f.tensors[i].name, ts[i].name) == 0, "tensor %d is %s", i, f.tensors[i].name);
    const StTensor *step = st_find(&f, "step");
    CHECK(step && st_numel(step) == 1 && *(const int64_t *)step->data == i64_scalar);
    const StTensor *empty = st_find(&f, "empty");
    CHECK(empty && st_numel(empty) == 0);
    const StTensor *x = st_find(&f, "x.f64");
    CHECK(x && ((const double *)x->data)[2] == 2.5e-310);
    CHECK(f.nmeta == 2);
    CHECK(st_meta(&f, "model") && strcmp(st_meta(&f, "model"), "resnet") == 0);
    CHECK(st_meta(&f, "note") && strcmp(st_meta(&f, "note"), vals[1]) == 0);
    CHECK(st_meta(&f, "absent") == NULL);
    CHECK(st_find(&f, "absent") == NULL);
    CHECK(st_find(&f, "__metadata__") == NULL);
    st_free(&f);
    CHECK(f.ntensors == 0 && f.tensors == NULL);
    st_free(&f); /* freeing twice is harmless: st_free empties the struct */

    /* No metadata: none written, none read; overwriting an existing file. */
    CHECKF(st_write(path, ts, 2, NULL, NULL, 0, &err) == 0, "st_write: %s", err.msg);
    CHECKF(st_read(path, &f, &err) == 0, "st_read: %s", err.msg);
    CHECK(f.ntensors == 2 && f.nmeta == 0 && st_meta(&f, "model") == NULL);
    st_free(&f);

    /* A file with no tensors at all. */
    char empty_path[256];
    tmp_path(empty_path, sizeof empty_path, "none.safetensors");
    CHECKF(st_write(empty_path, NULL, 0, NULL, NULL, 0, &err) == 0, "st_write: %s", err.msg);
    CHECKF(st_read(empty_path, &f, &err) == 0, "st_read: %s", err.msg);
    CHECK(f.ntensors == 0 && f.nmeta == 0);
    st_free(&f);
    remove(empty_path);

    /* A refused write leaves the previous file untouched and no temp file. */
    StTensor bad = {"bad_nbytes", CT_F32, 1, {4}, 8, f32};
    CHECK(st_write(path, &bad, 1, NULL, NULL, 0, &err) == -1);
    CHECKF(strstr(err.msg, "bad_nbytes") != NULL, "message: %s", err.msg);
    StTensor dup[2] = {ts[0], ts[0]};
    CHECK(st_write(path, dup, 2, NULL, NULL, 0, &err) == -1);
    CHECKF(strstr(err.msg, "duplicate") != NULL, "message: %s", err.msg);
    CHECKF(st_read(path, &f, &err) == 0, "st_read: %s", err.msg);
    CHECK(f.ntensors == 2);
    st_free(&f);
    CHECK(count_temp_files() == 0);

    /* An unwritable destination fails cleanly. */
    char nodir[256];
    tmp_path(nodir, sizeof nodir, "no/such/dir.safetensors");
    CHECK(st_write(nodir, ts, 1, NULL, NULL, 0, &err) == -1);
    CHECKF(strstr(err.msg, "no/such/dir") != NULL, "message: %s", err.msg);
    CHECK(count_temp_files() == 0);

    /* A rename that fails after the temp file was written (the destination
     * is a directory) removes the temp file. */
    char dirdest[256];
    tmp_path(dirdest, sizeof dirdest, "a_directory");
    CHECK(mkdir(dirdest, 0700) == 0);
    CHECK(st_write(dirdest, ts, 1, NULL, NULL, 0, &err) == -1);
    CHECKF(strstr(err.msg, "rename") != NULL, "message: %s", err.msg);
    CHECK(count_temp_files() == 0);
    CHECK(rmdir(dirdest) == 0);
    remove(path);
}

static void test_reference_file(void)
{
    const char *dir = getenv("CTIMM_TEST_DATA");
    CHECKF(dir != NULL, "CTIMM_TEST_DATA is not set");
    if (!dir)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/test_resnet.safetensors", dir);
    StFile f;
    CtErr err = {{0}};
    CHECKF(st_read(path, &f, &err) == 0, "st_read: %s", err.msg);
    CHECKF(f.ntensors == 283, "%d tensors", f.ntensors);
    const StTensor *in = st_find(&f, "input");
    CHECK(in && in->dtype == CT_F32 && in->ndim == 4 && in->shape[0] == 2 && in->shape[1] == 3 &&
          in->shape[2] == 160 && in->shape[3] == 160 && in->nbytes == 2 * 3 * 160 * 160 * 4);
    const StTensor *tg = st_find(&f, "target");
    CHECK(tg && tg->dtype == CT_I64 && tg->ndim == 1 && tg->shape[0] == 2);
    if (tg && tg->dtype == CT_I64 && tg->nbytes == 16) {
        const int64_t *lab = tg->data;
        CHECKF(lab[0] >= 0 && lab[0] < 1000 && lab[1] >= 0 && lab[1] < 1000, "targets %lld %lld",
               (long long)lab[0], (long long)lab[1]);
    }
    const StTensor *loss = st_find(&f, "loss.train");
    CHECK(loss && loss->ndim == 0 && st_numel(loss) == 1);
    const char *model = st_meta(&f, "model");
    CHECK(model && strcmp(model, "test_resnet") == 0);
    st_free(&f);
}

static void test_bad_files(void)
{
    char path[256];

    /* Truncated files: cut inside the length, and inside the last tensor. */
    tmp_path(path, sizeof path, "trunc.safetensors");
    float v[4] = {1, 2, 3, 4};
    StTensor ts[2] = {{"first", CT_F32, 1, {2}, 8, v}, {"last_tensor", CT_F32, 1, {2}, 8, v + 2}};
    CtErr err = {{0}};
    CHECKF(st_write(path, ts, 2, NULL, NULL, 0, &err) == 0, "st_write: %s", err.msg);
    long size = 0;
    file_header_len(path, &size);
    CHECK(truncate(path, size - 4) == 0);
    expect_read_fails(path, "last_tensor");
    CHECK(truncate(path, 5) == 0);
    expect_read_fails(path, "too short");
    remove(path);

    /* Header length beyond the file, and beyond the sanity limit. */
    tmp_path(path, sizeof path, "hlen.safetensors");
    write_raw(path, 1000, "{}", 0);
    expect_read_fails(path, "exceeds");
    write_raw(path, (uint64_t)200 << 20, "{}", 0);
    expect_read_fails(path, "limit");
    write_raw(path, UINT64_MAX, "{}", 0);
    expect_read_fails(path, "limit");
    remove(path);

    tmp_path(path, sizeof path, "missing.safetensors");
    expect_read_fails(path, "cannot open");

    expect_header_fails("dtype.st", "{\"bad_dtype_t\":{\"dtype\":\"Q7\",\"shape\":[1],"
                        "\"data_offsets\":[0,4]}}", 4, "bad_dtype_t");
    expect_header_fails("dtype2.st", "{\"no_dtype_t\":{\"shape\":[1],\"data_offsets\":[0,4]}}",
                        4, "no_dtype_t");
    expect_header_fails("range.st", "{\"ok\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":"
                        "[0,4]},\"far_t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":"
                        "[4,8]}}", 6, "far_t");
    expect_header_fails("order.st", "{\"backwards_t\":{\"dtype\":\"U8\",\"shape\":[0],"
                        "\"data_offsets\":[4,0]}}", 4, "backwards_t");
    expect_header_fails("size.st", "{\"mismatch_t\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                        "\"data_offsets\":[0,12]}}", 16, "mismatch_t");
    expect_header_fails("size2.st", "{\"scalar_t\":{\"dtype\":\"F64\",\"shape\":[],"
                        "\"data_offsets\":[0,0]}}", 16, "scalar_t");
    expect_header_fails("json.st", "{\"a\":{\"dtype\":\"F32\",", 0, "JSON");
    expect_header_fails("json2.st", "{} trailing", 0, "trailing");
    expect_header_fails("notobj.st", "[1,2]", 0, "not a JSON object");
    expect_header_fails("dup.st", "{\"dup_t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":"
                        "[0,1]},\"dup_t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":"
                        "[1,2]}}", 2, "dup_t");
    expect_header_fails("overlap.st", "{\"a_t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":"
                        "[0,4]},\"b_t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":"
                        "[3,5]}}", 8, "overlaps");
    expect_header_fails("negdim.st", "{\"neg_t\":{\"dtype\":\"U8\",\"shape\":[-1],"
                        "\"data_offsets\":[0,0]}}", 0, "neg_t");
    expect_header_fails("fracdim.st", "{\"frac_t\":{\"dtype\":\"U8\",\"shape\":[1.5],"
                        "\"data_offsets\":[0,0]}}", 0, "frac_t");
    expect_header_fails("ndim.st", "{\"deep_t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1],"
                        "\"data_offsets\":[0,1]}}", 1, "deep_t");
    expect_header_fails("huge.st", "{\"huge_t\":{\"dtype\":\"F64\",\"shape\":[4294967296,"
                        "4294967296],\"data_offsets\":[0,0]}}", 0, "huge_t");
    expect_header_fails("offs.st", "{\"offs_t\":{\"dtype\":\"U8\",\"shape\":[1],"
                        "\"data_offsets\":[0]}}", 1, "offs_t");
    expect_header_fails("meta.st", "{\"__metadata__\":{\"meta_key\":3}}", 0, "meta_key");
    expect_header_fails("meta2.st", "{\"__metadata__\":[\"x\"]}", 0, "__metadata__");
    expect_header_fails("meta3.st", "{\"__metadata__\":{\"b\":\"1\",\"dup_key\":\"2\",\"a\":\"3\",\"dup_key\":\"4\"}}",
                        0, "metadata 'dup_key': duplicate key");
    expect_header_fails("entry.st", "{\"entry_t\":5}", 0, "entry_t");
    CHECK(count_temp_files() == 0);
}

/* st_parse reads a file's bytes from memory (the fuzz target's way in),
 * naming them as it is told. */
static void test_parse_memory(void)
{
    static const char header[] = "{\"m\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    unsigned char buf[8 + sizeof header + 1] = {sizeof header - 1};
    memcpy(buf + 8, header, sizeof header - 1);
    buf[8 + sizeof header - 1] = 7;
    buf[8 + sizeof header] = 9;
    StFile f;
    CtErr err = {{0}};
    CHECKF(st_parse("mem", buf, sizeof buf, &f, &err) == 0, "st_parse: %s", err.msg);
    const StTensor *t = st_find(&f, "m");
    CHECK(t && t->nbytes == 2 && ((unsigned char *)t->data)[0] == 7 && ((unsigned char *)t->data)[1] == 9);
    st_free(&f);
    CHECK(st_parse("mem", buf, sizeof buf - 1, &f, &err) != 0 && strstr(err.msg, "mem: tensor 'm'"));
    CHECK(f.ntensors == 0 && f.tensors == NULL);
}

/* A header of 200k metadata keys reads in well under a second (ctest's
 * TIMEOUT): comparing each key with all before it took a minute. */
static void test_many_metadata_keys(void)
{
    enum { N = 200000 };
    size_t cap = 8 + 32 + (size_t)N * 16;
    char *buf = malloc(cap);
    CT_ASSERT(buf != NULL);
    size_t at = 8 + (size_t)sprintf(buf + 8, "{\"__metadata__\":{");
    for (int i = 0; i < N; i++)
        at += (size_t)sprintf(buf + at, "%s\"k%d\":\"\"", i ? "," : "", i);
    at += (size_t)sprintf(buf + at, "}}");
    for (int i = 0; i < 8; i++)
        buf[i] = (char)((at - 8) >> (8 * i));
    StFile f;
    CtErr err = {{0}};
    CHECKF(st_parse("many", buf, at, &f, &err) == 0, "st_parse: %s", err.msg);
    CHECK(f.nmeta == N && st_meta(&f, "k199999") != NULL);
    st_free(&f);
    free(buf);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ctimm_test_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_reference_file();
    test_bad_files();
    test_parse_memory();
    test_many_metadata_keys();
    CHECKF(rmdir(tmpdir) == 0, "scratch dir %s not empty", tmpdir);
    return check_done("test_safetensors");
}
