/*
 * A ViT's learned position embedding moved to another patch grid, as timm's
 * resample_abs_pos_embed (timm/layers/pos_embed.py) does it when
 * vision_transformer.py's checkpoint_filter_fn loads pretrained weights
 * (its defaults: bicubic, antialias=True, align_corners None).
 */
#ifndef CTIMM_TRAIN_POS_EMBED_H
#define CTIMM_TRAIN_POS_EMBED_H

/* src is [prefix + old_h*old_w, dim] (tokens in row-major grid order after
 * the prefix tokens: class token and the like), dst [prefix + new_h*new_w,
 * dim]. The prefix tokens are copied; the grid is resized as torch's
 * F.interpolate(mode='bicubic', align_corners=False, antialias=True). */
void pos_embed_resample(const float *src, int prefix, int old_h, int old_w, int new_h, int new_w, int dim,
                        float *dst);

#endif
