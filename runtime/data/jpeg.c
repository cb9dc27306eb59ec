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
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

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
