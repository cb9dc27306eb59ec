/*
 * Image decoding and resizing against Pillow 9.4 (tests/data/images, made by
 * tools/make_image_fixtures.py):
 *   - every JPEG and PNG fixture, full size and (JPEG) DCT-scaled by 2/4/8
 *     against Image.draft, must equal Pillow's convert('RGB') byte for byte;
 *   - image_resize against Image.resize(size, filter, box) for NEAREST,
 *     BILINEAR and BICUBIC over up/down scales and float boxes: byte for byte;
 *   - broken inputs (truncated, garbage, empty, bad CRC, huge sizes, every
 *     prefix and seeded byte flips of good files) fail with a message;
 *   - four threads decoding at once agree with one;
 *   - image_decode_region (the crop-only JPEG decode) equals the same
 *     rectangle of image_decode on every fixture and scale, random boxes;
 *   - image_to_gray of the decoded RGB, in each channel, equals Pillow's
 *     convert('L') of every mode it decodes (tests/data/gray, made by
 *     tools/make_gray_fixtures.py) byte for byte.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/image.h"
#include "tests/check.h"

static const char *data_dir;

static uint8_t *read_file(const char *name, size_t *n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/images/%s", data_dir, name);
    uint8_t *buf = (uint8_t *)test_read_file(path, n);
    CHECKF(buf != NULL, "cannot read %s", path);
    return buf;
}

/* Byte-exact comparison with a summary: how many bytes differ, by how much. */
static void check_pixels(const char *what, const CtImage *img, int w, int h, const uint8_t *want, size_t want_n)
{
    CHECKF(img->w == w && img->h == h, "%s: got %dx%d, want %dx%d", what, img->w, img->h, w, h);
    if (img->w != w || img->h != h || want_n != (size_t)w * h * 3)
        return;
    size_t diff = 0;
    int maxd = 0;
    for (size_t i = 0; i < want_n; i++) {
        int d = abs((int)img->px[i] - (int)want[i]);
        diff += d != 0;
        maxd = d > maxd ? d : maxd;
    }
    CHECKF(diff == 0, "%s: %zu of %zu bytes differ from Pillow, max |diff| %d", what, diff, want_n, maxd);
}

static void test_decode_fixtures(void)
{
    size_t n;
    char *manifest = (char *)read_file("decode.txt", &n);
    if (!manifest)
        return;
    manifest = realloc(manifest, n + 1);
    manifest[n] = 0;
    int cases = 0;
    char *save = NULL;
    for (char *line = strtok_r(manifest, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char input[128], expect[160];
        int shrink, w, h;
        if (sscanf(line, "%127s %d %d %d %159s", input, &shrink, &w, &h, expect) != 5) {
            CHECKF(0, "bad manifest line: %s", line);
            continue;
        }
        size_t dn, en;
        uint8_t *data = read_file(input, &dn), *want = read_file(expect, &en);
        CtImage img;
        CtErr err = {""};
        char what[200];
        snprintf(what, sizeof what, "%s at 1/%d", input, shrink);
        int rc = image_decode(data, dn, shrink, &img, &err);
        CHECKF(rc == 0, "%s: %s", what, err.msg);
        if (rc == 0)
            check_pixels(what, &img, w, h, want, en);
        image_free(&img);
        if (shrink == 1) {
            int pw = 0, ph = 0;
            CHECKF(image_probe(data, dn, &pw, &ph, &err) == 0 && pw == w && ph == h, "probe %s: %dx%d %s", input,
                   pw, ph, err.msg);
        }
        free(data);
        free(want);
        cases++;
    }
    CHECKF(cases >= 40, "only %d decode cases", cases);
    printf("decode: %d fixture/scale cases compared with Pillow\n", cases);
    free(manifest);
}

static void test_gray_fixtures(void)
{
    size_t n;
    char *manifest = (char *)read_file("../gray/decode.txt", &n);
    if (!manifest)
        return;
    manifest = realloc(manifest, n + 1);
    manifest[n] = 0;
    int cases = 0;
    char *save = NULL;
    for (char *line = strtok_r(manifest, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char input[128], expect[160], path[200];
        int w, h;
        if (line[0] == '#')
            continue;
        if (sscanf(line, "%127s %d %d %159s", input, &w, &h, expect) != 4) {
            CHECKF(0, "bad manifest line: %s", line);
            continue;
        }
        size_t dn, en;
        snprintf(path, sizeof path, "../gray/%s", expect);
        uint8_t *data = read_file(input, &dn), *want = read_file(path, &en);
        CtImage img;
        CtErr err = {""};
        int rc = image_decode(data, dn, 1, &img, &err);
        CHECKF(rc == 0 && img.w == w && img.h == h && en == (size_t)w * h, "%s: %s", input, err.msg);
        if (rc == 0 && img.w == w && img.h == h && en == (size_t)w * h) {
            image_to_gray(&img);
            size_t bad = 0;
            for (size_t i = 0; i < en; i++)
                bad += img.px[3 * i] != want[i] || img.px[3 * i + 1] != want[i] || img.px[3 * i + 2] != want[i];
            CHECKF(bad == 0, "%s: %zu of %zu pixels differ from Pillow's convert('L')", input, bad, en);
        }
        if (rc == 0)
            image_free(&img);
        free(data);
        free(want);
        cases++;
    }
    CHECKF(cases >= 9, "only %d gray cases", cases);
    printf("gray: %d decoded modes made 'L' as Pillow does\n", cases);
    free(manifest);
}

static void test_resize_fixtures(void)
{
    size_t n, sn;
    uint8_t *png = read_file("resize_src.png", &sn);
    char *manifest = (char *)read_file("resize.txt", &n);
    CtImage src;
    CtErr err = {""};
    if (!png || !manifest || image_decode(png, sn, 1, &src, &err)) {
        CHECKF(0, "resize source: %s", err.msg);
        free(png);
        free(manifest);
        return;
    }
    manifest = realloc(manifest, n + 1);
    manifest[n] = 0;
    int cases = 0;
    char *save = NULL;
    for (char *line = strtok_r(manifest, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int id, w, h;
        char filter[16];
        CtBox box;
        if (sscanf(line, "%d %15s %lf %lf %lf %lf %d %d", &id, filter, &box.x0, &box.y0, &box.x1, &box.y1, &w, &h) !=
            8) {
            CHECKF(0, "bad manifest line: %s", line);
            continue;
        }
        CtInterp interp = !strcmp(filter, "nearest")    ? CT_INTERP_NEAREST
                          : !strcmp(filter, "bilinear") ? CT_INTERP_BILINEAR
                                                        : CT_INTERP_BICUBIC;
        char name[64], what[256];
        snprintf(name, sizeof name, "resize_%d.rgb", id);
        snprintf(what, sizeof what, "resize %s box (%g %g %g %g) -> %dx%d", filter, box.x0, box.y0, box.x1, box.y1, w,
                 h);
        size_t en;
        uint8_t *want = read_file(name, &en);
        CtImage out;
        int rc = image_resize(&src, box, w, h, interp, &out, &err);
        CHECKF(rc == 0, "%s: %s", what, err.msg);
        if (rc == 0)
            check_pixels(what, &out, w, h, want, en);
        image_free(&out);
        free(want);
        cases++;
    }
    CHECKF(cases == 45, "%d resize cases", cases);
    printf("resize: %d filter/box/size cases compared with Pillow\n", cases);
    image_free(&src);
    free(png);
    free(manifest);
}

static void expect_fail(const char *what, const uint8_t *data, size_t n, int shrink, const char *needle)
{
    CtImage img = {7, 7, (uint8_t *)&img, (uint8_t *)&img};
    CtErr err = {""};
    int rc = image_decode(data, n, shrink, &img, &err);
    CHECKF(rc == -1, "%s: decoded", what);
    CHECKF(img.px == NULL && img.alpha == NULL && img.w == 0 && img.h == 0, "%s: output not cleared", what);
    CHECKF(err.msg[0] != 0, "%s: no message", what);
    CHECKF(!needle || strstr(err.msg, needle), "%s: message \"%s\" lacks \"%s\"", what, err.msg, needle);
    if (rc == 0)
        image_free(&img);
    if (getenv("CTIMM_TEST_VERBOSE"))
        printf("%-22s -> %s\n", what, err.msg);
}

static void test_bad_inputs(void)
{
    static const struct {
        const char *file, *needle;
    } bad[] = {
        {"bad_trunc.jpg", "truncated"},    {"bad_trunc_prog.jpg", "truncated"},
        {"bad_trunc.png", "truncated"},    {"bad_garbage.bin", "not a JPEG or PNG"},
        {"bad_header_only.jpg", "JPEG"},   {"bad_crc.png", "CRC"},
        {"bad_huge.jpg", "larger than"},   {"bad_huge.png", "larger than"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n;
        uint8_t *data = read_file(bad[i].file, &n);
        expect_fail(bad[i].file, data, n, 1, bad[i].needle);
        expect_fail(bad[i].file, data, n, 2, bad[i].needle);
        free(data);
    }
    size_t n;
    uint8_t *huge = read_file("bad_huge.jpg", &n);
    int w, h;
    CtErr err;
    CHECK(image_probe(huge, n, &w, &h, &err) == -1 && strstr(err.msg, "larger than"));
    free(huge);
    uint8_t *huge_png = read_file("bad_huge.png", &n);
    CHECK(image_probe(huge_png, n, &w, &h, &err) == -1 && strstr(err.msg, "larger than"));
    free(huge_png);

    expect_fail("empty", (const uint8_t *)"", 0, 1, "empty");
    expect_fail("NULL, 0 bytes", NULL, 0, 1, "empty");
    CHECK(image_probe(NULL, 0, &w, &h, &err) == -1 && strstr(err.msg, "empty"));
    uint8_t *jpg = read_file("rgb.jpg", &n);
    expect_fail("shrink 3", jpg, n, 3, "shrink");
    free(jpg);
}

/* Every prefix of a few files, and seeded random byte flips: -1 or a valid
 * image, never a crash or a leak (the sanitizer and valgrind runs see those). */
static void test_corruption(void)
{
    static const char *files[] = {"rgb.jpg", "prog.jpg", "cmyk.jpg", "rgb.png", "rgb_adam7.png", "pal2_short_adam7.png"};
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        size_t n;
        uint8_t *data = read_file(files[f], &n);
        if (!data)
            continue;
        int is_jpeg = data[0] == 0xFF;
        for (size_t len = 0; len < n; len++) {
            CtImage img;
            CtErr err;
            int rc = image_decode(data, len, 1, &img, &err);
            /* A JPEG needs all of its bytes; a PNG all but IEND (Pillow stops
             * reading at the last row too). */
            if (is_jpeg || len < n - 12)
                CHECKF(rc == -1, "%s: the %zu-byte prefix decoded", files[f], len);
            image_free(&img);
        }
        uint8_t *mut = malloc(n);
        for (int trial = 0; trial < 300; trial++) {
            memcpy(mut, data, n);
            for (int flips = 1 + trial % 4; flips > 0; flips--) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                mut[(seed >> 33) % n] ^= (uint8_t)(1u << ((seed >> 20) & 7));
            }
            CtImage img;
            CtErr err;
            for (int shrink = 1; shrink <= 2; shrink++) {
                if (image_decode(mut, n, shrink, &img, &err) == 0)
                    CHECK(img.w > 0 && img.h > 0 && img.px);
                image_free(&img);
            }
        }
        free(mut);
        free(data);
    }
}

static void test_resize_args(void)
{
    uint8_t px[4 * 3 * 3] = {0};
    CtImage src = {4, 3, px, NULL}, out;
    CtErr err;
    CHECK(image_resize(&src, (CtBox){0, 0, 5, 3}, 2, 2, CT_INTERP_BILINEAR, &out, &err) == -1 && out.px == NULL);
    CHECK(image_resize(&src, (CtBox){-1, 0, 4, 3}, 2, 2, CT_INTERP_BILINEAR, &out, &err) == -1);
    CHECK(image_resize(&src, (CtBox){3, 0, 2, 3}, 2, 2, CT_INTERP_BICUBIC, &out, &err) == -1);
    CHECK(image_resize(&src, (CtBox){0, 0, NAN, 3}, 2, 2, CT_INTERP_BICUBIC, &out, &err) == -1);
    CHECK(image_resize(&src, (CtBox){0, 0, 4, 3}, 0, 2, CT_INTERP_NEAREST, &out, &err) == -1);
    CHECK(image_resize(&src, (CtBox){0, 0, 4, 3}, 2, 2, (CtInterp)9, &out, &err) == -1);
    CHECKF(strstr(err.msg, "interpolation"), "%s", err.msg);
    CtImage empty = {0, 0, NULL, NULL};
    CHECK(image_resize(&empty, (CtBox){0, 0, 0, 0}, 2, 2, CT_INTERP_BILINEAR, &out, &err) == -1);
    /* Extreme ratios stay in bounds: 1 pixel wide to 5000, and back to 1. */
    CHECK(image_resize(&src, (CtBox){0, 0, 4, 3}, 5000, 1, CT_INTERP_BICUBIC, &out, &err) == 0);
    CtImage back;
    CHECK(image_resize(&out, (CtBox){0, 0, 5000, 1}, 1, 7, CT_INTERP_BICUBIC, &back, &err) == 0);
    image_free(&out);
    image_free(&back);
    CHECK(image_alloc(&out, 40000, 1, &err) == -1 && out.px == NULL);
    image_free(NULL);
}

/* Decoders keep no shared state: four threads decode every JPEG and PNG
 * fixture at two scales and must get what one thread gets. */
typedef struct Job {
    const uint8_t *data[2];
    size_t n[2];
    uint64_t sum;
} Job;

static uint64_t checksum(const CtImage *img)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < (size_t)img->w * img->h * 3; i++)
        h = (h ^ img->px[i]) * 1099511628211ull;
    return h;
}

static void *decode_job(void *arg)
{
    Job *job = arg;
    job->sum = 0;
    for (int rep = 0; rep < 50; rep++)
        for (int i = 0; i < 2; i++)
            for (int shrink = 1; shrink <= 2; shrink++) {
                CtImage img;
                CtErr err;
                if (image_decode(job->data[i], job->n[i], shrink, &img, &err) == 0)
                    job->sum += checksum(&img);
                image_free(&img);
            }
    return NULL;
}

static void test_threads(void)
{
    Job jobs[5];
    uint8_t *jpg, *png;
    size_t jn, pn;
    jpg = read_file("big.jpg", &jn);
    png = read_file("rgba16_adam7.png", &pn);
    pthread_t th[4];
    for (int i = 0; i < 5; i++)
        jobs[i] = (Job){{jpg, png}, {jn, pn}, 0};
    decode_job(&jobs[4]);
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&th[i], NULL, decode_job, &jobs[i]) == 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].sum == jobs[4].sum && jobs[i].sum != 0);
    }
    free(jpg);
    free(png);
}

/* Every fixture at every scale in decode.txt: random rectangles, and the
 * edge cases (whole image, single pixels at the corners, full rows and
 * columns), decoded alone must equal that rectangle of the full decode. */
static void test_decode_region(void)
{
    size_t n;
    char *manifest = (char *)read_file("decode.txt", &n);
    if (!manifest)
        return;
    manifest = realloc(manifest, n + 1);
    manifest[n] = 0;
    int cases = 0;
    uint64_t lcg = 12345;
    char *save = NULL;
    for (char *line = strtok_r(manifest, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char input[128], expect[160];
        int shrink, w, h;
        if (sscanf(line, "%127s %d %d %d %159s", input, &shrink, &w, &h, expect) != 5)
            continue;
        size_t dn;
        uint8_t *data = read_file(input, &dn);
        CtImage full;
        CtErr err = {""};
        int pw, ph, dw, dh;
        if (!data || image_probe(data, dn, &pw, &ph, &err) || image_decode(data, dn, shrink, &full, &err)) {
            CHECKF(0, "%s at 1/%d: %s", input, shrink, err.msg);
            free(data);
            continue;
        }
        image_decoded_size(data, dn, pw, ph, shrink, &dw, &dh);
        CHECKF(dw == full.w && dh == full.h, "%s at 1/%d: decoded size %dx%d, predicted %dx%d", input, shrink,
               full.w, full.h, dw, dh);
        for (int b = 0; b < 120 && dw == full.w && dh == full.h; b++) {
            int x0, y0, x1, y1;
            if (b < 8) {
                int fixed[8][4] = {{0, 0, dw, dh},          {0, 0, 1, 1},          {dw - 1, dh - 1, dw, dh},
                                   {dw - 1, 0, dw, 1},      {0, dh - 1, 1, dh},    {0, dh / 2, dw, dh},
                                   {dw / 2, 0, dw, dh / 2}, {dw / 3, 0, dw / 3 + 1, dh}};
                x0 = fixed[b][0], y0 = fixed[b][1], x1 = fixed[b][2], y1 = fixed[b][3];
            } else {
                lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
                x0 = (int)((lcg >> 33) % (uint64_t)dw);
                y0 = (int)((lcg >> 13) % (uint64_t)dh);
                lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
                x1 = x0 + 1 + (int)((lcg >> 33) % (uint64_t)(dw - x0));
                y1 = y0 + 1 + (int)((lcg >> 13) % (uint64_t)(dh - y0));
            }
            if (x1 <= x0 || y1 <= y0)
                continue;
            CtImage reg;
            int rc = image_decode_region(data, dn, shrink, pw, ph, x0, y0, x1, y1, &reg, &err);
            CHECKF(rc == 0, "%s at 1/%d region %d,%d..%d,%d: %s", input, shrink, x0, y0, x1, y1, err.msg);
            if (rc)
                continue;
            int same = reg.w == x1 - x0 && reg.h == y1 - y0;
            for (int y = y0; same && y < y1; y++)
                same = !memcmp(reg.px + (size_t)(y - y0) * reg.w * 3, full.px + ((size_t)y * full.w + x0) * 3,
                               (size_t)reg.w * 3);
            CHECKF(same, "%s at 1/%d region %d,%d..%d,%d differs from the full decode", input, shrink, x0, y0, x1,
                   y1);
            image_free(&reg);
            cases++;
        }
        image_free(&full);
        free(data);
    }
    free(manifest);
    CHECKF(cases >= 2000, "only %d region cases", cases);
    printf("decode region: %d rectangles equal the full decode's\n", cases);
}

int main(void)
{
    data_dir = getenv("CTIMM_TEST_DATA");
    if (!data_dir)
        data_dir = "tests/data";
    test_decode_fixtures();
    test_gray_fixtures();
    test_decode_region();
    test_resize_fixtures();
    test_bad_inputs();
    test_corruption();
    test_resize_args();
    test_threads();
    return check_done("test_image");
}
