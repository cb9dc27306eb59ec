/* Host tensors at the runtime's edges (inputs, outputs, files), and the
 * conversions between element types and the ref backend's doubles. */
#ifndef CTIMM_TENSOR_H
#define CTIMM_TENSOR_H

#include "ir/ir.h"

/* Dense, row-major; data is malloc'd and owned by whoever holds the tensor. */
typedef struct CtTensor {
    CtType type;
    void *data;
} CtTensor;

void tensor_alloc(CtTensor *t, CtType type);
void tensor_free(CtTensor *t);
size_t tensor_nbytes(const CtTensor *t);

/* Element conversions for storage (f16 and bf16 as their IEEE bits, rounded
 * to nearest even); -1 for a dtype they do not know. */
int elems_to_double(const void *src, CtDType dt, int64_t n, double *dst);
int elems_from_double(const double *src, CtDType dt, int64_t n, void *dst);
/* f32 <-> f32, f16 or bf16 storage (the cpu backend's widened kernels). */
void elems_to_f32(const void *src, CtDType dt, int64_t n, float *dst);
void elems_from_f32(const float *src, CtDType dt, int64_t n, void *dst);
/* Rounds doubles in place to what dtype dt can hold (round to nearest even,
 * overflow to infinity), so f16/bf16 graphs run on the ref backend. */
void elems_round(double *x, CtDType dt, int64_t n);

#endif
