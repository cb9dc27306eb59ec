/*
 * Fuzz target for the PyTorch checkpoint reader (runtime/torch_file.h, with
 * the zip reader and the restricted unpickler under it): the input is a
 * whole file, parsed from memory by torch_parse, once for the state_dict
 * and once for the model EMA's. A file it accepts must give what an StFile
 * promises (unique names, sizes that match dtype and shape, every byte
 * there to read, the metadata); a refusal must say why and leave nothing.
 * Built without the zip CRC check (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION)
 * by tests/fuzz/CMakeLists.txt with fuzz_driver.c, and by tools/fuzz.sh with
 * libFuzzer. Any crash, leak or sanitizer report is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/torch_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile unsigned sink; /* so the reads of every tensor byte stay */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int use_ema = 0; use_ema < 2; use_ema++) {
        StFile f;
        CtErr err = {{0}};
        int from_ema = -1;
        if (torch_parse("fuzz.pth", data, size, use_ema, &f, &from_ema, &err) != 0) {
            if (f.tensors || f.ntensors || f.nmeta || !err.msg[0])
                abort();
            continue;
        }
        if (from_ema != 0 && (from_ema != 1 || !use_ema))
            abort();
        unsigned sum = 0;
        for (int i = 0; i < f.ntensors; i++) {
            const StTensor *t = &f.tensors[i];
            if (t->ndim < 0 || t->ndim > ST_MAX_DIMS || st_find(&f, t->name) != t || !t->data ||
                (uint64_t)st_numel(t) * ct_dtype_size(t->dtype) != t->nbytes)
                abort();
            for (size_t b = 0; b < t->nbytes; b++)
                sum += ((const uint8_t *)t->data)[b];
        }
        for (int i = 0; i < f.nmeta; i++)
            if (st_meta(&f, f.meta_keys[i]) != f.meta_vals[i])
                abort();
        sink = sum;
        st_free(&f);
    }
    return 0;
}
