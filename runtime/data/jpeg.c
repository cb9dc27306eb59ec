/*
 * JPEG through TurboJPEG, to 8-bit RGB as Pillow decodes it: the same
 * libjpeg-turbo with the same settings (accurate integer IDCT, fancy
 * upsampling; Pillow's draft() keeps both and only sets scale 1/shrink), so
 * full-size and DCT-scaled decodes match Pillow's bit for bit. Greyscale comes
 * out as R = G = B (libjpeg's own expansion, as convert('RGB')); CMYK and
 * YCCK go through Pillow's cmyk2rgb on Adobe-inverted samples. One
 * decompressor handle per call: no shared state between loader threads.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
/* jpeglib.h needs stdio.h's FILE first */
#include <jpeglib.h>

#include "runtime/data/image_codec.h"

/* Accurate IDCT as Pillow (JDCT_ISLOW); at most 500 progressive scans, so a
 * crafted file cannot make one decode take minutes (real ones use ~10). */
#define TJ_FLAGS (TJFLAG_ACCURATEDCT | TJFLAG_LIMITSCANS)

typedef struct Header {
    int w, h, colorspace;
} Header;

/*
 * Reads the frame header (SOFn) by walking the marker segments after SOI:
 * size, and from the component count whether the pixels are CMYK/YCCK.
 * Only for what tjDecompressHeader3 refuses but libjpeg decodes.
 */
static int parse_frame_header(const uint8_t *d, size_t n, Header *hd)
{
    size_t i = 2;
    while (i + 4 <= n) {
        if (d[i] != 0xFF)
            return -1;
        int m = d[i + 1];
        if (m == 0xFF) { /* fill byte */
            i++;
            continue;
        }
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD8)) { /* no length field */
            i += 2;
            continue;
        }
        if (m == 0xD9 || m == 0xDA) /* end of image or a scan, and no frame yet */
            return -1;
        size_t len = (size_t)d[i + 2] << 8 | d[i + 3];
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            if (len < 8 || i + 10 > n)
                return -1;
            hd->h = d[i + 5] << 8 | d[i + 6];
            hd->w = d[i + 7] << 8 | d[i + 8];
            hd->colorspace = d[i + 9] == 4 ? TJCS_CMYK : d[i + 9] == 1 ? TJCS_GRAY : TJCS_YCbCr;
            return 0;
        }
        if (len < 2)
            return -1;
        i += 2 + len;
    }
    return -1;
}

static int read_header(tjhandle tj, const uint8_t *data, size_t n, Header *hd, CtErr *err)
{
    int subsamp = -1;
    hd->w = hd->h = 0;
    hd->colorspace = -1;
    if (n > ULONG_MAX)
        return ct_fail(err, "JPEG: %zu bytes is too large for TurboJPEG", n);
    if (tjDecompressHeader3(tj, data, (unsigned long)n, &hd->w, &hd->h, &subsamp, &hd->colorspace)) {
        /* libjpeg-turbo 2.1's header call rejects sampling factors outside
         * its named types (say 3x1), which libjpeg itself decodes, as Pillow
         * does: read the size from the frame header then. */
        const char *msg = tjGetErrorStr2(tj);
        if (!strstr(msg, "subsampling") || parse_frame_header(data, n, hd))
            return ct_fail(err, "JPEG: bad header: %s", msg);
    }
    /* A tables-only stream "succeeds" without an image (and sizes unset). */
    if (hd->w == 0 || hd->h == 0)
        return ct_fail(err, "JPEG: no image in the data (a tables-only stream?)");
    return image_check_size(hd->w, hd->h, err) ? ct_failctx(err, "JPEG") : 0;
}

int codec_jpeg_probe(const uint8_t *data, size_t n, int *w, int *h, CtErr *err)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return ct_fail(err, "JPEG: cannot create a TurboJPEG decompressor: %s", tjGetErrorStr2(NULL));
    Header hd;
    int rc = read_header(tj, data, n, &hd, err);
    if (rc == 0) {
        *w = hd.w;
        *h = hd.h;
    }
    tjDestroy(tj);
    return rc;
}

/* The 1/shrink factor from TurboJPEG's table, or NULL when this build lacks it. */
static const tjscalingfactor *find_factor(int shrink)
{
    int count = 0;
    const tjscalingfactor *sf = tjGetScalingFactors(&count);
    for (int i = 0; sf && i < count; i++)
        if (sf[i].num == 1 && sf[i].denom == shrink)
            return &sf[i];
    return NULL;
}

/*
 * Decodes into dst (w x h, the scaled size: TurboJPEG then picks 1/shrink;
 * only for images under 8x8 pixels could a finer factor yield the same size).
 * Warnings are where decoders differ: Pillow refuses data that runs out
 * ("Premature end of JPEG file": a truncated file) but ignores libjpeg's
 * other warnings (corrupt data libjpeg recovers from). So the first decode
 * stops at the first warning, and only a truncation is final; anything else
 * is decoded again, letting libjpeg recover as it does under Pillow.
 */
static int decompress(tjhandle tj, const uint8_t *data, size_t n, uint8_t *dst, int w, int h, int pixfmt,
                      CtErr *err)
{
    if (tjDecompress2(tj, data, (unsigned long)n, dst, w, 0, h, pixfmt, TJ_FLAGS | TJFLAG_STOPONWARNING) == 0)
        return 0;
    const char *msg = tjGetErrorStr2(tj);
    if (tjGetErrorCode(tj) == TJERR_WARNING) {
        if (strstr(msg, "Premature end of JPEG file"))
            return ct_fail(err, "JPEG: truncated file (%s)", msg);
        if (tjDecompress2(tj, data, (unsigned long)n, dst, w, 0, h, pixfmt, TJ_FLAGS) == 0 ||
            tjGetErrorCode(tj) == TJERR_WARNING)
            return 0;
        msg = tjGetErrorStr2(tj);
    }
    return ct_fail(err, "JPEG: %s", msg);
}

/*
 * Pillow reads every CMYK JPEG as Adobe-inverted ("CMYK;I") and converts
 * with cmyk2rgb: out = nk - nk * c / 255 (rounded by MULDIV255), nk = 255 - k.
 * With the stored (inverted) samples s: c = 255 - s_c and nk = s_k.
 */
static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, size_t pixels)
{
    for (size_t i = 0; i < pixels; i++, in += 4, out += 3) {
        int nk = in[3];
        for (int c = 0; c < 3; c++) {
            int t = (255 - in[c]) * nk + 128;
            out[c] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
        }
    }
}

int codec_jpeg_decode(const uint8_t *data, size_t n, int shrink, CtImage *out, CtErr *err)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return ct_fail(err, "JPEG: cannot create a TurboJPEG decompressor: %s", tjGetErrorStr2(NULL));
    int rc = -1;
    uint8_t *cmyk = NULL;
    Header hd;
    if (read_header(tj, data, n, &hd, err))
        goto destroy;
    const tjscalingfactor *sf = find_factor(shrink);
    if (!sf) {
        ct_fail(err, "JPEG: this libturbojpeg cannot scale by 1/%d", shrink);
        goto destroy;
    }
    tjscalingfactor f = *sf;
    int w = TJSCALED(hd.w, f), h = TJSCALED(hd.h, f);
    if (image_alloc(out, w, h, err))
        goto destroy;
    if (hd.colorspace == TJCS_CMYK || hd.colorspace == TJCS_YCCK) {
        /* libjpeg-turbo 2.1 has no CMYK -> RGB conversion: take CMYK and convert as Pillow. */
        cmyk = malloc((size_t)w * h * 4);
        if (!cmyk) {
            ct_fail(err, "JPEG: out of memory for a %dx%d CMYK image", w, h);
            goto free_out;
        }
        if (decompress(tj, data, n, cmyk, w, h, TJPF_CMYK, err))
            goto free_out;
        cmyk_to_rgb(cmyk, out->px, (size_t)w * h);
    } else if (decompress(tj, data, n, out->px, w, h, TJPF_RGB, err)) {
        goto free_out;
    }
    rc = 0;
    goto destroy;
free_out:
    image_free(out);
destroy:
    free(cmyk);
    tjDestroy(tj);
    return rc;
}

/*
 * Region decode (the train transform's crop box) through libjpeg's own API:
 * jpeg_crop_scanline limits the IDCT, upsampling and colour conversion to the
 * box's iMCU columns, jpeg_skip_scanlines skips the rows above it (entropy
 * decoding only), and decoding stops after the box's last row. libjpeg-turbo
 * treats the cropped columns' edges as image edges when upsampling chroma, so
 * the decode reaches REGION_MARGIN pixels past the box on every side (more
 * than one iMCU of 16 pixels at full scale) and cuts the box out of that:
 * the box's pixels then equal the full decode's (tests/test_image.c checks
 * this on random boxes). Anything outside the plain case (CMYK/YCCK, a
 * progressive or multi-scan file, any libjpeg warning or error) falls back
 * to codec_jpeg_decode and a copy, so its pixels and errors are unchanged.
 */
#ifndef REGION_MARGIN
#define REGION_MARGIN 4
#endif

typedef struct RegionErr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
} RegionErr;

static void region_error_exit(j_common_ptr c) { longjmp(((RegionErr *)c->err)->jb, 1); }

/* A warning (level < 0) abandons the fast path: the fallback handles warnings as above. */
static void region_emit(j_common_ptr c, int level)
{
    if (level < 0)
        longjmp(((RegionErr *)c->err)->jb, 1);
}

static void region_output(j_common_ptr c) { (void)c; }

/* 0: out holds the box; 1: take the fallback (nothing allocated). */
static int region_fast(const uint8_t *data, size_t n, int shrink, int sw, int sh, int x0, int y0, int x1, int y1,
                       CtImage *out)
{
    struct jpeg_decompress_struct cinfo;
    RegionErr em;
    uint8_t *volatile scratch = NULL;
    out->px = out->alpha = NULL;
    out->w = out->h = 0;
    cinfo.err = jpeg_std_error(&em.pub);
    em.pub.error_exit = region_error_exit;
    em.pub.emit_message = region_emit;
    em.pub.output_message = region_output;
    if (setjmp(em.jb)) {
        jpeg_destroy_decompress(&cinfo);
        free(scratch);
        image_free(out);
        return 1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)n);
    if (jpeg_read_header(&cinfo, TRUE) != JPEG_HEADER_OK ||
        (cinfo.jpeg_color_space != JCS_YCbCr && cinfo.jpeg_color_space != JCS_GRAYSCALE) ||
        jpeg_has_multiple_scans(&cinfo) || cinfo.progressive_mode)
        longjmp(em.jb, 1);
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned)shrink;
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.out_color_space = JCS_EXT_RGB;
    jpeg_start_decompress(&cinfo);
    if ((int)cinfo.output_width != sw || (int)cinfo.output_height != sh || cinfo.output_components != 3)
        longjmp(em.jb, 1);
    int mx0 = x0 - REGION_MARGIN < 0 ? 0 : x0 - REGION_MARGIN;
    int mx1 = x1 + REGION_MARGIN > sw ? sw : x1 + REGION_MARGIN;
    int my0 = y0 - REGION_MARGIN < 0 ? 0 : y0 - REGION_MARGIN;
    JDIMENSION xoff = (JDIMENSION)mx0, cw = (JDIMENSION)(mx1 - mx0);
    if (mx0 != 0 || mx1 != sw)
        jpeg_crop_scanline(&cinfo, &xoff, &cw);
    if ((int)xoff > mx0 || (int)(xoff + cw) < mx1 || cinfo.output_width != cw)
        longjmp(em.jb, 1);
    if (my0 > 0 && jpeg_skip_scanlines(&cinfo, (JDIMENSION)my0) != (JDIMENSION)my0)
        longjmp(em.jb, 1);
    int full_rows = (int)xoff == x0 && (int)cw == x1 - x0;
    scratch = malloc((size_t)cw * 3);
    out->px = malloc((size_t)(x1 - x0) * (y1 - y0) * 3);
    if (!scratch || !out->px)
        longjmp(em.jb, 1);
    out->w = x1 - x0;
    out->h = y1 - y0;
    size_t row = (size_t)out->w * 3;
    for (int y = my0; y < y1; y++) {
        if ((int)cinfo.output_scanline != y)
            longjmp(em.jb, 1);
        JSAMPROW dst = full_rows && y >= y0 ? out->px + (size_t)(y - y0) * row : scratch;
        if (jpeg_read_scanlines(&cinfo, &dst, 1) != 1)
            longjmp(em.jb, 1);
        if (!full_rows && y >= y0)
            memcpy(out->px + (size_t)(y - y0) * row, scratch + (size_t)(x0 - (int)xoff) * 3, row);
    }
    jpeg_abort_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    free(scratch);
    return 0;
}

int codec_jpeg_decode_region(const uint8_t *data, size_t n, int shrink, int w, int h, int x0, int y0, int x1,
                             int y1, CtImage *out, CtErr *err)
{
    int sw = (w + shrink - 1) / shrink, sh = (h + shrink - 1) / shrink;
    if (x0 < 0 || y0 < 0 || x1 > sw || y1 > sh || x0 >= x1 || y0 >= y1)
        return ct_fail(err, "JPEG: region %d,%d..%d,%d is outside the %dx%d decode", x0, y0, x1, y1, sw, sh);
    if ((x0 != 0 || y0 != 0 || x1 != sw || y1 != sh) && n <= ULONG_MAX &&
        region_fast(data, n, shrink, sw, sh, x0, y0, x1, y1, out) == 0)
        return 0;
    CtImage full;
    if (codec_jpeg_decode(data, n, shrink, &full, err))
        return -1;
    if (full.w != sw || full.h != sh) {
        image_free(&full);
        return ct_fail(err, "JPEG: decoded %dx%d, expected %dx%d", full.w, full.h, sw, sh);
    }
    return image_take_box(&full, x0, y0, x1, y1, out, err);
}
