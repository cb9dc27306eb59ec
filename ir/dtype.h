/* Element types of ctimm tensors and their sizes and names. */
#ifndef CTIMM_DTYPE_H
#define CTIMM_DTYPE_H

#include <stddef.h>

typedef enum CtDType {
    CT_F32,
    CT_F64,
    CT_F16,
    CT_BF16,
    CT_I32,
    CT_I64,
    CT_U8,
    CT_NDTYPE
} CtDType;

size_t ct_dtype_size(CtDType t);
/* Short lower-case name used in IR dumps: "f32", "i64", ... */
const char *ct_dtype_name(CtDType t);
/* Name as safetensors spells it: "F32", "I64", ...; -1 when unknown. */
const char *ct_dtype_st_name(CtDType t);
int ct_dtype_from_st_name(const char *s);
int ct_dtype_is_float(CtDType t);

#endif
