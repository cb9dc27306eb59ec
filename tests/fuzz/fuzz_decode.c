/*
 * libFuzzer entry point for the image decoders: probe, decode at full size
 * and at 1/2, and as 'RGBA', and resize what decoded to a small box taken
 * from the input's last bytes. Built and run with libFuzzer by tools/fuzz.sh decode, and
 * with tests/fuzz/fuzz_driver.c in the sanitizer build's ctest;
 * FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION skips PNG checksums and lowers the
 * pixel limit (see runtime/data/image_codec.h) so runs stay deep and fast.
 * Any crash, leak, sanitizer report or inconsistency found here is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Resizes a box chosen by the last 8 input bytes to at most 48x48. */
static void fuzz_resize(const CtImage *img, const uint8_t *data, size_t size)
{
    uint8_t b[8] = {0};
    memcpy(b, data + (size > 8 ? size - 8 : 0), size < 8 ? size : 8);
    CtBox box = {img->w * (b[0] / 512.0), img->h * (b[1] / 512.0), 0, 0};
    box.x1 = box.x0 + (img->w - box.x0) * (b[2] / 255.0);
    box.y1 = box.y0 + (img->h - box.y0) * (b[3] / 255.0);
    CtImage out;
    CtErr err;
    if (image_resize(img, box, 1 + b[4] % 48, 1 + b[5] % 48, (CtInterp)(b[6] % 3), &out, &err) == 0) {
        if (!out.px)
            abort();
        image_free(&out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    CtErr err;
    int w = 0, h = 0;
    int probed = image_probe(data, size, &w, &h, &err) == 0;
    for (int pass = 0; pass < 3; pass++) {
        int shrink = pass == 1 ? 2 : 1, rgba = pass == 2;
        CtImage img;
        if ((rgba ? image_decode_rgba : image_decode)(data, size, shrink, &img, &err) != 0) {
            if (img.px || img.alpha || !err.msg[0])
                abort(); /* a failure must leave no image and say why */
            continue;
        }
        if (img.alpha && !rgba)
            abort();
        /* A decodable image has a probe-able header, and the size promised
         * (JPEGs scaled by 1/shrink, PNGs always full size). */
        int s = data[0] == 0xFF ? shrink : 1;
        if (!probed || img.w != (w + s - 1) / s || img.h != (h + s - 1) / s)
            abort();
        /* Touch every byte so ASan/MSan-style tools see the whole buffer. */
        unsigned sum = 0;
        for (size_t i = 0; i < (size_t)img.w * img.h * 3; i++)
            sum += img.px[i] + (img.alpha && i < (size_t)img.w * img.h ? img.alpha[i] : 0);
        if (sum == 0xFFFFFFFFu)
            abort();
        if (shrink == 1 && (!rgba || img.alpha))
            fuzz_resize(&img, data, size);
        image_free(&img);
    }
    return 0;
}
