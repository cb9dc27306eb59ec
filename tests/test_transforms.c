/*
 * timm's transforms against PIL 9.4 / torchvision 0.14 / timm outputs made by
 * tools/make_transform_fixtures.py (tests/data/transforms/), plus the
 * statistics and determinism of the random parts.
 *
 * Tolerances, one table (max |diff| per byte against the reference):
 *   ImageOps / ImageEnhance / affine / rotate / hue / flips,
 *   PIL's GaussianBlur, grayscale, AugMix's mixing           0 (bit-exact)
 *   torchvision's GaussianBlur(23)                            TOL_TV_BLUR = 1
 *       (torch's float32 convolution sums 529 terms in an order of its
 *        own; a sum within a few ulp of .5 rounds either way)
 *   eval transform and fixed-box resized_crop                 TOL_RESIZE = 0
 *       (image_resize reproduces PIL's resample bit for bit; the crop
 *        sizes, offsets, padding and rounding here are timm's exactly)
 *   gray ('L') colour adjustments, eval transform and resized_crop
 *       (tools/make_gray_fixtures.py, tests/data/gray/)       0 (bit-exact)
 *   scaled (DCT) decode vs full decode of the same crop       mean |diff| <= TOL_SCALED_MEAN,
 *                                                             max <= TOL_SCALED_MAX
 *       (libjpeg's 1/s IDCT is a box-like filter, PIL's resize antialias a
 *        triangle/cubic one: they agree on smooth content, not on hard
 *        edges. Measured: mean 0.5..1.2, max 29. A box mapped one decoded
 *        pixel off would cost a mean of 3.2..8 on this image.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "one_node.h"
#include "runtime/data/augment.h"
#include "runtime/data/transforms.h"

#define TOL_RESIZE 0
#define TOL_TV_BLUR 1
#define TOL_SCALED_MEAN 2.0
#define TOL_SCALED_MAX 40

static uint8_t *read_file(const char *name, size_t *n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/transforms/%s", test_data_dir(), name);
    uint8_t *buf = (uint8_t *)test_read_file(path, n);
    if (!buf)
        fprintf(stderr, "cannot open %s\n", path);
    return buf;
}

/* Binary PPM (P6, maxval 255) as written by the fixture script. */
static int read_ppm(const char *name, CtImage *img)
{
    size_t n;
    uint8_t *buf = read_file(name, &n);
    img->px = NULL;
    if (!buf)
        return -1;
    int w, h, maxval, off = 0;
    if (sscanf((const char *)buf, "P6 %d %d %d%n", &w, &h, &maxval, &off) != 3 || maxval != 255 ||
        (size_t)off + 1 + (size_t)w * h * 3 > n) {
        free(buf);
        return -1;
    }
    CtErr err;
    if (image_alloc(img, w, h, &err)) {
        free(buf);
        return -1;
    }
    memcpy(img->px, buf + off + 1, (size_t)w * h * 3);
    free(buf);
    return 0;
}

/* Max |a - b| over the bytes; -1 when the sizes differ. Also the mean. */
static int max_diff(const uint8_t *a, const uint8_t *b, size_t n, double *mean)
{
    int worst = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        worst = d > worst ? d : worst;
        sum += d;
    }
    if (mean)
        *mean = n ? sum / n : 0;
    return worst;
}

static int compare_image(const char *what, const CtImage *got, const char *expected_file, int tol)
{
    CtImage want;
    if (read_ppm(expected_file, &want)) {
        CHECKF(0, "%s: cannot read %s", what, expected_file);
        return -1;
    }
    CHECKF(got->w == want.w && got->h == want.h, "%s: %dx%d vs %dx%d", what, got->w, got->h, want.w, want.h);
    if (got->w == want.w && got->h == want.h) {
        double mean;
        int d = max_diff(got->px, want.px, (size_t)got->w * got->h * 3, &mean);
        CHECKF(d <= tol, "%s: max |diff| %d (mean %.3f) > %d against %s", what, d, mean, tol, expected_file);
    }
    image_free(&want);
    return 0;
}

static CtInterp interp_by_name(const char *s)
{
    return !strcmp(s, "nearest") ? CT_INTERP_NEAREST : !strcmp(s, "bicubic") ? CT_INTERP_BICUBIC : CT_INTERP_BILINEAR;
}

static void copy_image(const CtImage *src, CtImage *dst)
{
    CtErr err;
    CT_ASSERT(!image_alloc(dst, src->w, src->h, &err));
    memcpy(dst->px, src->px, (size_t)src->w * src->h * 3);
}

/* Every RandAugment / AutoAugment op at fixed magnitudes: bit-exact. */
static void test_ops(void)
{
    AugEnv env = {.fill = {124, 116, 104}}; /* timm's img_mean for the ImageNet mean */
    CtImage src, low;
    size_t n;
    char *list = (char *)read_file("ops.txt", &n);
    CHECK(list && !read_ppm("src.ppm", &src) && !read_ppm("src_low.ppm", &low));
    if (!list || !src.px || !low.px)
        return;
    list = realloc(list, n + 1);
    list[n] = 0;
    int cases = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char op[64], interp[16], file[128], input[128];
        double mag, u, pct;
        int neg;
        if (line[0] == '#' || sscanf(line, "%63s %lf %d %15s %127s %127s %lf %lf", op, &mag, &neg, interp, file, input,
                                     &u, &pct) != 8)
            continue;
        const CtImage *in = strcmp(input, "src_low.ppm") ? &src : &low;
        int k = aug_op_by_name(op);
        CHECKF(k >= 0, "unknown op %s", op);
        if (k < 0)
            continue;
        CtImage img, tmp;
        copy_image(in, &img);
        copy_image(in, &tmp);
        memset(tmp.px, 0x5a, (size_t)tmp.w * tmp.h * 3); /* ops may not rely on tmp's contents */
        AugOpArgs args = {.magnitude = mag, .negate = neg, .interp = interp_by_name(interp), .u = u};
        env.translate_pct = pct;
        aug_op_apply(&img, &tmp, (AugOpKind)k, &args, &env);
        char what[384];
        snprintf(what, sizeof what, "%s m=%g neg=%d %s on %s", op, mag, neg, interp, input);
        compare_image(what, &img, file, 0);
        image_free(&img);
        image_free(&tmp);
        cases++;
    }
    CHECKF(cases == 55, "%d op cases", cases);
    free(list);
    image_free(&src);
    image_free(&low);
}

/* AugMixAugment's _apply_basic / _apply_blended at fixed mixing weights,
 * blend factor and op chains (ops at fixed magnitude and sign, bilinear,
 * translate_pct 0.3): bit-exact. */
static void test_augmix_fixed(void)
{
    CtImage src;
    size_t n;
    char *list = (char *)read_file("augmix.txt", &n);
    CHECK(list && !read_ppm("src.ppm", &src));
    if (!list || !src.px)
        return;
    list = realloc(list, n + 1);
    list[n] = 0;
    AugEnv env = {.fill = {124, 116, 104}, .interp = CT_INTERP_BILINEAR, .translate_pct = 0.3};
    int cases = 0;
    char *save;
    for (char *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#')
            continue;
        int blended, neg, width, used;
        double mag, m, w;
        float ws[8];
        char *p = line;
        CT_ASSERT(sscanf(p, "%d %lf %d %lf %d%n", &blended, &mag, &neg, &m, &width, &used) == 5 && width <= 8);
        p += used;
        for (int c = 0; c < width; c++, p += used) {
            CT_ASSERT(sscanf(p, "%lf%n", &w, &used) == 1);
            ws[c] = (float)w;
        }
        CtImage img, chain, tmp;
        copy_image(&src, &img);
        copy_image(&src, &chain);
        copy_image(&src, &tmp);
        float *acc = calloc((size_t)src.w * src.h * 3, sizeof *acc);
        if (blended)
            augmix_blended_weights(ws, width, (float)m, ws);
        for (int c = 0; c < width; c++, p += used) {
            char ops[256];
            CT_ASSERT(sscanf(p, "%255s%n", ops, &used) == 1);
            memcpy(chain.px, src.px, (size_t)src.w * src.h * 3);
            for (char *sv, *op = strtok_r(ops, "+", &sv); op; op = strtok_r(NULL, "+", &sv)) {
                AugOpArgs a = {.magnitude = mag, .negate = neg, .interp = CT_INTERP_BILINEAR};
                CT_ASSERT(aug_op_by_name(op) >= 0);
                aug_op_apply(&chain, &tmp, (AugOpKind)aug_op_by_name(op), &a, &env);
            }
            if (blended)
                image_blend(&img, &chain, ws[c]);
            else
                augmix_accumulate(acc, &chain, ws[c]);
        }
        if (!blended)
            augmix_finish(&img, acc, (float)m);
        char file[128], what[160];
        CT_ASSERT(sscanf(p, "%127s", file) == 1);
        snprintf(what, sizeof what, "augmix %s", file);
        compare_image(what, &img, file, 0);
        free(acc);
        image_free(&img);
        image_free(&chain);
        image_free(&tmp);
        cases++;
    }
    CHECKF(cases == 5, "%d augmix cases", cases);
    free(list);
    image_free(&src);
}

/* AugMix's draws over 10k images: Dirichlet(alpha) weights and Beta(alpha,
 * alpha) factor by their moments (E w = 1/K, Var w = (K - 1) / (K^2 (K a + 1)),
 * E m = 1/2, Var m = 1 / (4 (2a + 1))), within 5% of the mean's scale. */
static void test_augmix_draws(void)
{
    static const struct {
        double alpha;
        int width;
    } cases[] = {{1.0, 3}, {0.5, 4}, {3.0, 2}, {0.1, 3}};
    enum { N = 10000 };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double a = cases[k].alpha;
        int K = cases[k].width;
        CtRng rng = rng_for(21, k, 0);
        double sw[8] = {0}, sw2[8] = {0}, sm = 0, sm2 = 0, worst_sum = 0;
        for (int i = 0; i < N; i++) {
            float ws[8], m, total = 0;
            augmix_draw_weights(a, K, &rng, ws, &m);
            for (int c = 0; c < K; c++) {
                sw[c] += ws[c], sw2[c] += (double)ws[c] * ws[c], total += ws[c];
                CHECK(ws[c] >= 0 && ws[c] <= 1);
            }
            worst_sum = fmax(worst_sum, fabs(total - 1));
            CHECK(m >= 0 && m <= 1);
            sm += m, sm2 += (double)m * m;
        }
        CHECKF(worst_sum < 1e-5, "alpha %g: weights sum off 1 by %g", a, worst_sum);
        double ew = 1.0 / K, vw = (K - 1.0) / (K * K * (K * a + 1)), vm = 1 / (4 * (2 * a + 1));
        for (int c = 0; c < K; c++) {
            double mu = sw[c] / N, var = sw2[c] / N - mu * mu;
            CHECKF(fabs(mu - ew) < 0.05 * ew && fabs(var - vw) < 0.05 * vw + 0.002, "alpha %g width %d: w%d mean "
                   "%.4f (%.4f) var %.5f (%.5f)", a, K, c, mu, ew, var, vw);
        }
        double mu = sm / N, var = sm2 / N - mu * mu;
        CHECKF(fabs(mu - 0.5) < 0.025 && fabs(var - vm) < 0.05 * vm + 0.002, "alpha %g: m mean %.4f var %.5f (%.5f)", a,
               mu, var, vm);
    }
    /* Gamma's moments: mean = var = shape */
    static const double shapes[] = {0.3, 1.0, 2.5};
    for (int k = 0; k < 3; k++) {
        CtRng rng = rng_for(4, 4, (uint64_t)k);
        double s = 0, s2 = 0;
        for (int i = 0; i < N; i++) {
            double g = rng_gamma(&rng, shapes[k]);
            s += g, s2 += g * g;
        }
        double mu = s / N, var = s2 / N - mu * mu;
        CHECKF(fabs(mu - shapes[k]) < 0.05 * shapes[k] && fabs(var - shapes[k]) < 0.1 * shapes[k],
               "gamma(%g): mean %.4f var %.4f", shapes[k], mu, var);
    }
}

/* torchvision's adjust_brightness/contrast/saturation/hue and flips: bit-exact. */
static void test_color(void)
{
    CtImage src;
    size_t n;
    char *list = (char *)read_file("color.txt", &n);
    CHECK(list && !read_ppm("src.ppm", &src));
    if (!list || !src.px)
        return;
    list = realloc(list, n + 1);
    list[n] = 0;
    int cases = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char name[32], file[128];
        double f;
        if (line[0] == '#' || sscanf(line, "%31s %lf %127s", name, &f, file) != 3)
            continue;
        CtImage img;
        copy_image(&src, &img);
        if (!strcmp(name, "brightness"))
            enhance_brightness(&img, f);
        else if (!strcmp(name, "contrast"))
            enhance_contrast(&img, f);
        else if (!strcmp(name, "saturation"))
            enhance_color(&img, f);
        else if (!strcmp(name, "hue"))
            adjust_hue(&img, f);
        else if (!strcmp(name, "hflip"))
            aug_hflip(&img);
        else if (!strcmp(name, "vflip"))
            aug_vflip(&img);
        else if (!strcmp(name, "grayscale"))
            image_to_gray(&img);
        else if (!strcmp(name, "gaussian_blur")) {
            CtImage tmp;
            copy_image(&src, &tmp);
            tv_gaussian_blur(&img, &tmp, 23, f);
            image_free(&tmp);
        }
        char what[64];
        snprintf(what, sizeof what, "%s %g", name, f);
        compare_image(what, &img, file, strcmp(name, "gaussian_blur") ? 0 : TOL_TV_BLUR);
        image_free(&img);
        cases++;
    }
    CHECKF(cases == 15, "%d colour cases", cases);
    free(list);
    image_free(&src);

    /* ColorJitter with nothing to jitter leaves the image alone */
    CtImage a, b;
    CT_ASSERT(!read_ppm("src.ppm", &a));
    copy_image(&a, &b);
    CtRng rng = rng_for(1, 2, 3);
    color_jitter(&b, 0, 0, 0, 0, &rng);
    CHECK(!memcmp(a.px, b.px, (size_t)a.w * a.h * 3));
    image_free(&a);
    image_free(&b);
}

/* timm's eval transform per crop mode / interpolation on a PNG. */
static void test_eval(void)
{
    size_t n, png_n;
    char *list = (char *)read_file("eval.txt", &n);
    uint8_t *png = read_file("eval_src.png", &png_n);
    CHECK(list && png);
    if (!list || !png)
        return;
    list = realloc(list, n + 1);
    list[n] = 0;
    int cases = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char mode[16], interp[16], file[128];
        int size;
        double pct;
        if (line[0] == '#' || sscanf(line, "%15s %15s %d %lf %127s", mode, interp, &size, &pct, file) != 5)
            continue;
        EvalTransform t = eval_transform_default(size);
        t.crop_pct = pct;
        t.interp = interp_by_name(interp);
        t.crop_mode = !strcmp(mode, "squash") ? CT_CROP_SQUASH : !strcmp(mode, "border") ? CT_CROP_BORDER : CT_CROP_CENTER;
        CtImage got;
        CtErr err;
        CT_ASSERT(!image_alloc(&got, size, size, &err));
        int rc = transform_eval(&t, png, png_n, got.px, &err);
        CHECKF(rc == 0, "eval %s %s: %s", mode, interp, err.msg);
        char what[96];
        snprintf(what, sizeof what, "eval %s %s %d %g", mode, interp, size, pct);
        if (rc == 0)
            compare_image(what, &got, file, TOL_RESIZE);
        image_free(&got);
        cases++;
    }
    CHECKF(cases == 12, "%d eval cases", cases);
    free(list);
    free(png);
}

/* RandomResizedCrop's resize with a fixed box: torchvision's resized_crop. */
static void test_rrc_fixed(void)
{
    size_t n, png_n;
    char *list = (char *)read_file("rrc.txt", &n);
    uint8_t *png = read_file("eval_src.png", &png_n);
    CHECK(list && png);
    if (!list || !png)
        return;
    list = realloc(list, n + 1);
    list[n] = 0;
    int w, h, cases = 0;
    CtErr err;
    CHECK(image_probe(png, png_n, &w, &h, &err) == 0 && w == 61 && h == 45);
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        CropBox box;
        char interp[16], file[128];
        int size;
        if (line[0] == '#' ||
            sscanf(line, "%d %d %d %d %15s %d %127s", &box.x, &box.y, &box.w, &box.h, interp, &size, file) != 7)
            continue;
        CtImage got;
        int rc = decode_crop_resize(png, png_n, w, h, box, size, size, interp_by_name(interp), 1, 0, &got, &err);
        CHECKF(rc == 0, "rrc: %s", err.msg);
        char what[96];
        snprintf(what, sizeof what, "resized_crop %d,%d %dx%d %s", box.x, box.y, box.w, box.h, interp);
        if (rc == 0)
            compare_image(what, &got, file, TOL_RESIZE);
        image_free(&got);
        cases++;
    }
    CHECKF(cases == 5, "%d rrc cases", cases);
    free(list);
    free(png);
}

/* The manifest tests/data/gray/<name>, 0-terminated, or NULL. */
static char *read_gray_list(const char *name)
{
    char path[160];
    size_t n;
    snprintf(path, sizeof path, "../gray/%s", name);
    char *list = (char *)read_file(path, &n);
    CHECKF(list != NULL, "cannot read tests/data/gray/%s", name);
    if (list) {
        list = realloc(list, n + 1);
        list[n] = 0;
    }
    return list;
}

/* npx pixels of a gray image against PIL's 'L' pixels in tests/data/gray/
 * <expected>: got's bytes `stride` apart (3: an RGB image from
 * image_to_gray, whose three channels must all be PIL's; 1: the output). */
static void compare_gray(const char *what, const uint8_t *got, size_t npx, int stride, const char *expected)
{
    char path[160];
    size_t n;
    snprintf(path, sizeof path, "../gray/%s", expected);
    uint8_t *want = read_file(path, &n);
    CHECKF(want && n == npx, "%s: %s has %zu pixels, the transform %zu", what, expected, want ? n : 0, npx);
    size_t bad = 0;
    for (size_t i = 0; want && n == npx && i < npx; i++)
        for (int k = 0; k < stride; k++)
            bad += got[i * (size_t)stride + (size_t)k] != want[i];
    CHECKF(bad == 0, "%s: %zu bytes differ from PIL's 'L' image %s", what, bad, expected);
    free(want);
}

/* timm's transforms on 'L' images (in_chans 1): the colour adjustments,
 * the eval transform and resized_crop of image_to_gray'd images equal
 * torchvision's and timm's on PIL's 'L' image; what timm cannot do with
 * 'L' images (auto-augment's 3-value fill, the border crop's) is refused. */
static void test_gray(void)
{
    CtImage src;
    size_t png_n;
    uint8_t *png = read_file("eval_src.png", &png_n);
    char *color = read_gray_list("color.txt"), *eval = read_gray_list("eval.txt"), *rrc = read_gray_list("rrc.txt");
    CHECK(!read_ppm("src.ppm", &src) && png);
    int cases = 0, w = 0, h = 0;
    CtErr err;
    for (char *line = color && src.px ? strtok(color, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char name[32], file[128];
        double f;
        if (line[0] == '#' || sscanf(line, "%31s %lf %127s", name, &f, file) != 3)
            continue;
        CtImage img;
        copy_image(&src, &img);
        image_to_gray(&img);
        if (!strcmp(name, "brightness"))
            enhance_brightness(&img, f);
        else if (!strcmp(name, "contrast"))
            enhance_contrast(&img, f);
        else if (!strcmp(name, "saturation"))
            enhance_color(&img, f);
        else if (!strcmp(name, "pil_gaussian_blur") || !strcmp(name, "gaussian_blur")) {
            CtImage tmp;
            copy_image(&src, &tmp);
            if (name[0] == 'p')
                pil_gaussian_blur(&img, &tmp, (float)f);
            else
                tv_gaussian_blur(&img, &tmp, 23, f);
            image_free(&tmp);
        } else
            adjust_hue(&img, f);
        compare_gray(name, img.px, (size_t)img.w * img.h, 3, file);
        image_free(&img);
        cases++;
    }
    for (char *line = eval && png ? strtok(eval, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char mode[16], interp[16], file[128];
        int size;
        double pct;
        if (line[0] == '#' || sscanf(line, "%15s %15s %d %lf %127s", mode, interp, &size, &pct, file) != 5)
            continue;
        EvalTransform t = eval_transform_default(size);
        t.crop_pct = pct;
        t.interp = interp_by_name(interp);
        t.crop_mode = !strcmp(mode, "squash") ? CT_CROP_SQUASH : CT_CROP_CENTER;
        t.mode = CT_IMG_L;
        uint8_t *out = malloc((size_t)size * size + 1);
        CT_ASSERT(out != NULL);
        out[(size_t)size * size] = 0xA5; /* one byte a pixel, not one more */
        CHECKF(transform_eval(&t, png, png_n, out, &err) == 0, "gray eval: %s", err.msg);
        CHECK(out[(size_t)size * size] == 0xA5);
        compare_gray(file, out, (size_t)size * size, 1, file);
        free(out);
        cases++;
    }
    CHECK(png && image_probe(png, png_n, &w, &h, &err) == 0);
    for (char *line = rrc && png ? strtok(rrc, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        CropBox box;
        char interp[16], file[128];
        int size;
        if (line[0] == '#' ||
            sscanf(line, "%d %d %d %d %15s %d %127s", &box.x, &box.y, &box.w, &box.h, interp, &size, file) != 7)
            continue;
        CtImage got;
        int rc = decode_crop_resize(png, png_n, w, h, box, size, size, interp_by_name(interp), 1, CT_IMG_L, &got, &err);
        CHECKF(rc == 0, "gray rrc: %s", err.msg);
        if (rc == 0)
            compare_gray(file, got.px, (size_t)size * size, 3, file);
        image_free(&got);
        cases++;
    }
    CHECKF(cases == 12, "%d gray cases", cases);
    TrainTransform tt = train_transform_default(32);
    tt.mode = CT_IMG_L;
    tt.auto_augment = "rand-m9-mstd0.5";
    CHECKF(train_transform_check(&tt, &err) && strstr(err.msg, "PIL refuses for 'L' images"), "%s", err.msg);
    tt.auto_augment = "rand-m9-n3-t3aw"; /* Rotate, ShearX, ShearY among its ops */
    CHECK(train_transform_check(&tt, &err) == -1);
    tt.auto_augment = "augmix-m3";
    CHECK(train_transform_check(&tt, &err) == -1);
    /* no geometric op in '3a' or 't3a': timm runs them on 'L' images */
    tt.auto_augment = "3a";
    CHECKF(train_transform_check(&tt, &err) == 0, "%s", err.msg);
    tt.auto_augment = "rand-m9-t3a";
    CHECKF(train_transform_check(&tt, &err) == 0, "%s", err.msg);
    EvalTransform et = eval_transform_default(32);
    et.mode = CT_IMG_L;
    et.crop_mode = CT_CROP_BORDER;
    CHECKF(eval_transform_check(&et, &err) && strstr(err.msg, "torchvision refuses"), "%s", err.msg);
    image_free(&src);
    free(png);
    free(color);
    free(eval);
    free(rrc);
}

/* The DCT-scaled decode gives nearly the crop the full decode gives. */
static void test_scaled_decode(void)
{
    size_t n;
    uint8_t *jpg = read_file("photo.jpg", &n);
    CHECK(jpg != NULL);
    if (!jpg)
        return;
    int w, h;
    CtErr err;
    CHECK(image_probe(jpg, n, &w, &h, &err) == 0 && w == 320 && h == 240);
    static const CropBox boxes[] = {{0, 0, 320, 240}, {37, 21, 250, 190}, {101, 50, 130, 97}, {10, 120, 66, 70}};
    static const CtInterp interps[] = {CT_INTERP_BILINEAR, CT_INTERP_BICUBIC};
    for (size_t b = 0; b < sizeof boxes / sizeof boxes[0]; b++) {
        for (int i = 0; i < 2; i++) {
            CtImage full, scaled;
            int r1 = decode_crop_resize(jpg, n, w, h, boxes[b], 32, 32, interps[i], 0, 0, &full, &err);
            int r2 = decode_crop_resize(jpg, n, w, h, boxes[b], 32, 32, interps[i], 1, 0, &scaled, &err);
            CHECKF(r1 == 0 && r2 == 0, "scaled decode: %s", err.msg);
            if (r1 == 0 && r2 == 0) {
                double mean;
                int d = max_diff(full.px, scaled.px, 32 * 32 * 3, &mean);
                CHECKF(mean <= TOL_SCALED_MEAN && d <= TOL_SCALED_MAX,
                       "box %d,%d %dx%d interp %d: scaled vs full decode mean |diff| %.3f, max %d", boxes[b].x,
                       boxes[b].y, boxes[b].w, boxes[b].h, interps[i], mean, d);
            }
            image_free(&full);
            image_free(&scaled);
        }
    }
    free(jpg);
}

/* train_crop_mode rkrc / rkrr at a fixed resize and offset: the resize of
 * the whole image, then the centre or given crop with numpy's reflect
 * padding, equal to timm's ResizeKeepRatio + CenterCropOrPad / crop_or_pad. */
static void test_rkr_fixed(void)
{
    size_t n, png_n;
    char *list = (char *)read_file("rkr.txt", &n);
    uint8_t *png = read_file("eval_src.png", &png_n);
    CHECK(list && png);
    if (!list || !png)
        return;
    list = realloc(list, n + 1);
    list[n] = 0;
    int cases = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char mode[8], interp[16], file[128];
        int rh, rw, top, left, size, w, h;
        if (line[0] == '#' || sscanf(line, "%7s %d %d %d %d %15s %d %127s", mode, &rh, &rw, &top, &left, interp, &size,
                                     file) != 8)
            continue;
        CtErr err;
        CtImage resized, got;
        CT_ASSERT(!image_probe(png, png_n, &w, &h, &err));
        CHECKF(decode_crop_resize(png, png_n, w, h, (CropBox){0, 0, w, h}, rw, rh, interp_by_name(interp), 0, 0,
                                  &resized, &err) == 0, "%s", err.msg);
        if (!strcmp(mode, "rkrc")) {
            top = crop_offset(rh, size);
            left = crop_offset(rw, size);
        }
        CHECKF(crop_reflect(&resized, top, left, size, &got, &err) == 0, "%s", err.msg);
        compare_image(file, &got, file, 0);
        image_free(&resized);
        image_free(&got);
        cases++;
    }
    CHECKF(cases == 6, "%d rkr cases", cases);
    free(list);
    free(png);
}

/* RandomResizedCrop's box and ResizeKeepRatio's size over 20000 draws
 * against timm's get_params over as many (tests/data/transforms/
 * sampling.txt): means within 1.5%, standard deviations within 4% (rrc's
 * log aspect, whose mean is near 0: within 0.01 and 4%). */
static void test_crop_sampling_vs_timm(void)
{
    size_t n;
    char *list = (char *)read_file("sampling.txt", &n);
    CHECK(list != NULL);
    if (!list)
        return;
    list = realloc(list, n + 1);
    list[n] = 0;
    int cases = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char mode[8];
        int w, h, size;
        double scale[2], ratio[2], want[4];
        if (line[0] == '#' || sscanf(line, "%7s %d %d %d %lf %lf %lf %lf %lf %lf %lf %lf", mode, &w, &h, &size,
                                     &scale[0], &scale[1], &ratio[0], &ratio[1], &want[0], &want[1], &want[2],
                                     &want[3]) != 12)
            continue;
        TrainTransform t = train_transform_default(size);
        t.crop_mode = strcmp(mode, "rrc") ? CT_TRAIN_RKRC : CT_TRAIN_RRC;
        memcpy(t.scale, scale, sizeof scale);
        memcpy(t.ratio, ratio, sizeof ratio);
        CtRng rng = rng_for(17, (uint64_t)cases, 0);
        double sa = 0, sa2 = 0, sb = 0, sb2 = 0;
        enum { N = 20000 };
        for (int i = 0; i < N; i++) {
            TrainSample s;
            train_sample(&t, w, h, &rng, &s);
            double a = t.crop_mode == CT_TRAIN_RRC ? (double)s.box.w * s.box.h / ((double)w * h) : s.rh;
            double b = t.crop_mode == CT_TRAIN_RRC ? log((double)s.box.w / s.box.h) : s.rw;
            sa += a, sa2 += a * a, sb += b, sb2 += b * b;
        }
        double got[4] = {sa / N, sqrt(sa2 / N - (sa / N) * (sa / N)), sb / N, sqrt(sb2 / N - (sb / N) * (sb / N))};
        for (int k = 0; k < 4; k++) {
            double tol = k % 2 ? 0.04 * want[k] : fmax(0.015 * fabs(want[k]), 0.01);
            CHECKF(fabs(got[k] - want[k]) <= tol, "%s %dx%d: statistic %d is %.5f, timm's %.5f", mode, w, h, k, got[k],
                   want[k]);
        }
        cases++;
    }
    CHECKF(cases == 4, "%d sampling cases", cases);
    free(list);
}

/* RandomResizedCrop's box sampling: inside the image, area and aspect in range. */
static void test_rrc_sampling(void)
{
    const double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
    CtRng rng = rng_for(7, 0, 0);
    int W = 500, H = 375, draws = 20000, bad = 0, fallback = 0;
    double area_sum = 0;
    for (int i = 0; i < draws; i++) {
        CropBox b = rrc_sample(W, H, scale, ratio, &rng);
        if (b.x < 0 || b.y < 0 || b.w < 1 || b.h < 1 || b.x + b.w > W || b.y + b.h > H)
            bad++;
        double frac = (double)b.w * b.h / (W * H), ar = (double)b.w / b.h;
        /* the rounding of w and h moves area and ratio by at most ~1 px each */
        double slack = 1.0 / b.w + 1.0 / b.h;
        if (frac < scale[0] * (1 - 2 * slack) || frac > scale[1] * (1 + 2 * slack) || ar < ratio[0] * (1 - slack) ||
            ar > ratio[1] * (1 + slack))
            bad++;
        if (b.w == W && b.h == H)
            fallback++;
        area_sum += frac;
    }
    CHECKF(bad == 0, "%d boxes out of range", bad);
    /* E[area] over the accepted draws is a little below the uniform's 0.54 */
    CHECKF(area_sum / draws > 0.40 && area_sum / draws < 0.56, "mean area fraction %.3f", area_sum / draws);
    CHECKF(fallback < draws / 50, "%d whole-image fallbacks", fallback);

    /* A strip no box of ratio <= 4/3 fits at scale >= 0.5: the central
     * fallback, clipped to the ratio range. */
    const double big[2] = {0.5, 1.0};
    CropBox b = rrc_sample(1000, 50, big, ratio, &rng);
    CHECKF(b.h == 50 && b.w == 67 && b.x == (1000 - 67) / 2 && b.y == 0, "fallback %d,%d %dx%d", b.x, b.y, b.w, b.h);
    b = rrc_sample(40, 900, big, ratio, &rng);
    CHECKF(b.w == 40 && b.h == 53 && b.y == (900 - 53) / 2, "fallback %d,%d %dx%d", b.x, b.y, b.w, b.h);

    /* determinism */
    CtRng r1 = rng_for(3, 1, 4), r2 = rng_for(3, 1, 4);
    for (int i = 0; i < 100; i++) {
        CropBox p = rrc_sample(W, H, scale, ratio, &r1), q = rrc_sample(W, H, scale, ratio, &r2);
        CHECK(p.x == q.x && p.y == q.y && p.w == q.w && p.h == q.h);
    }
}

static void test_flip_rates(void)
{
    TrainTransform t = train_transform_default(224);
    t.random_interp = 1;
    CtRng rng = rng_for(11, 0, 0);
    int draws = 20000, h = 0, v = 0, bicubic = 0;
    for (int i = 0; i < draws; i++) {
        TrainSample s;
        train_sample(&t, 640, 480, &rng, &s);
        h += s.hflip;
        v += s.vflip;
        bicubic += s.interp == CT_INTERP_BICUBIC;
    }
    CHECKF(fabs((double)h / draws - 0.5) < 0.02, "hflip rate %.4f", (double)h / draws);
    CHECKF(v == 0, "vflip with p = 0: %d", v);
    CHECKF(fabs((double)bicubic / draws - 0.5) < 0.02, "random interpolation: bicubic rate %.4f",
           (double)bicubic / draws);
    t.vflip = 0.25;
    v = 0;
    for (int i = 0; i < draws; i++) {
        TrainSample s;
        train_sample(&t, 640, 480, &rng, &s);
        v += s.vflip;
    }
    CHECKF(fabs((double)v / draws - 0.25) < 0.02, "vflip rate %.4f", (double)v / draws);
}

static void test_parse(void)
{
    AugPolicy p;
    CtErr err;
    CHECK(aug_parse("rand-m9-mstd0.5-inc1", &p, &err) == 0);
    CHECK(p.kind == AUG_RAND && p.num_layers == 2 && p.n_ops == 15 && p.magnitude_std == 0.5 && p.magnitude_max == 10);
    CHECK(p.ops[4].kind == AUG_POSTERIZE_INC && p.ops[4].magnitude == 9 && p.ops[4].prob == 0.5);
    CHECK(aug_parse("rand-m9-n3-mstd0.5", &p, &err) == 0);
    CHECK(p.num_layers == 3 && p.ops[4].kind == AUG_POSTERIZE && p.ops[7].kind == AUG_COLOR);
    CHECK(aug_parse("rand-m7-inc0-p0.8-mmax15-mstd101", &p, &err) == 0);
    CHECK(p.ops[0].prob == 0.8 && p.magnitude_max == 15 && isinf(p.magnitude_std) && p.ops[5].kind == AUG_SOLARIZE);
    CHECK(aug_parse("rand-mstd1-tweights", &p, &err) == 0);
    CHECK(p.weighted && p.n_ops == 15 && p.ops[0].kind == AUG_ROTATE && p.weights[0] == 3 && p.ops[0].magnitude == 10);
    CHECK(aug_parse("original", &p, &err) == 0);
    CHECK(p.kind == AUG_AUTO && p.n_ops == 50 && p.ops[0].kind == AUG_POSTERIZE_ORIG && p.ops[0].prob == 0.4);
    CHECK(aug_parse("originalr-mstd0.5", &p, &err) == 0);
    CHECK(p.ops[0].kind == AUG_POSTERIZE_INC && p.magnitude_std == 0.5);
    CHECK(aug_parse("v0r", &p, &err) == 0 && p.ops[24].kind == AUG_POSTERIZE_INC);
    CHECK(aug_parse("v0", &p, &err) == 0 && p.ops[24].kind == AUG_POSTERIZE && p.ops[31].kind == AUG_TRANSLATE_Y_REL);
    CHECK(aug_parse("augmix-m5-w4-d2", &p, &err) == 0);
    CHECK(p.kind == AUG_MIX && p.width == 4 && p.depth == 2 && p.alpha == 1 && !p.blended && isinf(p.magnitude_std));
    CHECK(p.n_ops == 13 && p.ops[0].kind == AUG_AUTOCONTRAST && p.ops[12].kind == AUG_TRANSLATE_Y_REL &&
          p.ops[3].magnitude == 5 && p.ops[3].prob == 1.0 && p.magnitude_max == 10);
    CHECK(aug_parse("augmix", &p, &err) == 0 && p.width == 3 && p.depth == -1 && p.ops[0].magnitude == 3);
    CHECK(aug_parse("augmix-a0.5-b1-mstd0.5-mstd2", &p, &err) == 0);
    CHECK(p.alpha == 0.5 && p.blended && p.magnitude_std == 0.5);
    CHECK(aug_parse("augmix-mstd101", &p, &err) == 0 && p.magnitude_std == 101); /* no '> 100: uniform' here */
    CHECK(aug_parse("3a", &p, &err) == 0);
    CHECK(p.kind == AUG_AUTO && p.sub_len == 1 && p.n_ops == 3 && p.ops[0].kind == AUG_SOLARIZE &&
          p.ops[0].magnitude == 5 && p.ops[1].kind == AUG_DESATURATE && p.ops[2].kind == AUG_GAUSSIAN_BLUR_RAND);
    CHECK(aug_parse("rand-m9-t3a", &p, &err) == 0);
    CHECK(p.kind == AUG_RAND && !p.weighted && p.n_ops == 3 && p.ops[2].kind == AUG_GAUSSIAN_BLUR);
    CHECK(aug_parse("rand-m9-n3-t3aw", &p, &err) == 0);
    CHECK(p.weighted && p.n_ops == 14 && p.weights[0] == 6 && p.ops[13].kind == AUG_INVERT && p.weights[13] == 1);
    static const char *bad[] = {"rand-q3",      "rand-m9.5", "augmix-m5-x2", "augmix-w0", "v1",
                                "original-foo3", "3aw",      "",             "rand-n99-tweights"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = 0;
        CHECKF(aug_parse(bad[i], &p, &err) == -1 && err.msg[0], "'%s' accepted", bad[i]);
    }
    for (int k = 0; k < AUG_N_OPS; k++)
        CHECK(aug_op_by_name(aug_op_name((AugOpKind)k)) == k);
}

/* Whole train transforms: same rng, same bytes; the random paths run clean
 * (under the sanitizers too) on odd sizes. */
static void test_train_determinism(void)
{
    size_t n;
    uint8_t *jpg = read_file("photo.jpg", &n);
    uint8_t *png = NULL;
    size_t png_n;
    png = read_file("eval_src.png", &png_n);
    CHECK(jpg && png);
    if (!jpg || !png)
        return;
    static const char *aa[] = {NULL, "rand-m9-mstd0.5-inc1", "rand-m9-n3-mstd0.5", "original", "v0r-mstd0.5",
                               "rand-m10-mstd101-tweights-n4", "rand-m30-mmax30-n4-p1.0", "augmix-m5-w4-d2",
                               "augmix-b1-a0.5", "3a", "rand-m9-t3aw-n3-mstd0.5", "rand-m6-t3a"};
    enum { S = 37 };
    uint8_t a[S * S * 3], b[S * S * 3], c[S * S * 3];
    for (size_t k = 0; k < sizeof aa / sizeof aa[0]; k++) {
        TrainTransform t = train_transform_default(S);
        t.auto_augment = aa[k];
        t.random_interp = k % 2;
        t.crop_mode = (CtTrainCrop)(k % 3);
        t.vflip = 0.3;
        t.jitter_hue = 0.2;
        for (int src = 0; src < 2; src++) {
            const uint8_t *d = src ? png : jpg;
            size_t dn = src ? png_n : n;
            int differ = 0;
            for (uint64_t idx = 0; idx < 12; idx++) {
                CtErr err;
                CtRng r1 = rng_for(5, 1, idx), r2 = rng_for(5, 1, idx), r3 = rng_for(5, 2, idx);
                int rc = transform_train(&t, d, dn, &r1, a, &err);
                CHECKF(rc == 0, "train %s: %s", aa[k] ? aa[k] : "(jitter)", err.msg);
                CHECK(transform_train(&t, d, dn, &r2, b, &err) == 0);
                CHECK(transform_train(&t, d, dn, &r3, c, &err) == 0);
                CHECKF(!memcmp(a, b, sizeof a), "%s: same rng, different output", aa[k] ? aa[k] : "(jitter)");
                differ += memcmp(a, c, sizeof a) != 0;
            }
            CHECKF(differ >= 10, "%s: other epochs gave the same output %d/12 times", aa[k] ? aa[k] : "(jitter)",
                   12 - differ);
        }
    }
    /* errors are reported, not fatal */
    TrainTransform t = train_transform_default(S);
    CtErr err;
    CtRng r = rng_for(1, 1, 1);
    t.auto_augment = "rand-x9";
    CHECK(transform_train(&t, jpg, n, &r, a, &err) == -1 && strstr(err.msg, "rand-x9"));
    t.auto_augment = NULL;
    CHECK(transform_train(&t, jpg, 10, &r, a, &err) == -1);
    EvalTransform e = eval_transform_default(S);
    CHECK(transform_eval(&e, png, 20, a, &err) == -1);
    e.crop_pct = -1;
    CHECK(transform_eval(&e, png, png_n, a, &err) == -1);
    free(jpg);
    free(png);
}

/* The probabilistic steps after the policy: RandomApply(ColorJitter),
 * RandomGrayscale and RandomApply(GaussianBlur) at p = 0.3 change about 30%
 * of 300 images (3.4 binomial sd), and jitter runs under a '3a' policy,
 * not under another. Each is measured against the same transform without
 * it, which leaves the earlier draws alike. */
static void test_train_probs(void)
{
    size_t n;
    uint8_t *png = read_file("eval_src.png", &n);
    CHECK(png != NULL);
    if (!png)
        return;
    enum { S = 16, N = 300 };
    uint8_t a[S * S * 3], b[S * S * 3];
    static const struct {
        const char *aa;
        int step; /* 0 jitter, 1 grayscale, 2 blur */
        double rate;
    } cases[] = {{NULL, 0, 0.3}, {NULL, 1, 0.3}, {NULL, 2, 0.3}, {"3a", 0, 0.3}, {"rand-m9-t3a", 0, 0.3},
                 {"rand-m9", 0, 0}, {"augmix-m3", 0, 0}, {"rand-m9", 1, 0.3}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        TrainTransform with = train_transform_default(S), without;
        with.auto_augment = cases[k].aa;
        with.color_jitter = cases[k].step == 0 ? 0.4 : 0;
        with.color_jitter_prob = cases[k].step == 0 ? 0.3 : -1;
        with.grayscale_prob = cases[k].step == 1 ? 0.3 : 0;
        with.gaussian_blur_prob = cases[k].step == 2 ? 0.3 : 0;
        without = with;
        without.color_jitter = 0;
        without.grayscale_prob = without.gaussian_blur_prob = 0;
        int changed = 0, gray = 0;
        for (int i = 0; i < N; i++) {
            CtErr err;
            CtRng r1 = rng_for(8, k, (uint64_t)i), r2 = r1;
            CHECKF(transform_train(&with, png, n, &r1, a, &err) == 0, "%s", err.msg);
            CHECKF(transform_train(&without, png, n, &r2, b, &err) == 0, "%s", err.msg);
            changed += memcmp(a, b, sizeof a) != 0;
            int equal = 1;
            for (int p = 0; p < S * S; p++)
                equal &= a[3 * p] == a[3 * p + 1] && a[3 * p] == a[3 * p + 2];
            gray += equal;
        }
        double rate = (double)changed / N;
        CHECKF(fabs(rate - cases[k].rate) < 0.09, "%s step %d: %.3f of the images changed, expected %.2f",
               cases[k].aa ? cases[k].aa : "-", cases[k].step, rate, cases[k].rate);
        if (cases[k].step == 1)
            CHECKF(gray == changed, "grayscale: %d gray images, %d changed", gray, changed);
    }
    /* the probabilities' ranges, and the blur's reflect padding needing 12 px */
    TrainTransform t = train_transform_default(S);
    CtErr err;
    t.grayscale_prob = 1.5;
    CHECK(train_transform_check(&t, &err) == -1 && strstr(err.msg, "grayscale_prob"));
    t = train_transform_default(S);
    t.color_jitter_prob = 2;
    CHECK(train_transform_check(&t, &err) == -1 && strstr(err.msg, "color_jitter_prob"));
    t = train_transform_default(11);
    t.gaussian_blur_prob = 0.5;
    CHECK(train_transform_check(&t, &err) == -1 && strstr(err.msg, "gaussian_blur_prob"));
    free(png);
}

/* AugMixDataset's splits: split 0 is the primary transforms alone (the
 * same draws as a transform with no policy, jitter, grayscale or blur),
 * split 1 the whole transform, split 2 another draw of its second stage. */
static void test_train_splits(void)
{
    size_t n;
    uint8_t *jpg = read_file("photo.jpg", &n);
    CHECK(jpg != NULL);
    if (!jpg)
        return;
    enum { S = 20 };
    static uint8_t a[3][S * S * 3], whole[S * S * 3], clean[S * S * 3];
    static const char *aa[] = {"augmix-m3", "rand-m9-mstd0.5", NULL};
    for (size_t k = 0; k < 3; k++) {
        TrainTransform t = train_transform_default(S), primary;
        t.auto_augment = aa[k];
        t.crop_mode = (CtTrainCrop)k;
        t.vflip = 0.5;
        t.grayscale_prob = 0.3;
        t.gaussian_blur_prob = 0.3;
        primary = t;
        primary.auto_augment = NULL;
        primary.color_jitter = primary.grayscale_prob = primary.gaussian_blur_prob = 0;
        int differ = 0;
        for (uint64_t i = 0; i < 8; i++) {
            CtErr err;
            CtRng r1 = rng_for(4, 0, i), r2 = r1, r3 = r1;
            uint8_t *outs[3] = {a[0], a[1], a[2]};
            CHECKF(transform_train_splits(&t, jpg, n, &r1, 3, outs, &err) == 0, "%s", err.msg);
            CHECK(transform_train(&t, jpg, n, &r2, whole, &err) == 0);
            CHECK(transform_train(&primary, jpg, n, &r3, clean, &err) == 0);
            CHECKF(!memcmp(a[0], clean, sizeof clean), "%s: split 0 is not the clean image", aa[k] ? aa[k] : "-");
            CHECKF(!memcmp(a[1], whole, sizeof whole), "%s: split 1 is not the whole transform", aa[k] ? aa[k] : "-");
            differ += memcmp(a[1], a[2], sizeof whole) != 0;
        }
        CHECKF(differ >= 6, "%s: splits 1 and 2 agree %d/8 times", aa[k] ? aa[k] : "-", 8 - differ);
    }
    free(jpg);
}

/* x [n, c, h, w] erased in place as a training step does it: the boxes
 * drawn on the host, filled by random_erase on the ref and cpu backends. */
static void random_erasing_apply(const RandomErasing *re, float *x, int n, int c, int h, int w, CtRng *rng)
{
    int K = random_erasing_boxes(re);
    if (!K)
        return;
    int64_t *boxes = malloc(sizeof *boxes * (size_t)n * K * 5), mode = re->mode;
    random_erasing_draw(re, n, h, w, boxes, rng);
    CtTensor in[2] = {{{{4, {n, c, h, w}}, CT_F32}, x}, {{{3, {n, K, 5}}, CT_I64}, boxes}};
    one_node_f32(CT_OP_random_erase, 2, in, &mode, 1, NULL, 0, x, (int64_t)n * c * h * w, 0);
    free(boxes);
}

/* ctimm's erasing against timm's distribution (tests/data/erasing_timm.txt,
 * tools/make_erasing_fixture.py): per (prob, min_count, max_count), over as
 * many images, the share erased within 0.01 and the erased fraction's mean
 * and std within 2% and 4% (~4 standard errors of 20000 draws). */
static void test_random_erasing_vs_timm(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/erasing_timm.txt", test_data_dir());
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    enum { H = 24, W = 20 };
    char line[256];
    int cases = 0, draws = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            CHECK(sscanf(line, "# timm RandomErasing, 'const' mode, %d images", &draws) == 1 && draws > 0);
            continue;
        }
        double prob, share, mean, sd;
        int lo, hi;
        if (sscanf(line, "%lf %d %d %lf %lf %lf", &prob, &lo, &hi, &share, &mean, &sd) != 6 || draws <= 0)
            continue;
        cases++;
        RandomErasing re = {.prob = prob, .mode = CT_ERASE_CONST, .min_count = lo, .max_count = hi};
        int K = random_erasing_boxes(&re), erased = 0;
        int64_t *boxes = malloc(sizeof *boxes * (size_t)K * 5);
        double sum = 0, sum2 = 0;
        CtRng rng = rng_for(11, (uint64_t)cases, 0);
        for (int d = 0; d < draws; d++) {
            random_erasing_draw(&re, 1, H, W, boxes, &rng);
            unsigned char mask[H * W] = {0};
            for (int k = 0; k < K; k++) {
                const int64_t *b = boxes + (size_t)k * 5;
                for (int64_t y = b[0]; y < b[0] + b[2]; y++)
                    for (int64_t x = b[1]; x < b[1] + b[3]; x++)
                        mask[y * W + x] = 1;
            }
            int n = 0;
            for (int i = 0; i < H * W; i++)
                n += mask[i];
            if (n) {
                erased++;
                sum += (double)n / (H * W);
                sum2 += ((double)n / (H * W)) * ((double)n / (H * W));
            }
        }
        free(boxes);
        double got_share = (double)erased / draws, got_mean = erased ? sum / erased : 0;
        double got_sd = erased > 1 ? sqrt((sum2 - erased * got_mean * got_mean) / (erased - 1)) : 0;
        CHECKF(fabs(got_share - share) < 0.01 && fabs(got_mean - mean) < 0.02 * mean && fabs(got_sd - sd) < 0.04 * sd,
               "erasing p %g count %d..%d: erased %.4f mean %.4f std %.4f, timm %.4f %.4f %.4f", prob, lo, hi,
               got_share, got_mean, got_sd, share, mean, sd);
    }
    fclose(f);
    CHECKF(cases == 4, "%s: %d cases, expected 4", path, cases);
}

static void test_random_erasing(void)
{
    enum { N = 400, C = 3, H = 24, W = 20 };
    float *x = malloc(sizeof(float) * N * C * H * W);
    RandomErasing re = {.prob = 0.25, .mode = CT_ERASE_CONST, .min_count = 1, .max_count = 1};
    for (size_t i = 0; i < (size_t)N * C * H * W; i++)
        x[i] = 1.0f;
    CtRng rng = rng_for(9, 0, 0);
    random_erasing_apply(&re, x, N, C, H, W, &rng);
    int erased = 0, bad = 0;
    for (int i = 0; i < N; i++) {
        const float *img = x + (size_t)i * C * H * W;
        int zeros = 0, x0 = W, x1 = -1, y0 = H, y1 = -1;
        for (int y = 0; y < H; y++)
            for (int xx = 0; xx < W; xx++)
                if (img[y * W + xx] == 0.0f) {
                    zeros++;
                    x0 = xx < x0 ? xx : x0, x1 = xx > x1 ? xx : x1, y0 = y < y0 ? y : y0, y1 = y > y1 ? y : y1;
                }
        if (!zeros)
            continue;
        erased++;
        /* one rectangle, the same on every channel, area within 2%..1/3 (+ rounding) */
        int bw = x1 - x0 + 1, bh = y1 - y0 + 1;
        double frac = (double)bw * bh / (H * W), slack = 1.0 / bw + 1.0 / bh;
        if (zeros != bw * bh || frac < 0.02 * (1 - 2 * slack) || frac > (1.0 / 3) * (1 + 2 * slack) || bw >= W ||
            bh >= H)
            bad++;
        for (int c = 1; c < C; c++)
            if (memcmp(img, img + (size_t)c * H * W, sizeof(float) * H * W))
                bad++;
    }
    CHECKF(fabs((double)erased / N - 0.25) < 0.07, "erased %d of %d at p = 0.25", erased, N);
    CHECKF(bad == 0, "%d malformed erasures", bad);

    /* --resplit: timm's num_splits 3 leaves the batch's first third (the
     * clean split) alone and erases the rest as before */
    {
        RandomErasing r3 = {.prob = 1.0, .mode = CT_ERASE_CONST, .min_count = 1, .max_count = 1, .num_splits = 3};
        enum { NS = 9 };
        int64_t boxes[NS * 5];
        CtRng r = rng_for(4, 0, 0);
        memset(boxes, 0xff, sizeof boxes);
        random_erasing_draw(&r3, NS, H, W, boxes, &r);
        for (int i = 0; i < NS; i++)
            CHECKF((i < NS / 3) == (boxes[i * 5 + 2] == 0), "--resplit: image %d of %d %s", i, NS,
                   i < NS / 3 ? "erased in the clean split" : "not erased at p = 1");
    }

    /* 'rand': one normal value per channel; 'pixel': per element; same rng, same result */
    float *y = malloc(sizeof(float) * N * C * H * W);
    for (int mode = CT_ERASE_RAND; mode <= CT_ERASE_PIXEL; mode++) {
        RandomErasing r2 = {.prob = 1.0, .mode = (CtEraseMode)mode, .min_count = 1, .max_count = 3};
        for (size_t i = 0; i < (size_t)N * C * H * W; i++)
            x[i] = y[i] = 100.0f;
        CtRng a = rng_for(2, 0, 0), b = rng_for(2, 0, 0);
        random_erasing_apply(&r2, x, N, C, H, W, &a);
        random_erasing_apply(&r2, y, N, C, H, W, &b);
        CHECK(!memcmp(x, y, sizeof(float) * N * C * H * W));
        int touched = 0;
        double sum = 0, sum2 = 0;
        size_t cnt = 0;
        for (int i = 0; i < N; i++) {
            const float *img = x + (size_t)i * C * H * W;
            int any = 0;
            for (int k = 0; k < C * H * W; k++) {
                if (img[k] != 100.0f) {
                    any = 1;
                    sum += img[k];
                    sum2 += (double)img[k] * img[k];
                    cnt++;
                }
            }
            touched += any;
        }
        CHECKF(touched == N, "mode %d: %d of %d images erased at p = 1", mode, touched, N);
        double mu = sum / cnt, var = sum2 / cnt - mu * mu;
        CHECKF(fabs(mu) < 0.1 && fabs(var - 1) < 0.15, "mode %d: fill mean %.3f var %.3f", mode, mu, var);
    }
    free(x);
    free(y);
}

int main(void)
{
    test_ops();
    test_color();
    test_augmix_fixed();
    test_augmix_draws();
    test_parse();
    test_rrc_sampling();
    test_crop_sampling_vs_timm();
    test_rkr_fixed();
    test_flip_rates();
    test_random_erasing();
    test_random_erasing_vs_timm();
    test_eval();
    test_rrc_fixed();
    test_scaled_decode();
    test_gray();
    test_train_determinism();
    test_train_probs();
    test_train_splits();
    return check_done("test_transforms");
}
