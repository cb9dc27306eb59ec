#!/usr/bin/env python3
"""Reference layer-decay param groups from timm for tests/test_layer_decay.c.

For each case, timm's create_optimizer_v2 (as train.py calls it with
--layer-decay, --layer-decay-min-scale) on the model: each parameter's layer
id (group_parameters over group_matcher(coarse=False), or auto_group_layers for a model
without one, as param_groups_layer_decay computes it) and the lr_scale of the param group the
optimizer put it in.

    PYTHONPATH=/opt/timm python3 tools/make_layer_decay_refs.py > tests/data/layer_decay_refs.txt

Format: "model NAME DECAY MIN_SCALE NUM_LAYERS", then one "NAME LAYER_ID LR_SCALE"
line per parameter in state_dict order, then "end".
"""
import timm
from timm.models import group_parameters
from timm.optim._param_groups import auto_group_layers
from timm.optim import create_optimizer_v2

CASES = [('test_vit', 0.75, 0.0), ('test_resnet', 0.75, 0.0), ('test_convnext', 0.75, 0.1),
         ('test_efficientnet', 0.75, 0.0), ('mobilenetv3_small_100', 0.75, 0.0), ('poolformer_s12', 0.75, 0.0),
         ('hgnetv2_b0', 0.75, 0.0), ('eva02_tiny_patch14_224', 0.75, 0.0),
         ('swin_tiny_patch4_window7_224', 0.75, 0.0), ('test_vit_relpos', 0.75, 0.0)]

for name, decay, min_scale in CASES:
    model = timm.create_model(name)
    if hasattr(model, 'group_matcher'):
        layer = group_parameters(model, model.group_matcher(coarse=False), reverse=True)
    else:
        layer = auto_group_layers(model)
    opt = create_optimizer_v2(model, 'sgd', lr=0.1, weight_decay=0.05, layer_decay=decay,
                              layer_decay_min_scale=min_scale)
    scale = {id(p): g['lr_scale'] for g in opt.param_groups for p in g['params']}
    print('model %s %r %r %d' % (name, decay, min_scale, max(layer.values()) + 1))
    for pname, p in model.named_parameters():
        print('%s %d %r' % (pname, layer[pname], scale[id(p)]))
    print('end')
