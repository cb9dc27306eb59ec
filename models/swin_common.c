#include "models/swin_common.h"

#include <math.h>
#include <stdlib.h>

/* torch.roll(x, shift, dim): out[i] = x[(i - shift) mod n]. */
static ValueId roll(Builder *b, ValueId x, int dim, int64_t shift)
{
    int64_t n = b_shape(b, x)->d[dim], s = ((-shift) % n + n) % n;
    if (s == 0)
        return x;
    ValueId parts[2] = {f_slice(b, x, dim, s, n, 1), f_slice(b, x, dim, 0, s, 1)};
    return f_concat(b, 2, parts, dim);
}

/* F.pad of x [B,H,W,C] by ph rows and pw columns of zeros at the end (a
 * negative amount crops). */
static ValueId pad_hw(Builder *b, ValueId x, int64_t ph, int64_t pw)
{
    if (ph == 0 && pw == 0)
        return x;
    x = f_permute(b, x, 4, (int64_t[]){0, 3, 1, 2});
    x = f_pad(b, x, 0, ph, 0, pw, 0);
    return f_permute(b, x, 4, (int64_t[]){0, 2, 3, 1});
}

ValueId swin_rel_pos_index(Builder *b, int64_t wh, int64_t ww)
{
    int64_t N = wh * ww;
    double *idx = malloc(sizeof *idx * (size_t)(N * N));
    if (!idx)
        return b_fail(b, "out of memory for a relative position index of %lld tokens", (long long)N);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++)
            idx[i * N + j] = (double)((i / ww - j / ww + wh - 1) * (2 * ww - 1) + (i % ww - j % ww + ww - 1));
    ValueId v = b_const(b, "relative_position_index", (CtShape){2, {N, N}}, CT_I32, idx);
    free(idx);
    return v;
}

/* get_attn_mask for the padded Hp x Wp grid shifted by (sh, sw): the
 * grid's three bands a dim (before the last window, the last window's
 * unshifted part, the part the roll brought in) number nine regions; tokens
 * of a window in different regions get -100. [nW, N, N]. */
static ValueId shift_mask(Builder *b, int64_t Hp, int64_t Wp, int64_t wh, int64_t ww, int64_t sh, int64_t sw)
{
    int64_t nw = (Hp / wh) * (Wp / ww), N = wh * ww;
    double *m = malloc(sizeof *m * (size_t)(nw * N * N));
    int *region = malloc(sizeof *region * (size_t)N);
    if (!m || !region) {
        free(m);
        free(region);
        return b_fail(b, "out of memory for a shifted-window mask of %lld windows", (long long)nw);
    }
    for (int64_t w = 0; w < nw; w++) {
        for (int64_t i = 0; i < N; i++) {
            int64_t r = w / (Wp / ww) * wh + i / ww, c = w % (Wp / ww) * ww + i % ww;
            int hr = r < Hp - wh ? 0 : r < Hp - sh ? 1 : 2, wr = c < Wp - ww ? 0 : c < Wp - sw ? 1 : 2;
            region[i] = hr * 3 + wr;
        }
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < N; j++)
                m[(w * N + i) * N + j] = region[i] == region[j] ? 0 : -100;
    }
    ValueId v = b_const(b, "attn_mask", (CtShape){3, {nw, N, N}}, CT_F32, m);
    free(m);
    free(region);
    return v;
}

ValueId swin_shifted_window_attention(Builder *b, ValueId x, int heads, int window, int shifted, SwinWindowAttn attn)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[1], W = s->d[2], C = s->d[3];
    int64_t wh = H <= window ? H : window, ww = W <= window ? W : window;
    int64_t sh = shifted && H > wh ? window / 2 : 0, sw = shifted && W > ww ? window / 2 : 0;
    x = roll(b, roll(b, x, 1, -sh), 2, -sw);
    int64_t ph = (wh - H % wh) % wh, pw = (ww - W % ww) % ww, Hp = H + ph, Wp = W + pw;
    x = pad_hw(b, x, ph, pw);
    ValueId mask = sh || sw ? shift_mask(b, Hp, Wp, wh, ww, sh, sw) : -1;
    int64_t nh = Hp / wh, nw = Wp / ww;
    x = f_reshape(b, x, 6, (int64_t[]){B, nh, wh, nw, ww, C});
    x = f_permute(b, x, 6, (int64_t[]){0, 1, 3, 2, 4, 5});
    x = attn(b, f_reshape(b, x, 3, (int64_t[]){B * nh * nw, wh * ww, C}), heads, wh, ww, mask);
    x = f_reshape(b, x, 6, (int64_t[]){B, nh, nw, wh, ww, C});
    x = f_permute(b, x, 6, (int64_t[]){0, 1, 3, 2, 4, 5});
    x = pad_hw(b, f_reshape(b, x, 4, (int64_t[]){B, Hp, Wp, C}), -ph, -pw);
    return roll(b, roll(b, x, 1, sh), 2, sw);
}

ValueId swin_merge_2x2(Builder *b, ValueId x)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[1] + s->d[1] % 2, W = s->d[2] + s->d[2] % 2, C = s->d[3];
    x = pad_hw(b, x, s->d[1] % 2, s->d[2] % 2);
    x = f_reshape(b, x, 6, (int64_t[]){B, H / 2, 2, W / 2, 2, C});
    x = f_permute(b, x, 6, (int64_t[]){0, 1, 3, 4, 2, 5});
    return f_reshape(b, x, 4, (int64_t[]){B, H / 2, W / 2, 4 * C});
}

ValueId swin_build(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x, SwinBlock block, SwinMerge merge)
{
    const SwinArch *v = m->arch;
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0];
    if (s->d[2] % v->patch || s->d[3] % v->patch)
        return b_fail(b, "image size %lldx%lld is not a multiple of the patch size %d", (long long)s->d[2],
                      (long long)s->d[3], v->patch);
    b_push(b, "patch_embed");
    x = nn_conv2d(b, "proj", x, v->embed_dim, v->patch, (ConvOpts){.stride = v->patch, .bias = 1});
    x = nn_layer_norm(b, "norm", f_permute(b, x, 4, (int64_t[]){0, 2, 3, 1}), 1e-5);
    b_pop(b);
    int total = 0, idx = 0;
    for (int i = 0; i < 4; i++)
        total += v->depths[i];
    b_push(b, "layers");
    for (int i = 0; i < 4; i++) {
        b_push(b, "%d", i);
        if (i > 0)
            x = merge(b, x);
        b_push(b, "blocks");
        for (int j = 0; j < v->depths[i]; j++, idx++) {
            /* calculate_drop_path_rates(stagewise): linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            b_push(b, "%d", j);
            x = block(b, x, v->heads[i], v->window, j % 2, dpr);
            b_pop(b);
        }
        b_pop(b);
        b_pop(b);
    }
    b_pop(b);
    x = nn_layer_norm(b, "norm", x, 1e-5);
    if (x < 0)
        return -1;
    s = b_shape(b, x);
    int64_t H = s->d[1], W = s->d[2], C = s->d[3];
    /* ClassifierHead over NHWC: the mean over H and W */
    x = f_scale_shift(b, f_reduce_sum(b, x, 2 | 4), 1.0 / (double)(H * W), 0.0);
    x = f_reshape(b, x, 2, (int64_t[]){B, C});
    int classes = model_num_classes(m, a);
    if (classes == 0)
        return x;
    x = f_dropout(b, x, a->drop_rate);
    return nn_linear(b, "head.fc", x, classes,
                     (LinearOpts){.weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
}

ValueId swin_post_norm(Builder *b, const char *name, ValueId x)
{
    if (b->e.failed || x < 0)
        return -1;
    const CtShape *s = b_shape(b, x);
    CtShape d = {1, {s->d[s->ndim - 1]}};
    double eps = 1e-5;
    int64_t dt = b_dtype(b, x); /* y's */
    b_push(b, "%s", name);
    ValueId in[3] = {x, b_param(b, "weight", d, init_zeros()), b_param(b, "bias", d, init_zeros())};
    ValueId y = b_node(b, CT_OP_layer_norm, 3, in, &dt, 1, &eps, 1, 0);
    b_pop(b);
    return y;
}

ValueId swin_window_sdpa(Builder *b, ValueId qkv, int heads, ValueId pos, ValueId mask, ValueId logit_scale)
{
    const CtShape *s = b_shape(b, qkv);
    int64_t Bw = s->d[0], N = s->d[1], hd = s->d[2] / 3 / heads, nw = mask >= 0 ? b_shape(b, mask)->d[0] : 1;
    int64_t qs[4] = {Bw / nw, nw * heads, N, hd};
    if (mask >= 0)
        pos = f_add(b, f_reshape(b, mask, 4, (int64_t[]){nw, 1, N, N}), pos);
    pos = f_reshape(b, pos, 4, (int64_t[]){1, nw * heads, N, N});
    ValueId t[3];
    f_split_heads(b, qkv, 3, heads, t);
    double scale = 1.0 / sqrt((double)hd);
    if (logit_scale >= 0) {
        ValueId g = f_exp(b, f_clamp(b, f_reshape(b, logit_scale, 3, (int64_t[]){heads, 1, 1}), -HUGE_VAL,
                                     log(1 / 0.01)));
        t[0] = f_mul(b, f_normalize(b, t[0], 1e-12), g);
        t[1] = f_normalize(b, t[1], 1e-12);
        scale = 1.0;
    }
    for (int i = 0; i < 3; i++)
        t[i] = f_reshape(b, t[i], 4, qs);
    ValueId x = f_sdpa_bias(b, t[0], t[1], t[2], pos, scale);
    return f_merge_heads(b, f_reshape(b, x, 4, (int64_t[]){Bw, heads, N, hd}));
}
