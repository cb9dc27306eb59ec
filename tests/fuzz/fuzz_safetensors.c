/*
 * Fuzz target for the safetensors reader (runtime/safetensors.h): the input
 * is a whole file, parsed from memory by st_parse. A file it accepts must
 * hold what its header promised (unique names, sizes that match dtype and
 * shape, the metadata); a refusal must say why and leave no tensors. Built
 * with libFuzzer by tools/fuzz.sh, and with tests/fuzz/fuzz_driver.c for
 * ctest's sanitizer build. Any crash, leak or sanitizer report is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile unsigned sink; /* so the reads of every tensor byte stay */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    StFile f;
    CtErr err = {{0}};
    if (st_parse("fuzz.safetensors", data, size, &f, &err) != 0) {
        if (f.tensors || f.ntensors || f.nmeta || !err.msg[0])
            abort();
        return 0;
    }
    unsigned sum = 0;
    for (int i = 0; i < f.ntensors; i++) {
        const StTensor *t = &f.tensors[i];
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS || st_find(&f, t->name) != t || !t->data ||
            (uint64_t)st_numel(t) * ct_dtype_size(t->dtype) != t->nbytes)
            abort();
        for (size_t b = 0; b < t->nbytes; b++) /* every byte is there to read */
            sum += ((const uint8_t *)t->data)[b];
    }
    for (int i = 0; i < f.nmeta; i++)
        if (st_meta(&f, f.meta_keys[i]) != f.meta_vals[i])
            abort();
    sink = sum;
    st_free(&f);
    return 0;
}
