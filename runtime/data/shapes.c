/*
 * The shapes dataset: drawing (signed distances with one pixel of
 * antialiasing) and writing a JPEG ImageFolder (TurboJPEG, 4:2:0).
 *
 * Every image is a function of (seed, split, kind, number): its generator is
 * rng_for(seed, split, kind << 32 | number), so one image can be redrawn
 * without the others and the set does not depend on the order of writing.
 */
#include "runtime/data/shapes.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <turbojpeg.h>
#include <unistd.h>

#define PI 3.14159265358979323846

static const char *const KIND_NAMES[SHAPES_NUM_KINDS] = {
    "circle", "square", "triangle", "cross", "ring", "stripes-h", "stripes-v", "checker", "dots", "diagonal",
};

enum { K_CIRCLE, K_SQUARE, K_TRIANGLE, K_CROSS, K_RING, K_STRIPES_H, K_STRIPES_V, K_CHECKER, K_DOTS, K_DIAGONAL };

const char *shapes_kind_name(int k)
{
    return k >= 0 && k < SHAPES_NUM_KINDS ? KIND_NAMES[k] : "?";
}

/* ------------------------------------------------------------------ */
/* Drawing                                                             */
/* ------------------------------------------------------------------ */

static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

/* Signed distance to an axis-aligned box of half-sizes hx, hy. */
static double sd_box(double x, double y, double hx, double hy)
{
    double dx = fabs(x) - hx, dy = fabs(y) - hy;
    double ox = dx > 0 ? dx : 0, oy = dy > 0 ? dy : 0;
    double in = dx > dy ? dx : dy;
    return sqrt(ox * ox + oy * oy) + (in < 0 ? in : 0);
}

/* Signed distance (in periods) to stripes centred on u = 0.25 mod 1, half a period wide. */
static double sd_stripes(double u)
{
    double g = u - 0.25;
    g -= floor(g + 0.5);
    return fabs(g) - 0.25;
}

/* Everything one image's look depends on, drawn once from the rng. */
typedef struct ShapeParams {
    int kind;
    double cx, cy, r, angle, period, phase_x, phase_y, diag_sign;
    double bg0[3], bg1[3], fg[3];
    double grad_dx, grad_dy, noise;
} ShapeParams;

static void random_colour(CtRng *rng, double c[3])
{
    for (int i = 0; i < 3; i++)
        c[i] = rng_range(rng, 0, 255);
}

static double colour_dist(const double a[3], const double b[3])
{
    double s = 0;
    for (int i = 0; i < 3; i++)
        s += (a[i] - b[i]) * (a[i] - b[i]);
    return sqrt(s);
}

static void draw_params(int kind, int size, CtRng *rng, ShapeParams *p)
{
    p->kind = kind;
    p->cx = size * rng_range(rng, 0.3, 0.7);
    p->cy = size * rng_range(rng, 0.3, 0.7);
    p->r = size * rng_range(rng, 0.16, 0.32);
    p->angle = rng_range(rng, 0, 2 * PI);
    p->period = size * rng_range(rng, 0.08, 0.16);
    if (p->period < 4)
        p->period = 4;
    p->phase_x = rng_uniform(rng);
    p->phase_y = rng_uniform(rng);
    p->diag_sign = rng_uniform(rng) < 0.5 ? -1 : 1;
    random_colour(rng, p->bg0);
    if (rng_uniform(rng) < 0.5) {
        random_colour(rng, p->bg1);
        double a = rng_range(rng, 0, 2 * PI);
        p->grad_dx = cos(a) / size;
        p->grad_dy = sin(a) / size;
    } else {
        memcpy(p->bg1, p->bg0, sizeof p->bg1);
        p->grad_dx = p->grad_dy = 0;
    }
    p->noise = rng_range(rng, 0, 24);
    /* a foreground that stands out from the background's mean colour */
    double mean[3];
    for (int i = 0; i < 3; i++)
        mean[i] = 0.5 * (p->bg0[i] + p->bg1[i]);
    int tries = 0;
    do
        random_colour(rng, p->fg);
    while (colour_dist(p->fg, mean) < 120 && ++tries < 16);
    if (colour_dist(p->fg, mean) < 120)
        for (int i = 0; i < 3; i++)
            p->fg[i] = mean[i] < 128 ? 255 : 0;
}

/* Coverage of the foreground at pixel centre (x, y), in [0, 1]. */
static double coverage(const ShapeParams *p, double x, double y)
{
    double dx = x - p->cx, dy = y - p->cy;
    double r = p->r, P = p->period, d;
    /* shapes rotate freely; textures only by up to ~11 degrees, so
     * horizontal, vertical and diagonal stripes stay apart */
    double a = p->kind >= K_STRIPES_H ? 0.2 * sin(p->angle) : p->angle;
    double ca = cos(a), sa = sin(a);
    double qx = ca * dx + sa * dy, qy = -sa * dx + ca * dy;
    switch (p->kind) {
    case K_CIRCLE:
        d = sqrt(qx * qx + qy * qy) - r;
        break;
    case K_SQUARE:
        d = sd_box(qx, qy, 0.8 * r, 0.8 * r);
        break;
    case K_TRIANGLE: {
        d = -1e9;
        for (int k = 0; k < 3; k++) {
            double t = PI / 2 + k * 2 * PI / 3;
            double e = qx * cos(t) + qy * sin(t) - 0.5 * r;
            d = e > d ? e : d;
        }
        break;
    }
    case K_CROSS: {
        double a1 = sd_box(qx, qy, r, 0.18 * r), a2 = sd_box(qx, qy, 0.18 * r, r);
        d = a1 < a2 ? a1 : a2;
        break;
    }
    case K_RING:
        d = fabs(sqrt(qx * qx + qy * qy) - 0.75 * r) - 0.2 * r;
        break;
    default: {
        /* a texture inside a square patch around the centre */
        double patch = clamp01(0.5 - sd_box(dx, dy, 1.4 * r, 1.4 * r));
        if (patch <= 0)
            return 0;
        double t;
        if (p->kind == K_STRIPES_H) {
            t = clamp01(0.5 - sd_stripes(qy / P + p->phase_y) * P);
        } else if (p->kind == K_STRIPES_V) {
            t = clamp01(0.5 - sd_stripes(qx / P + p->phase_x) * P);
        } else if (p->kind == K_DIAGONAL) {
            double u = (qx + p->diag_sign * qy) * (1 / sqrt(2.0));
            t = clamp01(0.5 - sd_stripes(u / P + p->phase_x) * P);
        } else if (p->kind == K_CHECKER) {
            double c = 0.7 * P;
            double gx = qx / c + p->phase_x, gy = qy / c + p->phase_y;
            int in = ((long)floor(gx) + (long)floor(gy)) % 2 == 0;
            double ex = fabs(gx - floor(gx + 0.5)), ey = fabs(gy - floor(gy + 0.5));
            double e = (ex < ey ? ex : ey) * c;
            t = in ? clamp01(0.5 + e) : clamp01(0.5 - e);
        } else { /* dots */
            double gx = qx / P + p->phase_x, gy = qy / P + p->phase_y;
            gx -= floor(gx + 0.5);
            gy -= floor(gy + 0.5);
            t = clamp01(0.5 - (sqrt(gx * gx + gy * gy) - 0.28) * P);
        }
        return patch * t;
    }
    }
    return clamp01(0.5 - d);
}

static uint8_t to_u8(double v)
{
    v = v < 0 ? 0 : v > 255 ? 255 : v;
    return (uint8_t)(v + 0.5);
}

void shapes_draw(int kind, int size, CtRng *rng, uint8_t *rgb)
{
    ShapeParams p;
    draw_params(kind % SHAPES_NUM_KINDS, size, rng, &p);
    double g0 = 0.5 - 0.5 * size * (p.grad_dx + p.grad_dy); /* gradient centred on the image */
    for (int y = 0; y < size; y++) {
        for (int x = 0; x < size; x++) {
            double px = x + 0.5, py = y + 0.5;
            double g = clamp01(g0 + px * p.grad_dx + py * p.grad_dy);
            double a = coverage(&p, px, py);
            double n = p.noise * rng_normal(rng);
            uint8_t *o = rgb + ((size_t)y * size + x) * 3;
            for (int c = 0; c < 3; c++) {
                double bg = p.bg0[c] + (p.bg1[c] - p.bg0[c]) * g + n;
                o[c] = to_u8(bg + (p.fg[c] + 0.3 * n - bg) * a);
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* Writing the folder                                                  */
/* ------------------------------------------------------------------ */

#define MARKER_NAME "ctimm-shapes.txt"

ShapesConfig shapes_config_default(void)
{
    ShapesConfig c = {.img_size = 64, .train_per_class = 300, .val_per_class = 50, .quality = 90, .seed = 0};
    return c;
}

static void marker_text(const ShapesConfig *c, char *buf, size_t n)
{
    snprintf(buf, n, "ctimm shapes v1 seed=%llu img_size=%d train_per_class=%d val_per_class=%d quality=%d\n",
             (unsigned long long)c->seed, c->img_size, c->train_per_class, c->val_per_class, c->quality);
}

/* 1 when root/MARKER_NAME exists and reads exactly `want`, 0 when it differs,
 * -1 when there is no marker. */
static int marker_matches(const char *root, const char *want)
{
    char path[4096], got[512];
    snprintf(path, sizeof path, "%s/%s", root, MARKER_NAME);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    got[n] = 0;
    return strcmp(got, want) == 0;
}

/* Removes a folder tree made by us (files and folders; links are unlinked,
 * never followed). */
static int remove_tree(const char *path, CtErr *err)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : ct_fail(err, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0)
            return ct_fail(err, "cannot remove %s: %s", path, strerror(errno));
        return 0;
    }
    DIR *d = opendir(path);
    if (!d)
        return ct_fail(err, "cannot read folder %s: %s", path, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        size_t n = strlen(path) + strlen(e->d_name) + 2;
        char *child = malloc(n);
        if (!child) {
            rc = ct_fail(err, "out of memory");
            break;
        }
        snprintf(child, n, "%s/%s", path, e->d_name);
        rc = remove_tree(child, err);
        free(child);
    }
    closedir(d);
    if (rc == 0 && rmdir(path) != 0)
        rc = ct_fail(err, "cannot remove folder %s: %s", path, strerror(errno));
    return rc;
}

/* Removes temporary folders "<root>.partial.<pid>" left by runs that died. */
static void remove_stale_partials(const char *root)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", root);
    char *slash = strrchr(dir, '/');
    const char *base = root;
    if (slash) {
        base = root + (slash - dir) + 1;
        if (slash == dir)
            slash[1] = 0;
        else
            *slash = 0;
    } else {
        strcpy(dir, ".");
    }
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s.partial.", base);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t np = strlen(prefix);
        if (strncmp(e->d_name, prefix, np) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + np, &end, 10);
        if (*end || pid <= 0)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* its writer is still running (or we cannot tell) */
        char path[4096 + 512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove_tree(path, NULL);
    }
    closedir(d);
}

/* snprintf into a path buffer; a path that does not fit is an error. */
static int fmt_path(char *buf, size_t n, CtErr *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fmt_path(char *buf, size_t n, CtErr *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n)
        return ct_fail(err, "path too long: %.200s...", buf);
    return 0;
}

static int make_dir(const char *path, CtErr *err)
{
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return ct_fail(err, "cannot create folder %s: %s", path, strerror(errno));
    return 0;
}

static int write_file(const char *path, const void *data, size_t n, CtErr *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return ct_fail(err, "cannot create %s: %s", path, strerror(errno));
    size_t w = fwrite(data, 1, n, f);
    int bad = w != n;
    if (fclose(f) != 0)
        bad = 1;
    if (bad)
        return ct_fail(err, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

/* Writes both splits under dir (which exists and is empty). */
static int write_splits(const char *dir, const ShapesConfig *c, CtErr *err)
{
    int size = c->img_size, rc = -1;
    tjhandle tj = tjInitCompress();
    if (!tj)
        return ct_fail(err, "shapes: cannot start the JPEG encoder: %s", tjGetErrorStr2(NULL));
    unsigned long cap = tjBufSize(size, size, TJSAMP_420);
    unsigned char *jpeg = tjAlloc((int)cap);
    uint8_t *rgb = malloc((size_t)size * size * 3);
    if (!jpeg || !rgb) {
        ct_fail(err, "out of memory");
        goto free_all;
    }
    static const char *const SPLITS[2] = {"train", "val"};
    for (int s = 0; s < 2; s++) {
        int count = s == 0 ? c->train_per_class : c->val_per_class;
        char path[4096];
        if (fmt_path(path, sizeof path, err, "%s/%s", dir, SPLITS[s]) || make_dir(path, err))
            goto free_all;
        for (int k = 0; k < SHAPES_NUM_KINDS; k++) {
            if (fmt_path(path, sizeof path, err, "%s/%s/%s", dir, SPLITS[s], KIND_NAMES[k]) || make_dir(path, err))
                goto free_all;
            for (int i = 0; i < count; i++) {
                CtRng rng = rng_for(c->seed, (uint64_t)s, (uint64_t)k << 32 | (uint64_t)i);
                shapes_draw(k, size, &rng, rgb);
                unsigned char *out = jpeg;
                unsigned long len = cap;
                if (tjCompress2(tj, rgb, size, 0, size, TJPF_RGB, &out, &len, TJSAMP_420, c->quality,
                                TJFLAG_NOREALLOC) != 0) {
                    ct_fail(err, "shapes: JPEG encoding failed: %s", tjGetErrorStr2(tj));
                    goto free_all;
                }
                if (fmt_path(path, sizeof path, err, "%s/%s/%s/%s_%05d.jpg", dir, SPLITS[s], KIND_NAMES[k],
                             KIND_NAMES[k], i) ||
                    write_file(path, jpeg, len, err))
                    goto free_all;
            }
        }
    }
    rc = 0;
free_all:
    free(rgb);
    tjFree(jpeg);
    tjDestroy(tj);
    return rc;
}

int shapes_generate(const char *root, const ShapesConfig *cfg, int *generated, CtErr *err)
{
    ShapesConfig c = cfg ? *cfg : shapes_config_default();
    if (generated)
        *generated = 0;
    if (c.img_size < 8 || c.img_size > 4096 || c.train_per_class < 0 || c.val_per_class < 0 ||
        c.train_per_class > 10000000 || c.val_per_class > 10000000 || c.quality < 1 || c.quality > 100)
        return ct_fail(err, "shapes %s: bad config (img_size %d in 8..4096, counts >= 0, quality %d in 1..100)",
                       root, c.img_size, c.quality);
    if (strlen(root) == 0 || strlen(root) > 3000)
        return ct_fail(err, "shapes: bad dataset path '%.100s'", root);
    char want[512];
    marker_text(&c, want, sizeof want);

    struct stat st;
    int root_exists = stat(root, &st) == 0;
    int m = root_exists ? marker_matches(root, want) : -1;
    if (m == 1)
        return 0;
    if (root_exists && m == -1)
        return ct_fail(err, "shapes: %s exists and is not a ctimm shapes dataset (no %s in it); "
                       "choose another folder or remove it", root, MARKER_NAME);

    remove_stale_partials(root);
    char tmp[4096], old[4096], path[4096 + 64];
    snprintf(tmp, sizeof tmp, "%s.partial.%ld", root, (long)getpid());
    snprintf(old, sizeof old, "%s.old.%ld", root, (long)getpid());
    if (remove_tree(tmp, err) || make_dir(tmp, err))
        return ct_failctx(err, "shapes %s", root);
    if (write_splits(tmp, &c, err))
        goto fail;
    snprintf(path, sizeof path, "%s/%s", tmp, MARKER_NAME);
    if (write_file(path, want, strlen(want), err)) /* last: marks the set complete */
        goto fail;
    if (root_exists && rename(root, old) != 0) {
        ct_fail(err, "cannot move the old dataset %s aside: %s", root, strerror(errno));
        goto fail;
    }
    if (rename(tmp, root) != 0) {
        int e = errno;
        if (marker_matches(root, want) == 1) { /* another process finished first */
            remove_tree(tmp, NULL);
            remove_tree(old, NULL);
            return 0;
        }
        ct_fail(err, "cannot move %s into place at %s: %s", tmp, root, strerror(e));
        if (root_exists)
            rename(old, root);
        goto fail;
    }
    if (root_exists)
        remove_tree(old, NULL);
    if (generated)
        *generated = 1;
    return 0;
fail:
    remove_tree(tmp, NULL);
    return ct_failctx(err, "shapes %s", root);
}
