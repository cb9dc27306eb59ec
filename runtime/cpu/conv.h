/*
 * Private to the cpu backend's convolutions (gemm_ops.c, depthwise_ops.c,
 * depthwise_nhwc.c, winograd_ops.c, stem_conv.c):
 * one convolution's geometry from its shapes and attributes, and the
 * depthwise convolutions (one input and one output channel a group), which
 * run directly instead of as one-channel GEMMs that would only add the
 * im2col copy, the 3x3 stride-1 ones by Winograd's algorithm
 * (winograd_ops.c), as GEMMs of fewer multiply-adds than im2col's, and the
 * forwards over a few input channels (stem_conv.c), whose GEMM would be too
 * short to run well.
 */
#ifndef CTIMM_CPU_CONV_H
#define CTIMM_CPU_CONV_H

#include "runtime/cpu/cpu.h"

enum { STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, GROUPS };

/* One convolution's geometry, for one group. */
typedef struct ConvGeom {
    int64_t N, C, H, W, O, CG, OG, KH, KW, OH, OW, groups;
    const int64_t *a;
    int pointwise; /* 1x1, stride 1, no padding: the input is its own column matrix */
    int nhwc;      /* the activations stored channels-last (the Winograd kernels read it) */
} ConvGeom;

static inline ConvGeom conv_geom(const CtShape *x, const CtShape *w, const CtShape *y, const int64_t *a)
{
    ConvGeom c = {x->d[0], x->d[1], x->d[2], x->d[3], w->d[0], w->d[1], 0, w->d[2], w->d[3], y->d[2], y->d[3],
                  a[GROUPS], a, 0, 0};
    c.OG = c.O / c.groups;
    c.pointwise = c.KH == 1 && c.KW == 1 && a[STRIDE_H] == 1 && a[STRIDE_W] == 1 && a[PAD_H] == 0 && a[PAD_W] == 0;
    return c;
}

/* The output columns ow whose input column ow * stride + off is in [0, W). */
static inline void valid_cols(const ConvGeom *c, int64_t off, int64_t *lo, int64_t *hi)
{
    int64_t s = c->a[STRIDE_W];
    *lo = off >= 0 ? 0 : (-off + s - 1) / s;
    *hi = c->W - 1 - off >= 0 ? (c->W - 1 - off) / s + 1 : 0;
    *hi = *hi < c->OW ? *hi : c->OW;
    *lo = *lo < *hi ? *lo : *hi;
}

/* y [N,C,OH,OW] = x [N,C,H,W] (*) w [C,1,KH,KW] (+ bias [C] unless NULL). */
void depthwise_conv(const ConvGeom *c, const float *x, const float *w, const float *bias, float *y);
/* dx [N,C,H,W] from dy [N,C,OH,OW] and w. */
void depthwise_conv_grad_input(const ConvGeom *c, const float *dy, const float *w, float *dx);
/* dw [C,1,KH,KW] from x and dy, summed over the batch. */
void depthwise_conv_grad_weight(const ConvGeom *c, const float *x, const float *dy, float *dw);

/* As the three above, on channels-last x [N,H,W,C] and y, dy [N,OH,OW,C]
 * (depthwise_nhwc.c); w and dw as above. */
void depthwise_nhwc(const ConvGeom *c, const float *x, const float *w, const float *bias, float *y);
void depthwise_nhwc_grad_input(const ConvGeom *c, const float *dy, const float *w, float *dx);
void depthwise_nhwc_grad_weight(const ConvGeom *c, const float *x, const float *dy, float *dw);

/* A 3x3, stride-1, undilated, ungrouped convolution, padding at most 2,
 * with at least 16 channels in and out and a plane of at least 4x4: the
 * ones the Winograd kernels below take. */
int winograd_applies(const ConvGeom *c);
/* As depthwise_conv and its gradients, for a convolution winograd_applies
 * to, on NCHW activations or (c->nhwc) NHWC ones. */
void winograd_conv(const ConvGeom *c, const float *x, const float *w, const float *bias, float *y);
void winograd_conv_grad_input(const ConvGeom *c, const float *dy, const float *w, float *dx);
void winograd_conv_grad_weight(const ConvGeom *c, const float *x, const float *dy, float *dw);

/* A convolution over at most 4 input channels (an image's stem), ungrouped,
 * not pointwise, C*KH*KW at most 64, KW at most 16, on NCHW values: the
 * forward stem_conv.c computes directly. */
int stem_conv_applies(const ConvGeom *c);
/* As depthwise_conv, for a convolution stem_conv_applies to; with act
 * (NULL: none), also ya = act(y), band by band (ya may be y). */
void stem_conv(const ConvGeom *c, const float *x, const float *w, const float *bias, const Node *act, float *y,
               float *ya);

#endif
