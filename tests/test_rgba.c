/*
 * 'RGBA' images (train.py's and validate.py's --input-img-mode RGBA with
 * --in-chans 4) against PIL 9.4 / torchvision 0.14 / timm, from
 * tools/make_rgba_fixtures.py (tests/data/rgba/): the decode of every kind
 * of PNG transparency and of JPEGs, the colour adjustments, the eval
 * transform, resized_crop with hflip, and the rkrc/rkrr resize and
 * reflect-padded crop, all bit-exact but torchvision's GaussianBlur(23)
 * (within 1, as test_transforms.c says why). Then what timm cannot do with
 * 'RGBA' images is refused, the train transform's 4-byte pixels, and the
 * image mode and normalisation rules of the tools.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/data/augment.h"
#include "runtime/data/transforms.h"
#include "train/eval_data.h"

static uint8_t *read_file(const char *dir, const char *name, size_t *n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", test_data_dir(), dir, name);
    uint8_t *buf = (uint8_t *)test_read_file(path, n);
    if (!buf)
        fprintf(stderr, "cannot read %s\n", path);
    return buf;
}

static CtInterp interp_by_name(const char *s)
{
    return !strcmp(s, "nearest") ? CT_INTERP_NEAREST : !strcmp(s, "bicubic") ? CT_INTERP_BICUBIC : CT_INTERP_BILINEAR;
}

/* img's pixels as 4-byte RGBA (alpha NULL: 255) against the fixture's,
 * every byte within tol. */
static void compare(const char *what, const CtImage *img, const char *expected, int tol)
{
    size_t n, npx = (size_t)img->w * img->h;
    uint8_t *want = read_file("rgba", expected, &n);
    CHECKF(want && n == npx * 4, "%s: %s has %zu bytes, the image %zu pixels", what, expected, n, npx);
    size_t bad = 0;
    for (size_t i = 0; want && n == npx * 4 && i < npx; i++)
        for (int c = 0; c < 4; c++) {
            int got = c < 3 ? img->px[3 * i + c] : img->alpha ? img->alpha[i] : 255;
            bad += abs(got - want[4 * i + c]) > tol;
        }
    CHECKF(bad == 0, "%s: %zu bytes differ from %s", what, bad, expected);
    free(want);
}

/* 4-byte pixels (a transform's output) as a CtImage for compare. */
static void from_rgba(const uint8_t *p, int w, int h, CtImage *img)
{
    CtErr err;
    size_t n = (size_t)w * h;
    CT_ASSERT(!image_alloc(img, w, h, &err) && (img->alpha = malloc(n)) != NULL);
    for (size_t i = 0; i < n; i++) {
        memcpy(img->px + 3 * i, p + 4 * i, 3);
        img->alpha[i] = p[4 * i + 3];
    }
}

static void copy_image(const CtImage *src, CtImage *dst)
{
    CtErr err;
    size_t n = (size_t)src->w * src->h;
    CT_ASSERT(!image_alloc(dst, src->w, src->h, &err));
    memcpy(dst->px, src->px, n * 3);
    if (src->alpha) {
        CT_ASSERT((dst->alpha = malloc(n)) != NULL);
        memcpy(dst->alpha, src->alpha, n);
    }
}

/* The fixture's lines but comments, one at a time (strtok's state: one list at a time). */
static char *next_line(char *list)
{
    char *line = strtok(list, "\n");
    while (line && line[0] == '#')
        line = strtok(NULL, "\n");
    return line;
}

static void test_decode(void)
{
    size_t n;
    char *list = (char *)read_file("rgba", "decode.txt", &n);
    int cases = 0, alpha = 0;
    CtErr err;
    for (char *line = list ? next_line(list) : NULL; line; line = next_line(NULL)) {
        char name[64], file[96];
        int w, h;
        if (sscanf(line, "%63s %d %d %95s", name, &w, &h, file) != 4)
            continue;
        size_t len;
        uint8_t *data = read_file(".", name, &len);
        CtImage img, rgb;
        int rc = data ? image_decode_rgba(data, len, 1, &img, &err) : -1;
        CHECKF(rc == 0, "%s: %s", name, err.msg);
        if (rc == 0) {
            CHECKF(img.w == w && img.h == h, "%s: %dx%d, PIL's %dx%d", name, img.w, img.h, w, h);
            compare(name, &img, file, 0);
            alpha += img.alpha != NULL;
            /* the colours are convert('RGB')'s, alpha or not */
            CHECK(image_decode(data, len, 1, &rgb, &err) == 0 && rgb.alpha == NULL &&
                  !memcmp(rgb.px, img.px, (size_t)w * h * 3));
            image_free(&rgb);
            image_free(&img);
        }
        free(data);
        cases++;
    }
    CHECKF(cases == 16, "%d decode cases", cases);
    /* rgba, rgba16, la, la16, pal2's tRNS, trns_rgb's and trns_l's colours: bands; the JPEGs, the opaque PNGs and
     * rgb_trns' and grey4_trns' colours, which no pixel has: none */
    CHECKF(alpha == 7, "%d images decoded with an alpha band", alpha);
    free(list);
}

static void test_color(const CtImage *src)
{
    size_t n;
    char *list = (char *)read_file("rgba", "color.txt", &n);
    int cases = 0;
    for (char *line = list ? next_line(list) : NULL; line; line = next_line(NULL)) {
        char name[32], file[96];
        double f;
        if (sscanf(line, "%31s %lf %95s", name, &f, file) != 3)
            continue;
        CtImage img, tmp;
        copy_image(src, &img);
        int tol = 0;
        if (!strcmp(name, "brightness"))
            enhance_brightness(&img, f);
        else if (!strcmp(name, "contrast"))
            enhance_contrast(&img, f);
        else if (!strcmp(name, "saturation"))
            enhance_color(&img, f);
        else if (!strcmp(name, "hue"))
            adjust_hue(&img, f);
        else {
            copy_image(src, &tmp);
            tv_gaussian_blur(&img, &tmp, 23, f);
            image_free(&tmp);
            tol = 1;
        }
        compare(name, &img, file, tol);
        image_free(&img);
        cases++;
    }
    CHECKF(cases == 6, "%d colour cases", cases);
    free(list);
}

static void test_eval(const uint8_t *png, size_t png_n)
{
    size_t n;
    char *list = (char *)read_file("rgba", "eval.txt", &n);
    int cases = 0;
    CtErr err;
    for (char *line = list ? next_line(list) : NULL; line; line = next_line(NULL)) {
        char mode[16], interp[16], file[96];
        int size;
        double pct;
        if (sscanf(line, "%15s %15s %d %lf %95s", mode, interp, &size, &pct, file) != 5)
            continue;
        EvalTransform t = eval_transform_default(size);
        t.crop_pct = pct;
        t.interp = interp_by_name(interp);
        t.crop_mode = !strcmp(mode, "squash") ? CT_CROP_SQUASH : CT_CROP_CENTER;
        t.mode = CT_IMG_RGBA;
        size_t bytes = (size_t)size * size * 4;
        uint8_t *out = malloc(bytes + 1);
        CT_ASSERT(out != NULL);
        out[bytes] = 0xA5; /* four bytes a pixel, not one more */
        CHECKF(transform_eval(&t, png, png_n, out, &err) == 0, "rgba eval: %s", err.msg);
        CHECK(out[bytes] == 0xA5);
        CtImage img;
        from_rgba(out, size, size, &img);
        compare(file, &img, file, 0);
        image_free(&img);
        free(out);
        cases++;
    }
    CHECKF(cases == 4, "%d eval cases", cases);
    free(list);
}

static void test_crops(const uint8_t *png, size_t png_n)
{
    size_t n;
    char *rrc = (char *)read_file("rgba", "rrc.txt", &n), *rkr = (char *)read_file("rgba", "rkr.txt", &n);
    int cases = 0, w = 0, h = 0;
    CtErr err;
    CHECK(image_probe(png, png_n, &w, &h, &err) == 0);
    for (char *line = rrc ? next_line(rrc) : NULL; line; line = next_line(NULL)) {
        CropBox box;
        char interp[16], file[96];
        int size, flip;
        if (sscanf(line, "%d %d %d %d %15s %d %d %95s", &box.x, &box.y, &box.w, &box.h, interp, &size, &flip, file) !=
            8)
            continue;
        CtImage got;
        int rc = decode_crop_resize(png, png_n, w, h, box, size, size, interp_by_name(interp), 1, CT_IMG_RGBA, &got,
                                    &err);
        CHECKF(rc == 0, "rgba rrc: %s", err.msg);
        if (rc == 0) {
            if (flip)
                aug_hflip(&got);
            compare(file, &got, file, 0);
        }
        image_free(&got);
        cases++;
    }
    for (char *line = rkr ? next_line(rkr) : NULL; line; line = next_line(NULL)) {
        char interp[16], file[96];
        int rw, rh, top, left, size;
        if (sscanf(line, "%d %d %15s %d %d %d %95s", &rw, &rh, interp, &top, &left, &size, file) != 7)
            continue;
        CtImage resized, got = {0};
        int rc = decode_crop_resize(png, png_n, w, h, (CropBox){0, 0, w, h}, rw, rh, interp_by_name(interp), 0,
                                    CT_IMG_RGBA, &resized, &err) ||
                 crop_reflect(&resized, top, left, size, &got, &err);
        CHECKF(rc == 0, "rgba rkr: %s", err.msg);
        if (rc == 0)
            compare(file, &got, file, 0);
        image_free(&resized);
        image_free(&got);
        cases++;
    }
    CHECKF(cases == 6, "%d crop cases", cases);
    free(rrc);
    free(rkr);
}

/* What timm cannot do with 'RGBA' images is refused before any image;
 * the train transform writes four bytes a pixel, the alpha of a JPEG 255. */
static void test_train(const uint8_t *png, size_t png_n)
{
    CtErr err;
    TrainTransform t = train_transform_default(16);
    t.mode = CT_IMG_RGBA;
    t.color_jitter = 0.4;
    t.gaussian_blur_prob = 0.5;
    t.crop_mode = CT_TRAIN_RKRR;
    CHECKF(train_transform_check(&t, &err) == 0, "%s", err.msg);
    t.auto_augment = "rand-m9-mstd0.5";
    CHECKF(train_transform_check(&t, &err) && strstr(err.msg, "on RGBA images: not built"), "%s", err.msg);
    t.auto_augment = NULL;
    t.grayscale_prob = 0.2;
    CHECKF(train_transform_check(&t, &err) && strstr(err.msg, "RandomGrayscale refuses"), "%s", err.msg);
    t.grayscale_prob = 0;
    EvalTransform et = eval_transform_default(16);
    et.mode = CT_IMG_RGBA;
    et.crop_mode = CT_CROP_BORDER;
    CHECKF(eval_transform_check(&et, &err) && strstr(err.msg, "refuses for 4-channel images"), "%s", err.msg);

    uint8_t out[16 * 16 * 4 + 1];
    CtRng rng = rng_for(7, 0, 0);
    int transparent = 0;
    for (int k = 0; k < 8; k++) {
        out[16 * 16 * 4] = 0xA5;
        CHECKF(transform_train(&t, png, png_n, &rng, out, &err) == 0, "%s", err.msg);
        CHECK(out[16 * 16 * 4] == 0xA5);
        for (int i = 0; i < 16 * 16; i++)
            transparent += out[4 * i + 3] != 255;
    }
    CHECKF(transparent > 0, "no pixel of 8 crops of src.png kept its transparency");
    /* a JPEG has no alpha; torchvision's hue jitter goes through 'HSV', which drops it */
    size_t jn;
    uint8_t *jpg = read_file("images", "rgb.jpg", &jn);
    const uint8_t *data[2] = {jpg, png};
    size_t len[2] = {jn, png_n};
    t.gaussian_blur_prob = 0;
    for (int k = 0; k < 2; k++) {
        t.jitter_hue = k ? 0.1 : 0;
        int opaque = data[k] && transform_train(&t, data[k], len[k], &rng, out, &err) == 0;
        for (int i = 0; opaque && i < 16 * 16; i++)
            opaque = out[4 * i + 3] == 255;
        CHECKF(opaque, "case %d: the RGBA crop is not opaque (%s)", k, err.msg);
    }
    free(jpg);
}

/* The tools' rules: 'RGBA' makes 4 channels, the default mode 'L' for any
 * count but 3; a 3-value mean is averaged to 4 channels (adapt_to_chs). */
static void test_modes(void)
{
    CtErr err;
    CtImgMode m;
    CHECK(data_img_mode("RGBA", 4, &m, &err) == 0 && m == CT_IMG_RGBA);
    CHECK(data_img_mode(NULL, 1, &m, &err) == 0 && m == CT_IMG_L);
    CHECK(data_img_mode(NULL, 3, &m, &err) == 0 && m == CT_IMG_RGB);
    CHECKF(data_img_mode(NULL, 4, &m, &err) && strstr(err.msg, "give --input-img-mode RGBA"), "%s", err.msg);
    CHECKF(data_img_mode("RGBA", 3, &m, &err) && strstr(err.msg, "makes 4-channel images, but the model takes 3"),
           "%s", err.msg);
    CHECKF(data_img_mode("CMYK", 4, &m, &err) && strstr(err.msg, "RGB, L (gray) or RGBA"), "%s", err.msg);
    int chans;
    CHECK(data_in_chans(4, 0, NULL, &chans, &err) == 0 && chans == 4);
    CHECK(data_in_chans(2, 0, NULL, &chans, &err) == -1);
    const double cfg[3] = {0.485, 0.456, 0.406}, given[4] = {0.1, 0.2, 0.3, 0.4};
    double out[4];
    CHECK(data_norm_stat("mean", NULL, 0, cfg, 4, out, &err) == 0);
    for (int c = 0; c < 4; c++)
        CHECK(out[c] == (0.485 + 0.456 + 0.406) / 3);
    CHECK(data_norm_stat("mean", given, 4, cfg, 4, out, &err) == 0 && out[3] == 0.4 && out[0] == 0.1);
    CHECKF(data_norm_stat("mean", given, 3, cfg, 4, out, &err) && strstr(err.msg, "takes 1 or 4 values"), "%s",
           err.msg);
}

int main(void)
{
    test_decode();
    test_modes();
    size_t png_n;
    uint8_t *png = read_file("rgba", "src.png", &png_n);
    CtImage src;
    CtErr err;
    if (png && image_decode_rgba(png, png_n, 1, &src, &err) == 0) {
        CHECK(src.alpha != NULL);
        test_color(&src);
        image_free(&src);
        test_eval(png, png_n);
        test_crops(png, png_n);
        test_train(png, png_n);
    } else {
        CHECKF(0, "src.png: %s", png ? err.msg : "missing");
    }
    free(png);
    return check_done("test_rgba");
}
