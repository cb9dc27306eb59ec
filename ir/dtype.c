#include "dtype.h"

#include <string.h>

static const struct {
    const char *name, *st;
    size_t size;
    int is_float;
} dtypes[CT_NDTYPE] = {
    [CT_F32] = {"f32", "F32", 4, 1},
    [CT_F64] = {"f64", "F64", 8, 1},
    [CT_F16] = {"f16", "F16", 2, 1},
    [CT_BF16] = {"bf16", "BF16", 2, 1},
    [CT_I32] = {"i32", "I32", 4, 0},
    [CT_I64] = {"i64", "I64", 8, 0},
    [CT_U8] = {"u8", "U8", 1, 0},
};

size_t ct_dtype_size(CtDType t) { return dtypes[t].size; }
const char *ct_dtype_name(CtDType t) { return dtypes[t].name; }
const char *ct_dtype_st_name(CtDType t) { return dtypes[t].st; }
int ct_dtype_is_float(CtDType t) { return dtypes[t].is_float; }

int ct_dtype_from_st_name(const char *s)
{
    for (int i = 0; i < CT_NDTYPE; i++)
        if (strcmp(dtypes[i].st, s) == 0)
            return i;
    return -1;
}
