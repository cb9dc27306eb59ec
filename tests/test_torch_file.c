/*
 * PyTorch checkpoint files (runtime/torch_file.h) against what the real
 * torch wrote into tests/data/torch/ (tools/make_torch_ckpt.py): every
 * tensor of every readable file, in order, with its dtype, shape and the
 * CRC-32 of its bytes that Python's zlib computed from torch's own
 * contiguous copy; the EMA's tensors; the metadata as Python's str()
 * printed it; each hostile or broken file refused with its reason, and the
 * os.system a hostile pickle asks for never run. Then the same parse from
 * memory, and weights_read telling the formats apart by content.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/torch_file.h"
#include "runtime/weights_file.h"
#include "tests/check.h"

#define MAX_LINES 4096

/* The marker the hostile pickles' os.system would touch. */
static const char pwned[] = "/tmp/ctimm-torch-file-pwned";

typedef struct Line {
    char file[64], kind[8], name[160], dtype[8], shape[48], rest[512];
    unsigned crc;
} Line;

static Line lines[MAX_LINES];
static int nlines;

static void data_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%.900s/torch/%.100s", test_data_dir(), name);
}

static void read_expected(void)
{
    char path[1024];
    data_path(path, sizeof path, "expected.txt");
    char *text = test_read_text(path);
    CHECKF(text != NULL, "cannot read %s", path);
    if (!text)
        return;
    for (char *s = text, *nl; *s; s = nl + 1) {
        nl = strchr(s, '\n');
        CHECK(nl != NULL);
        if (!nl)
            break;
        *nl = 0;
        if (*s == '#')
            continue;
        CHECK(nlines < MAX_LINES);
        Line *l = &lines[nlines++];
        int at = 0;
        CHECK(sscanf(s, "%63s %7s %n", l->file, l->kind, &at) == 2);
        if (!strcmp(l->kind, "sd") || !strcmp(l->kind, "ema")) {
            CHECK(sscanf(s + at, "%159s %7s %47s %x", l->name, l->dtype, l->shape, &l->crc) == 4);
        } else if (!strcmp(l->kind, "meta")) {
            char *key = s + at, *sp = strchr(key, ' ');
            CHECK(sp != NULL);
            *sp = 0;
            snprintf(l->name, sizeof l->name, "%s", key);
            snprintf(l->rest, sizeof l->rest, "%s", sp + 1);
        } else {
            CHECK(!strcmp(l->kind, "refuse"));
            snprintf(l->rest, sizeof l->rest, "%s", s + at);
        }
    }
    free(text);
    CHECK(nlines > 100);
}

static void shape_text(const StTensor *t, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int d = 0; d < t->ndim; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "x" : "", (long long)t->shape[d]);
    if (t->ndim == 0)
        snprintf(buf, n, "-");
}

/* The tensors of f against the expected lines of one part, in order. */
static void check_part(const char *file, const char *kind, const StFile *f)
{
    int i = 0;
    for (int k = 0; k < nlines; k++) {
        const Line *l = &lines[k];
        if (strcmp(l->file, file) || strcmp(l->kind, kind))
            continue;
        CHECKF(i < f->ntensors, "%s %s: only %d tensors", file, kind, f->ntensors);
        if (i >= f->ntensors)
            return;
        const StTensor *t = &f->tensors[i++];
        char shape[64];
        shape_text(t, shape, sizeof shape);
        CHECKF(!strcmp(t->name, l->name), "%s %s tensor %d: '%s', want '%s'", file, kind, i - 1, t->name, l->name);
        CHECKF(!strcmp(ct_dtype_st_name(t->dtype), l->dtype), "%s '%s': %s, want %s", file, l->name,
               ct_dtype_st_name(t->dtype), l->dtype);
        CHECKF(!strcmp(shape, l->shape), "%s '%s': shape %s, want %s", file, l->name, shape, l->shape);
        CHECKF(st_numel(t) * (int64_t)ct_dtype_size(t->dtype) == (int64_t)t->nbytes, "%s '%s'", file, l->name);
        unsigned crc = t->nbytes ? test_crc32(t->data, t->nbytes) : 0;
        CHECKF(crc == l->crc, "%s '%s': bytes of CRC %08x, want %08x", file, l->name, crc, l->crc);
    }
    CHECKF(i == f->ntensors, "%s %s: %d tensors, want %d", file, kind, f->ntensors, i);
}

static void check_meta(const char *file, const StFile *f)
{
    int i = 0;
    for (int k = 0; k < nlines; k++) {
        const Line *l = &lines[k];
        if (strcmp(l->file, file) || strcmp(l->kind, "meta"))
            continue;
        CHECKF(i < f->nmeta && !strcmp(f->meta_keys[i], l->name), "%s: metadata %d is '%s', want '%s'", file, i,
               i < f->nmeta ? f->meta_keys[i] : "(none)", l->name);
        const char *v = st_meta(f, l->name);
        CHECKF(v && !strcmp(v, l->rest), "%s: metadata '%s' = '%s', want '%s'", file, l->name, v ? v : "(none)",
               l->rest);
        i++;
    }
    CHECKF(i == f->nmeta, "%s: %d metadata strings, want %d", file, f->nmeta, i);
}

static int seen(const char *file, int upto)
{
    for (int k = 0; k < upto; k++)
        if (!strcmp(lines[k].file, file))
            return 1;
    return 0;
}

static int count(const char *file, const char *kind)
{
    int n = 0;
    for (int k = 0; k < nlines; k++)
        n += !strcmp(lines[k].file, file) && !strcmp(lines[k].kind, kind);
    return n;
}

/* Every file expected.txt names, read as it says: its state_dict, and with
 * use_ema its EMA's (the state_dict again when it has none). */
static void check_files(void)
{
    int readable = 0, refused = 0;
    for (int k = 0; k < nlines; k++) {
        const Line *l = &lines[k];
        if (seen(l->file, k))
            continue;
        char path[1024];
        data_path(path, sizeof path, l->file);
        StFile f;
        CtErr err = {{0}};
        int from_ema = -1;
        unlink(pwned);
        int rc = torch_read(path, 0, &f, &from_ema, &err);
        if (!strcmp(l->kind, "refuse")) {
            refused++;
            CHECKF(rc == -1, "%s should be refused (%s)", l->file, l->rest);
            CHECKF(strstr(err.msg, l->rest) != NULL, "%s: message '%s' lacks '%s'", l->file, err.msg, l->rest);
            CHECKF(strstr(err.msg, path) != NULL, "%s: message '%s' lacks the path", l->file, err.msg);
            CHECK(!f.tensors && !f.ntensors && !f.nmeta && !f.meta_keys);
            CHECKF(access(pwned, F_OK) != 0, "%s ran its os.system", l->file);
            continue;
        }
        readable++;
        CHECKF(rc == 0 && from_ema == 0, "%s: %s", l->file, err.msg);
        check_part(l->file, "sd", &f);
        check_meta(l->file, &f);
        st_free(&f);
        int ema = count(l->file, "ema") > 0;
        CHECKF(torch_read(path, 1, &f, &from_ema, &err) == 0 && from_ema == ema, "%s: %s", l->file, err.msg);
        check_part(l->file, ema ? "ema" : "sd", &f);
        check_meta(l->file, &f);
        st_free(&f);
    }
    CHECK(readable >= 7 && refused >= 15);
}

/* torch_parse of the bytes equals torch_read of the file; every prefix of
 * the file is refused, never read past. */
static void check_parse_from_memory(void)
{
    char path[1024];
    data_path(path, sizeof path, "train.pth.tar");
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    if (!fp)
        return;
    unsigned char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, fp);
    fclose(fp);
    StFile a, b;
    CtErr err = {{0}};
    CHECKF(torch_parse("mem.pth.tar", buf, n, 1, &a, NULL, &err) == 0, "%s", err.msg);
    CHECKF(torch_read(path, 1, &b, NULL, &err) == 0, "%s", err.msg);
    CHECK(a.ntensors == b.ntensors && a.ntensors > 0 && a.nmeta == b.nmeta);
    for (int i = 0; i < a.ntensors && i < b.ntensors; i++)
        CHECK(!strcmp(a.tensors[i].name, b.tensors[i].name) && a.tensors[i].nbytes == b.tensors[i].nbytes &&
              !memcmp(a.tensors[i].data, b.tensors[i].data, a.tensors[i].nbytes));
    st_free(&a);
    st_free(&b);
    for (size_t cut = 0; cut < n; cut += 97) {
        unsigned char *p = malloc(cut ? cut : 1);
        memcpy(p, buf, cut);
        CHECKF(torch_parse("cut.pth.tar", p, cut, 1, &a, NULL, &err) == -1, "a %zu-byte prefix was read", cut);
        CHECK(!a.tensors && err.msg[0]);
        free(p);
    }
    free(buf);
}

/* weights_read goes by content: a legacy torch file named .safetensors, and a safetensors file. */
static void check_weights_read(void)
{
    char src[1024], dst[] = "/tmp/ctimm-torch-file-XXXXXX", st[1024];
    data_path(src, sizeof src, "dtypes_legacy.pth");
    snprintf(st, sizeof st, "%s/test_resnet.safetensors", test_data_dir());
    int fd = mkstemp(dst);
    CHECK(fd >= 0);
    char *bytes = test_read_text(src);
    FILE *in = fopen(src, "rb");
    fseek(in, 0, SEEK_END);
    long n = ftell(in);
    fclose(in);
    CHECK(write(fd, bytes, (size_t)n) == n);
    close(fd);
    free(bytes);
    char named[1100];
    snprintf(named, sizeof named, "%s.safetensors", dst);
    CHECK(rename(dst, named) == 0);
    CHECK(weights_is_torch(named) && !weights_is_torch(st) && !weights_is_torch("/nonexistent"));
    StFile f;
    CtErr err = {{0}};
    int from_ema = -1;
    CHECKF(weights_read(named, 1, &f, &from_ema, &err) == 0, "%s", err.msg);
    CHECK(st_find(&f, "shared_b") && from_ema == 0);
    st_free(&f);
    from_ema = -1;
    CHECKF(weights_read(st, 1, &f, &from_ema, &err) == 0, "%s", err.msg);
    CHECK(st_find(&f, "input") && from_ema == 0);
    st_free(&f);
    unlink(named);
}

int main(void)
{
    read_expected();
    check_files();
    check_parse_from_memory();
    check_weights_read();
    return check_done("test_torch_file");
}
