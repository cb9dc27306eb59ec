/*
 * The convolution a library step computes, as cuDNN sees it: a pure
 * translation of a conv2d, conv2d_grad_input or conv2d_grad_weight step
 * into cuDNN's sizes and formats, with no CUDA in it, so that it is tested
 * on any machine.
 *
 *   x [n, c, h, w]   weight [k, c/groups, r, s]   y [n, k, p, q]
 *
 * Every direction is described by the forward convolution's x, w and y:
 * forward reads x and w and writes y; backward-data reads dy (as y) and w
 * and writes dx (as x); backward-filter reads x and dy and writes dw. A
 * tensor's format is its value's layout (channels_last: NHWC); a value
 * whose two layouts are the same bytes (c == 1, or h == w == 1; so a 1x1
 * filter) takes the step's activation format. The forward epilogue is the prefix of the
 * step's parts cudnnConvolutionBiasActivationForward computes: bias (k
 * values), residual (its z input) and ReLU; or, where the launch plan asks
 * (`stats`), the statistics of the batch norm that reads y, which a
 * forward without those parts makes through cuDNN's graph API.
 */
#ifndef CTIMM_CONV_DESC_H
#define CTIMM_CONV_DESC_H

#include "codegen/cuda/gemm_desc.h"

typedef enum ConvDir { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER } ConvDir;

typedef struct ConvDesc {
    ConvDir dir;
    int64_t n, c, h, w, k, r, s, p, q;
    int64_t pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups;
    int x_nhwc, w_nhwc, y_nhwc;
    CtDType x_type, w_type, y_type, bias_type; /* bias_type: the epilogue's bias, else y_type */
    ValueId x, wt, y; /* the values in the forward's roles (see above) */
    EpiDesc epi;      /* CONV_FWD: epi.d is what the call writes; else epi.d = the output, no parts */
    long long stats;  /* CONV_FWD: the call also sums y's channels and their squares (cuDNN's GenStats), f32
                       * into the program's kept region from this byte, C then C; -1: not */
} ConvDesc;

int conv_desc(const Graph *g, const FusePlan *p, const FuseStep *st, ConvDesc *d, CtErr *err);

/* One line naming every field that shapes cuDNN's choice of algorithm (no
 * value ids): the key of the choice cached on disk. */
void conv_desc_key(const ConvDesc *d, char *buf, size_t n);

#endif
