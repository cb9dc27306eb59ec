# Command-line tests: parity with timm through ctimm-run, ctimm-compile's
# summary and errors, and golden IR dumps.
set(DATA ${CMAKE_CURRENT_SOURCE_DIR}/data)
set(FAIL ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.sh)
set(RUN $<TARGET_FILE:ctimm-run>)
set(COMPILE $<TARGET_FILE:ctimm-compile>)

# Every tensor of timm's reference step (logits, loss, BN stats, grad.*, sgd.*,
# adamw.*) within 1e-4 relative error, but adamw.* within 1e-3: AdamW's first
# step is lr*g/(|g|+1e-8), so an element whose gradient is float32 noise
# (~1e-9, where the tensor's gradients are ~1e-3) moves by up to lr either
# way. test_vit has two such elements (blocks.5.attn.proj.weight[2048],
# blocks.1.mlp.fc1.weight[8849]; float64 timm puts their gradients at 1.7e-9
# and 7.6e-10, ctimm's at 1.8e-9 and 7.4e-10, timm's float32 at 5.8e-9 and
# -1.4e-9), which give adamw errors of 1.7e-4. test_train checks the AdamW
# rule itself on timm's own gradients to 1e-6.
foreach(model test_resnet test_vit test_efficientnet test_convnext)
  add_test(NAME parity_${model} COMMAND sh -c
    "${RUN} --model ${model} --vectors ${DATA}/${model}.safetensors --out ${model}.out.safetensors && \
     ${RUN} --compare ${model}.out.safetensors ${DATA}/${model}.safetensors --tol 1e-4 --tol-for adamw. 1e-3")
endforeach()
# The same step through the channels_last layout pass.
add_test(NAME parity_test_resnet_channels_last COMMAND sh -c
  "${RUN} --model test_resnet --channels-last --vectors ${DATA}/test_resnet.safetensors --out cl.out.safetensors && \
   ${RUN} --compare cl.out.safetensors ${DATA}/test_resnet.safetensors --tol 1e-4 --tol-for adamw. 1e-3")
# --compare must fail on different tensors (test_vit's logits against test_resnet's).
set_tests_properties(parity_test_vit PROPERTIES FIXTURES_SETUP vit_out)
set_tests_properties(parity_test_resnet PROPERTIES FIXTURES_SETUP resnet_out)
add_test(NAME compare_detects_difference COMMAND ${FAIL} "logits.eval .*FAIL"
  ${RUN} --compare test_vit.out.safetensors ${DATA}/test_resnet.safetensors)
set_tests_properties(compare_detects_difference PROPERTIES FIXTURES_REQUIRED vit_out)
add_test(NAME run_names_missing_weight COMMAND ${FAIL} "'state.cls_token' is missing"
  ${RUN} --model test_vit --vectors ${DATA}/test_resnet.safetensors --out bad.safetensors)
add_test(NAME run_unknown_backend COMMAND ${FAIL} "unknown backend 'gpu'"
  ${RUN} --model test_vit --backend gpu --vectors ${DATA}/test_vit.safetensors --out bad.safetensors)

# A ctimm checkpoint (timm's init scheme, state_dict names) loads back by name,
# and one of another model is refused naming the first missing weight.
add_test(NAME checkpoint_roundtrip COMMAND sh -c
  "${COMPILE} --model test_vit --save-weights vit_init.safetensors --seed 5 && \
   ${COMPILE} --model test_resnet --save-weights resnet_init.safetensors && \
   ${RUN} --model test_vit --weights vit_init.safetensors --vectors ${DATA}/test_vit.safetensors --out init.out.safetensors")
set_tests_properties(checkpoint_roundtrip PROPERTIES FIXTURES_SETUP ckpt)
add_test(NAME run_weights_of_other_model COMMAND ${FAIL} "resnet_init.safetensors: 'cls_token' is missing"
  ${RUN} --model test_vit --weights resnet_init.safetensors --vectors ${DATA}/test_vit.safetensors --out x.safetensors)
set_tests_properties(run_weights_of_other_model PROPERTIES FIXTURES_REQUIRED ckpt)
add_test(NAME compile_summary COMMAND ${COMPILE} --model vit_base_patch32_384)
set_tests_properties(compile_summary PROPERTIES PASS_REGULAR_EXPRESSION "params \\(M\\): 88\\.30")
add_test(NAME compile_dump_ir COMMAND ${COMPILE} --model vit_base_patch32_384 --dump-ir)
set_tests_properties(compile_dump_ir PROPERTIES PASS_REGULAR_EXPRESSION "= sdpa\\(.*outputs: %[0-9]+")
add_test(NAME compile_train_dump_ir COMMAND ${COMPILE} --model resnet50 --train --dump-ir)
set_tests_properties(compile_train_dump_ir PROPERTIES PASS_REGULAR_EXPRESSION
  "= cross_entropy\\(.* = conv2d_grad_weight\\(.* = sgd_update\\(.*assign\\(.*161 gradients, optimizer sgd")
# The issue's Swin line: the masks and indices as consts, the bias table's
# gradient through sdpa_grad's dbias and gather_grad, in f16.
add_test(NAME compile_swin_train_amp COMMAND ${COMPILE} --model swin_tiny_patch4_window7_224 --train --amp --batch-size 2
  --dump-ir)
set_tests_properties(compile_swin_train_amp PROPERTIES PASS_REGULAR_EXPRESSION
  "= const layers\\.0\\.blocks\\.1\\.attn_mask : \\[64,49,49\\] f32.* = sdpa_grad\\(.* dbias=1 .* f16 .* = gather_grad\\(")
add_test(NAME compile_unknown_model COMMAND ${FAIL} "unknown model 'vit_base_patch32'; closest: vit_base_patch32_384"
  ${COMPILE} --model vit_base_patch32)
add_test(NAME compile_bad_number COMMAND ${FAIL} "--img-size expects a whole number"
  ${COMPILE} --model resnet50 --img-size 22x)
add_test(NAME compile_bad_patch_multiple COMMAND ${FAIL} "not a multiple of the patch size"
  ${COMPILE} --model vit_base_patch32_384 --img-size 100)
# --dump-program: the Program the cpu backend runs (steps, compiled launches, each value's binding).
add_test(NAME compile_dump_program COMMAND ${COMPILE} --model test_resnet --train --dump-program cpu)
set_tests_properties(compile_dump_program PROPERTIES PASS_REGULAR_EXPRESSION
  "program: target cpu, .* state, .*\nsteps: [0-9]+ .*step 0: .*: state 'conv1.0.weight'.*: arena \\+")
add_test(NAME compile_dump_program_unknown COMMAND ${FAIL} "--dump-program is cpu, ref or cuda, got 'gpu'"
  ${COMPILE} --model test_resnet --dump-program gpu)
# README's model list is the registry's (tools/readme_models.sh rewrites it).
add_test(NAME readme_model_list COMMAND sh -c
  "sed -n '/<!-- models: /,/<!-- \\/models -->/p' ${CMAKE_SOURCE_DIR}/README.md | grep -v '<!--' | tr ',' '\\n' | \
   tr -d ' ' | grep . > readme-models.txt && ${COMPILE} --list-models > registry-models.txt && \
   diff readme-models.txt registry-models.txt")
# Every flag of timm's train.py is an option of ctimm-train (taken, or
# refused with its reason), and README's table of them is current
# (tools/readme_train_flags.sh rewrites it).
add_test(NAME train_py_flags COMMAND ${CMAKE_SOURCE_DIR}/tools/readme_train_flags.sh --print ${CMAKE_BINARY_DIR})
set_tests_properties(train_py_flags PROPERTIES PASS_REGULAR_EXPRESSION "--bce-pos-weight. . .null. . accepted")
add_test(NAME readme_train_flags COMMAND sh -c
  "sed -n '/<!-- train-flags: /,/<!-- \\/train-flags -->/p' ${CMAKE_SOURCE_DIR}/README.md | grep -v '<!--' > readme-flags.txt && \
   ${CMAKE_SOURCE_DIR}/tools/readme_train_flags.sh --print ${CMAKE_BINARY_DIR} > train-flags.txt && \
   diff readme-flags.txt train-flags.txt")
add_test(NAME compile_list_models COMMAND ${COMPILE} --list-models resnet1)
set_tests_properties(compile_list_models PROPERTIES PASS_REGULAR_EXPRESSION "^resnet101\nresnet152\nresnet18\n$")

# Golden IR dumps: regenerate with tools/update_golden.sh after an intended change.
foreach(golden test_resnet.eval test_resnet.train test_vit.eval test_resnet.eval.bn_fold)
  string(REPLACE "." ";" parts ${golden})
  list(GET parts 0 model)
  list(GET parts 1 mode)
  list(LENGTH parts nparts)
  set(flags "--passes none --dump-ir")
  if(nparts EQUAL 3)
    list(GET parts 2 pass)
    set(flags "--dump-ir-after ${pass}")
  endif()
  if(mode STREQUAL "train")
    set(flags "${flags} --train")
  endif()
  add_test(NAME golden_${golden} COMMAND sh -c
    "${COMPILE} --model ${model} --batch-size 2 ${flags} | diff -u ${DATA}/golden/${golden}.ir -")
endforeach()
# The whole pipeline composes: amp, the training step, layout, the memory plan.
add_test(NAME compile_full_pipeline COMMAND ${COMPILE} --model resnet50 --train --amp --channels-last --dump-ir)
set_tests_properties(compile_full_pipeline PROPERTIES PASS_REGULAR_EXPRESSION
  "= cast\\(.* f16 nhwc.* = conv2d_grad_weight\\(.* = sgd_update\\(.*memory plan: arena")
add_test(NAME compile_dump_after_amp COMMAND ${COMPILE} --model test_vit --amp --amp-dtype bfloat16 --dump-ir-after amp)
set_tests_properties(compile_dump_after_amp PROPERTIES PASS_REGULAR_EXPRESSION "= linear\\([^\n]* bf16 contig")
add_test(NAME compile_unknown_pass COMMAND ${FAIL} "unknown pass 'bogus'" ${COMPILE} --model test_resnet --passes bogus)

# The cpu backend (f32, BLAS) against timm's reference step, like the ref
# backend; test_resnet's convolutions on the own kernels and on oneDNN.
set(PARITY_CPU test_resnet test_vit)
if(DNNL_INCLUDE AND DNNL_LIB)
  list(APPEND PARITY_CPU test_resnet_onednn)
endif()
foreach(name ${PARITY_CPU})
  string(REPLACE "_onednn" "" model ${name})
  add_test(NAME parity_cpu_${name} COMMAND sh -c
    "${RUN} --model ${model} --backend cpu --vectors ${DATA}/${model}.safetensors --out ${name}.cpu.out.safetensors && \
     ${RUN} --compare ${name}.cpu.out.safetensors ${DATA}/${model}.safetensors --tol 1e-4 --tol-for adamw. 1e-3")
  if(name MATCHES "_onednn$")
    set_property(TEST parity_cpu_${name} APPEND PROPERTY ENVIRONMENT CTIMM_CONV=onednn)
  endif()
endforeach()

# The cuda backend's programs on the host (--backend cuda-sim: the SIMT
# harness runs their kernels, the library calls come from their descriptors)
# against timm's reference step; AMP and the other layouts against ref:
# tests/test_cuda_sim.c.
foreach(model test_resnet test_vit test_efficientnet test_convnext)
  add_test(NAME parity_cuda_sim_${model} COMMAND sh -c
    "${RUN} --model ${model} --backend cuda-sim --vectors ${DATA}/${model}.safetensors --out ${model}.sim.out.safetensors && \
     ${RUN} --compare ${model}.sim.out.safetensors ${DATA}/${model}.safetensors --tol 1e-4 --tol-for adamw. 1e-3")
endforeach()
# CTIMM_CUDA_STEPS=plain (codegen/cuda/launch_plan.c): what bench/gpu_check.sh
# falls back to where a device fails the fused steps must itself be right.
add_test(NAME parity_cuda_sim_test_efficientnet_plain COMMAND sh -c
  "${RUN} --model test_efficientnet --backend cuda-sim --vectors ${DATA}/test_efficientnet.safetensors --out eff.sim.plain.safetensors && \
   ${RUN} --compare eff.sim.plain.safetensors ${DATA}/test_efficientnet.safetensors --tol 1e-4 --tol-for adamw. 1e-3")
set_property(TEST parity_cuda_sim_test_efficientnet_plain PROPERTY ENVIRONMENT CTIMM_CUDA_STEPS=plain)
add_test(NAME parity_cuda_sim_test_convnext_channels_last COMMAND sh -c
  "${RUN} --model test_convnext --backend cuda-sim --channels-last --vectors ${DATA}/test_convnext.safetensors --out cnx.sim.cl.safetensors && \
   ${RUN} --compare cnx.sim.cl.safetensors ${DATA}/test_convnext.safetensors --tol 1e-4 --tol-for adamw. 1e-3")
# CTIMM_DWCONV=cudnn: the depthwise convolutions' cuDNN twins (the call and
# the launches after it, the bias gradient's among them) in place of the
# library's kernels, as a device runs them where they timed faster.
add_test(NAME parity_cuda_sim_test_convnext_channels_last_twins COMMAND sh -c
  "${RUN} --model test_convnext --backend cuda-sim --channels-last --vectors ${DATA}/test_convnext.safetensors --out cnx.sim.twins.safetensors && \
   ${RUN} --compare cnx.sim.twins.safetensors ${DATA}/test_convnext.safetensors --tol 1e-4 --tol-for adamw. 1e-3")
set_property(TEST parity_cuda_sim_test_convnext_channels_last_twins PROPERTY ENVIRONMENT CTIMM_DWCONV=cudnn)

# ctimm-train: a short run on the embedded shapes dataset (generated into the
# build tree), and its refusals.
# No --device: the cuda backend where it can run, else cpu, chosen without
# the warning an explicit --device cuda gets where it cannot run.
add_test(NAME train_embedded_short COMMAND sh -c
  "${CMAKE_BINARY_DIR}/ctimm-train --epochs 1 -b 16 --img-size 32 --lr 0.1 -j 2 --log-interval 100 --output train-out \
     > train-short.log 2> train-short.err && cat train-short.log && \
   grep -q '^epoch,train_loss,eval_loss,eval_top1,eval_top5,lr' train-out/summary.csv && \
   grep -q '^0,' train-out/summary.csv && grep -Eq 'backend (cpu|cuda)$' train-short.log && \
   ! grep -q 'running on the cpu backend' train-short.err")
set_tests_properties(train_embedded_short PROPERTIES ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data"
  PASS_REGULAR_EXPRESSION "Acc@1: [0-9.]+  Acc@5")
add_test(NAME train_refuses_unimplemented_flag COMMAND ${FAIL} "--model-ema-force-cpu .* is not implemented in ctimm-train"
  ${CMAKE_BINARY_DIR}/ctimm-train --model-ema-force-cpu)
add_test(NAME train_missing_folder COMMAND ${FAIL} "/nonexistent"
  ${CMAKE_BINARY_DIR}/ctimm-train /nonexistent/imagenet)
add_test(NAME train_bad_number COMMAND ${FAIL} "--batch-size expects a whole number" ${CMAKE_BINARY_DIR}/ctimm-train -b x)
add_test(NAME train_unknown_model COMMAND ${FAIL} "unknown model 'resnet5'" ${CMAKE_BINARY_DIR}/ctimm-train --model resnet5)
# Values no run could use are refused by name before anything starts.
foreach(bad "mean|--mean expects numbers, not 'nan'|--mean nan"
            "std|--std 0: must be > 0|--std 0"
            "jitter|--color-jitter -1: must be >= 0|--color-jitter -1"
            "scale|--scale 2 1: needs 0 <= MIN <= MAX|--scale 2 1"
            "aa|--aa bogus: auto_augment 'bogus': unknown policy|--aa bogus"
            "augmix|--aa augmix-w0: auto_augment 'augmix-w0': width 0|--aa augmix-w0"
            "grayscale|--grayscale-prob 2: a probability|--grayscale-prob 2"
            "crop_mode|--train-crop-mode rc is not one of rrc, rkrc, rkrr|--train-crop-mode rc"
            "rkr_scale|--scale 0 1: the rkrc/rkrr crops zoom|--train-crop-mode rkrc --scale 0 1"
            "lr|--lr -0.1: must be >= 0|--lr -0.1"
            "betas|--opt-betas 1.5: each beta must be in .0, 1.|--opt-betas 0.9 1.5"
            "layer_decay|--layer-decay must not be negative|--layer-decay -0.5"
            "layer_decay_min|--layer-decay-min-scale -1: must be >= 0|--layer-decay-min-scale -1"
            "bce_pos_weight|--bce-pos-weight 0: must be > 0|--bce-pos-weight 0")
  string(REPLACE "|" ";" parts "${bad}")
  list(GET parts 0 name)
  list(GET parts 1 pattern)
  list(GET parts 2 flags)
  separate_arguments(flags)
  add_test(NAME train_refuses_value_${name} COMMAND ${FAIL} "${pattern}" ${CMAKE_BINARY_DIR}/ctimm-train ${flags})
endforeach()
# More classes in the data than --num-classes: refused before training, both counts named.
add_test(NAME train_refuses_fewer_classes COMMAND ${FAIL} "has 10 classes but --num-classes is 4"
  ${CMAKE_BINARY_DIR}/ctimm-train --num-classes 4 --img-size 32 --epochs 1)
set_tests_properties(train_refuses_fewer_classes PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")

# --layer-decay on test_vit: timm's 8 layer groups (stem, 6 blocks, head), the
# 16 params of the stem and block 0 below the no-opt scale left untrained.
add_test(NAME train_layer_decay COMMAND sh -c
  "rm -rf ld-out && ${CMAKE_BINARY_DIR}/ctimm-train --model test_vit --epochs 1 -b 16 --img-size 32 --lr 0.1 -j 2 \
   --log-interval 1000 --layer-decay 0.75 --layer-decay-no-opt-scale 0.2 --output ld-out")
set_tests_properties(train_layer_decay PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data"
  PASS_REGULAR_EXPRESSION "Layer decay 0.75: 8 layer groups, lr scales 0.2373 to 1; 16 params below 0.2 not optimized")

# --grad-accum-steps and --model-kwargs from a train.py YAML: 3 batches of 16 an
# update, the epoch's last group of the rest; img_size for the ViT at the data's size.
add_test(NAME train_grad_accum_config COMMAND sh -c
  "rm -rf accum-out && printf 'grad_accum_steps: 3\\nmodel_kwargs: {img_size: 32}\\n' > accum.yaml && \
   ${CMAKE_BINARY_DIR}/ctimm-train -c accum.yaml --model test_vit --epochs 1 -b 16 --img-size 32 --lr 0.1 -j 2 \
   --log-interval 1000 --output accum-out > accum.log && cat accum.log && \
   grep -q '^Gradient accumulation: 3 batches an update, 63 updates an epoch' accum.log && \
   grep -q '^Train: 0 \\[  63/63 (100%)\\]' accum.log")
set_tests_properties(train_grad_accum_config PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# --model-kwargs: what train.py passes itself, an option ctimm's models lack,
# img_size for a convnet or at another size than the data's, a ViT option for
# a convnet, a value of the wrong kind, token pooling without the class token
# (timm's assertion), a pool ctimm's convnets do not build: each refused by name.
set(KW_TRAIN "${CMAKE_BINARY_DIR}/ctimm-train --epochs 1 -b 16 --img-size 32 -j 1")
add_test(NAME train_model_kwargs_refused COMMAND sh -c
  "${FAIL} 'train.py passes drop_rate to create_model itself \\(--drop\\)' ${KW_TRAIN} --model test_vit \
     --model-kwargs drop_rate=0.1 && \
   ${FAIL} \"ctimm's models have no option 'qk_norm'\" ${KW_TRAIN} --model test_vit --model-kwargs img_size=32 \
     qk_norm=True && \
   ${FAIL} 'train.py passes global_pool to create_model itself \\(--gp\\)' ${KW_TRAIN} --model test_vit \
     --model-kwargs global_pool=avg && \
   ${FAIL} \"test_resnet takes no option 'class_token'\" ${KW_TRAIN} --model test_resnet \
     --model-kwargs class_token=False && \
   ${FAIL} 'class_token takes True or False' ${KW_TRAIN} --model test_vit --model-kwargs class_token=false && \
   ${FAIL} 'token pooling needs the class token' ${KW_TRAIN} --model test_vit --model-kwargs img_size=32 \
     class_token=False && \
   ${FAIL} \"global_pool 'max' is not built\" ${KW_TRAIN} --model test_resnet --gp max && \
   ${FAIL} 'test_resnet takes any input size and no img_size option' ${KW_TRAIN} --model test_resnet \
     --model-kwargs img_size=32 && \
   ${FAIL} 'give --img-size 48 too' ${KW_TRAIN} --model test_vit --model-kwargs 'img_size=(48, 48)'")
set_tests_properties(train_model_kwargs_refused PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")

# --opt-kwargs: Lion with other betas trains two batches of 8 (and keeps its
# exp_avg state, the words in the checkpoint's args); refused by name: a key
# the optimizer lacks, one train.py passes itself, one from a train.py YAML,
# nesterov LARS without momentum and corrected weight decay with lr 0 (timm's
# ValueErrors).
add_test(NAME train_opt_kwargs COMMAND sh -c
  "rm -rf optkw-out && sh ${CMAKE_CURRENT_SOURCE_DIR}/make_small_shapes.sh data/shapes-64 optkw-shapes 2 1 && \
   ${CMAKE_BINARY_DIR}/ctimm-train optkw-shapes -b 8 --img-size 32 --lr 1e-4 -j 1 --epochs 1 --opt lion \
     --opt-kwargs 'betas=(0.95, 0.98)' --output optkw-out && \
   grep -aq 'optim.fc.weight.exp_avg' optkw-out/last.state.safetensors && \
   grep -aq 'opt_kwargs[^}]*betas[^}]*(0.95, 0.98)' optkw-out/last.state.safetensors && \
   ${FAIL} \"--opt-kwargs no_prox=True: --opt lion takes no 'no_prox' in ctimm \\(its keys: betas corrected_weight_decay caution\\)\" \
     ${CMAKE_BINARY_DIR}/ctimm-train optkw-shapes -b 8 --opt lion --opt-kwargs no_prox=True && \
   ${FAIL} 'train.py passes weight_decay to create_optimizer_v2 itself \\(--weight-decay\\)' \
     ${CMAKE_BINARY_DIR}/ctimm-train optkw-shapes -b 8 --opt adamw --opt-kwargs weight_decay=0.1 && \
   ${FAIL} '--opt nlars: Nesterov momentum requires a momentum' \
     ${CMAKE_BINARY_DIR}/ctimm-train optkw-shapes -b 8 --opt nlars --momentum 0 && \
   ${FAIL} '--opt adamc: corrected weight decay requires a positive max lr, got --lr 0' \
     ${CMAKE_BINARY_DIR}/ctimm-train optkw-shapes -b 8 --opt adamc --lr 0 && \
   printf 'opt: adan\\nopt_kwargs:\\n  betas:\\n  - 0.9\\n  - 0.99\\n' > optkw.yaml && \
   ${FAIL} 'betas=\\(0.9, 0.99\\): betas takes a tuple of 3 numbers' ${CMAKE_BINARY_DIR}/ctimm-train optkw-shapes -b 8 -c optkw.yaml")
set_tests_properties(train_opt_kwargs PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")

# ctimm-train checkpoints and --resume. Two epochs in one run equal one epoch,
# then --resume for the second, bit for bit (cpu backend, one OpenBLAS thread,
# -j 1): the same summary.csv line and the same weights file.
set(TRAIN ${CMAKE_BINARY_DIR}/ctimm-train)
set_tests_properties(train_embedded_short PROPERTIES FIXTURES_SETUP shapes_data)
# The short runs below train on shapes-small: 40 train and 10 val images a class.
add_test(NAME shapes_small COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/make_small_shapes.sh data/shapes-64 shapes-small 40 10)
set_tests_properties(shapes_small PROPERTIES FIXTURES_REQUIRED shapes_data FIXTURES_SETUP shapes_small)
set(TRAIN_SHORT "${TRAIN} shapes-small -b 16 --img-size 32 --lr 0.1 -j 1 --log-interval 1000")
# The resumed run writes to a new folder, ckpt-b-1, as timm's get_outdir(inc=True),
# after cleaning what killed runs left in ckpt-b (temporary files of dead processes);
# its epoch-1 checkpoint is then copied beside epoch 0's in ckpt-b, the folder
# of two checkpoints the tests below read.
add_test(NAME train_resume_bit_exact COMMAND sh -c
  "rm -rf ckpt-a ckpt-b ckpt-b-* && ${TRAIN_SHORT} --epochs 2 --checkpoint-hist 1 --output ckpt-a && \
   ${TRAIN_SHORT} --epochs 1 --output ckpt-b && \
   touch ckpt-b/last.safetensors.tmp.999999999 ckpt-b/model_best.safetensors.tmp-link && \
   ${TRAIN_SHORT} --epochs 2 --output ckpt-b --resume ckpt-b/last.safetensors > resume.log && \
   grep -q 'starting at epoch 1' resume.log && grep -q '^Output: ckpt-b-1 (ckpt-b holds an earlier run)' resume.log && \
   grep -q '^Cleaned ckpt-b: 2 files left by interrupted runs' resume.log && \
   grep '^1,' ckpt-a/summary.csv > a.line && grep '^1,' ckpt-b-1/summary.csv > b.line && \
   test -s a.line && cmp a.line b.line && test $(grep -c . ckpt-b/summary.csv) -eq 2 && \
   test $(grep -c . ckpt-b-1/summary.csv) -eq 2 && cmp ckpt-a/last.safetensors ckpt-b-1/last.safetensors && \
   cp ckpt-b-1/checkpoint-1.safetensors ckpt-b/checkpoint-1.safetensors && \
   cp ckpt-b-1/checkpoint-1.state.safetensors ckpt-b/checkpoint-1.state.safetensors")
# model_best and last exist; --checkpoint-hist 1 keeps one checkpoint-<epoch>
# pair, the best epoch's, which model_best is.
add_test(NAME train_checkpoint_files COMMAND sh -c
  "cd ckpt-a && test -f last.safetensors && test -f last.state.safetensors && \
   test -f model_best.safetensors && test -f model_best.state.safetensors && \
   test $(ls checkpoint-*.safetensors | wc -l) -eq 2 && \
   best=$(sort -t, -k4,4g summary.csv | tail -1 | cut -d, -f1) && \
   cmp model_best.safetensors checkpoint-$best.safetensors")
# Refusals: one line, a non-zero exit, and no output folder left behind.
set(TRAIN_REFUSALS
  "mismatched_model|a checkpoint of test_resnet, not of --model test_vit|--model test_vit --resume ckpt-b/last.safetensors"
  "mismatched_classes|'fc.weight' has shape .10,96. in the file but the model needs .12,96.|--num-classes 12 --resume ckpt-b/last.safetensors"
  "initial_other_model|--initial-checkpoint ckpt-b/last.safetensors: 'cls_token' is missing|--model test_vit --initial-checkpoint ckpt-b/last.safetensors"
  "truncated|trunc.safetensors: tensor .* out of range|--resume trunc.safetensors"
  "missing_state|training state lonely.state.safetensors is missing|--resume lonely.safetensors"
  "mixed_epochs|weights are of epoch 0 but mix.state.safetensors is of epoch 1|--resume mix.safetensors"
  "nothing_left|epoch 1, so --epochs 2 leaves nothing to train|--epochs 2 --resume ckpt-b-1/last.safetensors")
add_test(NAME train_refusal_files COMMAND sh -c
  "head -c 100000 ckpt-b/last.safetensors > trunc.safetensors && cp ckpt-b/last.state.safetensors trunc.state.safetensors && \
   cp ckpt-b/last.safetensors lonely.safetensors && rm -f lonely.state.safetensors && \
   cp ckpt-b/checkpoint-0.safetensors mix.safetensors && cp ckpt-b/checkpoint-1.state.safetensors mix.state.safetensors")
set_tests_properties(train_refusal_files PROPERTIES FIXTURES_REQUIRED train_ckpt FIXTURES_SETUP train_refusal_files)
foreach(refusal ${TRAIN_REFUSALS})
  string(REPLACE "|" ";" parts "${refusal}")
  list(GET parts 0 name)
  list(GET parts 1 pattern)
  list(GET parts 2 flags)
  add_test(NAME train_refuses_${name} COMMAND sh -c
    "rm -rf refused-${name} && ${FAIL} \"${pattern}\" ${TRAIN_SHORT} ${flags} --output refused-${name} && \
     test ! -e refused-${name}")
  set_tests_properties(train_refuses_${name} PROPERTIES FIXTURES_REQUIRED "shapes_small;train_ckpt;train_refusal_files"
    ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
endforeach()
set_tests_properties(train_resume_bit_exact PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small" FIXTURES_SETUP train_ckpt
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data;OPENBLAS_NUM_THREADS=1")
set_tests_properties(train_checkpoint_files PROPERTIES FIXTURES_REQUIRED train_ckpt)
# The LR schedule in a real run: --sched step halves the LR every epoch, in
# the log (the LR column) and in summary.csv; with --sched-on-updates and
# --decay-epochs 0.5 it halves in the middle of the epoch.
add_test(NAME train_sched_step COMMAND sh -c
  "rm -rf sched-step && ${TRAIN_SHORT} --epochs 2 --sched step --decay-epochs 1 --decay-rate 0.5 \
     --warmup-epochs 0 --output sched-step > sched-step.log && \
   grep -q '^Train: 0 .*LR: 1.000e-01' sched-step.log && grep -q '^Train: 1 .*LR: 5.000e-02' sched-step.log && \
   ! grep -q '^Train: 0 .*LR: 5.000e-02' sched-step.log && \
   grep -q '^0,.*,0.1$' sched-step/summary.csv && grep -q '^1,.*,0.05$' sched-step/summary.csv && \
   ${TRAIN_SHORT} --epochs 1 --sched step --decay-epochs 0.5 --decay-rate 0.5 --warmup-epochs 0 \
     --sched-on-updates --log-interval 1 > sched-upd.log && \
   grep '^Train: 0 ' sched-upd.log | head -1 | grep -q 'LR: 1.000e-01' && \
   grep '^Train: 0 ' sched-upd.log | tail -1 | grep -q 'LR: 5.000e-02'")
set_tests_properties(train_sched_step PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
add_test(NAME train_sched_plateau_per_update COMMAND ${FAIL} "plateau steps per epoch only"
  ${CMAKE_BINARY_DIR}/ctimm-train --sched plateau --sched-on-updates)
set_tests_properties(train_sched_plateau_per_update PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
add_test(NAME train_sched_unknown COMMAND ${FAIL} "--sched wsd is not one of" ${CMAKE_BINARY_DIR}/ctimm-train --sched wsd)

# Mixup / CutMix (soft targets, SoftTargetCrossEntropy) and random erasing in
# a real run; their refusals.
add_test(NAME train_mixup_cutmix_reprob COMMAND sh -c
  "rm -rf mixup-out && ${TRAIN_SHORT} --epochs 1 --mixup 0.2 --cutmix 1.0 --reprob 0.25 --output mixup-out && \
   grep -q '^0,' mixup-out/summary.csv")
set_tests_properties(train_mixup_cutmix_reprob PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data" PASS_REGULAR_EXPRESSION "Acc@1: [0-9.]+  Acc@5")
add_test(NAME train_mixup_odd_batch COMMAND ${FAIL} "mixup/cutmix needs an even --batch-size, not 15"
  ${CMAKE_BINARY_DIR}/ctimm-train --cutmix 1 -b 15)
add_test(NAME train_mixup_bad_mode COMMAND ${FAIL} "--mixup-mode mixed is not one of batch, pair, elem"
  ${CMAKE_BINARY_DIR}/ctimm-train --mixup 0.2 --mixup-mode mixed)
set_tests_properties(train_mixup_odd_batch train_mixup_bad_mode PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# -c/--config: the YAML's values (train.py's argument names) apply, and the
# command line overrides them: batch 32 (93 batches) and LR 0.05 from the
# file, then --lr 0.02 given on the command line; an unknown key and the key
# of a flag not implemented are refused by name. The checkpoint's args hold
# the file's values.
add_test(NAME train_config_yaml COMMAND sh -c
  "rm -rf cfg-out && printf 'batch_size: 32\\nimg_size: 32\\nepochs: 1\\nlr: 0.05\\nmixup: 0.2\\nmixup_mode: pair\\nlog_interval: 1000\\nsched: cosine\\nwarmup_prefix: false\\n' > cfg.yaml && \
   ${TRAIN} -c cfg.yaml --output cfg-out > cfg.log && \
   grep -q '^Train: 0 \\[  93/93 .*LR: 5.000e-02' cfg.log && \
   ${TRAIN} --config cfg.yaml --lr 0.02 > cfg2.log && grep -q '^Train: 0 \\[  93/93 .*LR: 2.000e-02' cfg2.log && \
   grep -aq 'mixup_mode[^,]*pair' cfg-out/last.state.safetensors")
set_tests_properties(train_config_yaml PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
add_test(NAME train_config_unknown_key COMMAND sh -c
  "printf 'batch_size: 16\\nbatch_sise: 8\\n' > cfg-bad.yaml && \
   ${FAIL} \"cfg-bad.yaml: unknown key 'batch_sise'\" ${TRAIN} -c cfg-bad.yaml && \
   printf 'model_ema_force_cpu: true\\n' > cfg-ema.yaml && \
   ${FAIL} \"cfg-ema.yaml: 'model_ema_force_cpu: true' .--model-ema-force-cpu. is not implemented in ctimm-train\" \
     ${TRAIN} -c cfg-ema.yaml")
# timm's own args.yaml (train.py's every argument; tools/make_args_yaml.py):
# its defaults parse, today's and timm 0.9.16's (--help stops after the
# config's words are read), and one written for a cheap run with every list
# option changed trains on it, its lists reaching the checkpoint's args (''
# strings are train.py's "not given": no --output '' folder, no --resume '').
# train.py's compile switches and loader knobs are taken, each with the line
# that says why nothing changes (ctimm compiles the whole step anyway).
add_test(NAME train_takes_torchcompile_flags COMMAND sh -c
  "${TRAIN} --torchcompile --fuser te --torchscript --torchcompile-mode max-autotune --pin-mem --no-prefetcher \
     --drop-connect 0.2 --help > tc.log && \
   for f in torchcompile fuser torchscript torchcompile-mode; do \
     grep -q \"^ctimm-train: --$f: no effect: ctimm always compiles the whole training step$\" tc.log || exit 1; done && \
   grep -q '^ctimm-train: --pin-mem: no effect: ' tc.log && grep -q '^ctimm-train: --drop-connect: no effect: ' tc.log && \
   grep -q '^  --log-wandb: ctimm has no Weights & Biases client' tc.log")
add_test(NAME train_config_timm_args COMMAND sh -c
  "${TRAIN} -c ${DATA}/timm_args.yaml --help > /dev/null && \
   ${TRAIN} -c ${DATA}/timm_args_v0.9.16.yaml --help > /dev/null && rm -rf cfgt-out && \
   ${TRAIN} -c ${DATA}/timm_args_lists.yaml --output cfgt-out > cfgt.log && \
   grep -q '^Train: 0 \\[  93/93 ' cfgt.log && \
   grep -aq 'decay_milestones.\":\\[10,20\\],.\"cutmix_minmax.\":\\[0.3,0.7\\],.\"lr_noise.\":\\[0.4,0.9\\]' \
     cfgt-out/last.state.safetensors")
set_tests_properties(train_config_timm_args PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# 200 KB of nested '[' is refused by name at once (libyaml alone took over a
# minute on it); an argument of train.py's that ctimm-train lacks is refused
# by name on the command line too.
add_test(NAME train_config_deep_yaml COMMAND sh -c
  "head -c 200000 /dev/zero | tr -c '[' '[' > cfg-deep.yaml && \
   ${FAIL} 'cfg-deep.yaml: line 1: nested deeper than 16 levels' ${TRAIN} -c cfg-deep.yaml")
set_tests_properties(train_config_deep_yaml PROPERTIES TIMEOUT 5)
add_test(NAME train_refuses_unimplemented_flags COMMAND ${FAIL}
  "--kd-model-name .* is not implemented in ctimm-train: knowledge distillation" ${TRAIN} --kd-model-name resnet50)
# --clip-grad and --model-ema: an epoch with the clipped step and the EMA
# copies, validated twice (train.py's "Test (EMA)" block), the EMA saved in
# the training state.
add_test(NAME train_clip_grad_model_ema COMMAND sh -c
  "rm -rf clip-ema-out && ${TRAIN_SHORT} --epochs 1 --clip-grad 1 --model-ema --output clip-ema-out > clip-ema.log && \
   grep -q '^Test: \\[' clip-ema.log && grep -q '^Test (EMA): \\[.*Acc@1: [0-9.]*  Acc@5' clip-ema.log && \
   grep -q 'ema.fc.weight' clip-ema-out/last.state.safetensors")
set_tests_properties(train_clip_grad_model_ema PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small" FIXTURES_SETUP train_ema
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")

# timm's data and augmentation flags reach the transforms.
add_test(NAME train_aug_flags COMMAND ${CMAKE_BINARY_DIR}/ctimm-train --epochs 1 -b 16 --input-size 3 32 32 --lr 0.1
  --scale 0.5 1.0 --ratio 0.8 1.25 --hflip 0.3 --vflip 0.1 --color-jitter 0.2 --aa rand-m9-mstd0.5-inc1
  --train-interpolation bicubic --interpolation bilinear --crop-pct 0.9 --mean 0.5 --std 0.5 --log-interval 1000)
set_tests_properties(train_aug_flags PROPERTIES ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data"
  FIXTURES_REQUIRED shapes_data PASS_REGULAR_EXPRESSION "32x32.*Acc@1")
# AugMix, '3a' and the SimCLR-like probabilities, on the small set (test_transforms checks what they do).
foreach(aa_crop augmix-m3-w2:rkrc 3a:rkrr)
  string(REPLACE ":" ";" aa_crop "${aa_crop}")
  list(GET aa_crop 0 aa)
  list(GET aa_crop 1 crop)
  add_test(NAME train_aug_flags_${aa} COMMAND sh -c "${TRAIN_SHORT} --epochs 1 --aa ${aa} --color-jitter-prob 0.5 \
    --grayscale-prob 0.2 --gaussian-blur-prob 0.2 --train-crop-mode ${crop} --output aug-${aa}")
  set_tests_properties(train_aug_flags_${aa} PROPERTIES ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data"
    FIXTURES_REQUIRED "shapes_data;shapes_small" PASS_REGULAR_EXPRESSION "Acc@1")
endforeach()
add_test(NAME train_no_aug_experiment COMMAND sh -c
  "${CMAKE_BINARY_DIR}/ctimm-train --epochs 1 -b 16 --img-size 32 --lr 0.1 --no-aug --output runs --experiment exp1 \
     --log-interval 1000 && test -f runs/exp1/summary.csv")
set_tests_properties(train_no_aug_experiment PROPERTIES ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data"
  FIXTURES_REQUIRED shapes_data)
add_test(NAME train_bad_interpolation COMMAND ${FAIL} "--interpolation lanczos is not one of"
  ${CMAKE_BINARY_DIR}/ctimm-train --interpolation lanczos --img-size 32)
set_tests_properties(train_bad_interpolation PROPERTIES ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data"
  FIXTURES_REQUIRED shapes_data)

# Ctrl-C mid-epoch under --amp (f16, dynamic loss scale): exit 130 with a
# recovery checkpoint; resuming from it equals the uninterrupted run bit for
# bit (tests/train_interrupt.sh).
add_test(NAME train_interrupt_recovery COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train_interrupt.sh ${TRAIN}
  -b 16 --img-size 32 --lr 0.1 -j 1 --amp)
set_tests_properties(train_interrupt_recovery PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data;OPENBLAS_NUM_THREADS=1")
# SIGINT/SIGTERM taken by one thread, the others blocking them; a crash
# mid-run names itself on stderr with a backtrace and still ends the process
# by its signal (tests/train_signals.sh).
add_test(NAME train_signals COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train_signals.sh ${TRAIN}
  -b 16 --img-size 32 -j 1)
set_tests_properties(train_signals PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# --amp bfloat16 with --bce-loss on mixup's soft targets binarised by
# --bce-target-thresh, summed over classes with a positive weight
# (--bce-sum, --bce-pos-weight); --start-epoch 1 starts the step schedule's second
# epoch (LR halved, summary from epoch 1); a checkpoint without a model EMA
# resumed with --model-ema (timm starts the EMA from its weights).
add_test(NAME train_amp_bce_start_epoch COMMAND sh -c
  "rm -rf bce-out && ${TRAIN_SHORT} --epochs 1 --amp --amp-dtype bfloat16 --bce-loss --bce-target-thresh 0.2 \
     --bce-sum --bce-pos-weight 2 --mixup 0.2 --output bce-out > bce.log && grep -q '^AMP: bfloat16 autocast$' bce.log && \
   grep -q '^Test: .*Acc@1' bce.log && grep -aq 'bce_target_thresh[^0-9]*0.2,' bce-out/last.state.safetensors && \
   grep -aq 'bce_sum[^0-9]*1,[^,]*bce_pos_weight[^0-9]*2,' bce-out/last.state.safetensors && \
   ${TRAIN_SHORT} --epochs 2 --start-epoch 1 --sched step --decay-epochs 1 --decay-rate 0.5 --output start-out \
     > start.log && grep -q '^Train: 1 .*LR: 5.000e-02' start.log && ! grep -q '^Train: 0' start.log && \
   test $(grep -c . start-out/summary.csv) -eq 2 && grep -q '^1,' start-out/summary.csv && \
   ${TRAIN_SHORT} --epochs 2 --model-ema --resume ckpt-b/checkpoint-0.safetensors > ema-resume.log && \
   grep -q '^Test (EMA): .*Acc@1' ema-resume.log")
set_tests_properties(train_amp_bce_start_epoch PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small;train_ckpt" FIXTURES_SETUP train_bce
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# --head-init-scale 0 --head-init-bias 1 at lr 0: every logit is 1, so the
# BCE training loss is (softplus(-1) + 9 softplus(1)) / 10 = 1.213262.
add_test(NAME train_head_init COMMAND sh -c
  "rm -rf head-out && ${TRAIN_SHORT} --epochs 1 --lr 0 --head-init-scale 0 --head-init-bias 1 --bce-loss --smoothing 0 \
     --output head-out > head.log && grep -q '^0,1.21326[12],' head-out/summary.csv")
set_tests_properties(train_head_init PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# AugMix split training as train.py's recipe (--aug-splits 3 --jsd-loss
# --split-bn --aa augmix-... --resplit): three images a sample, the aux
# batch norms trained and saved; train.py's asserts refused by name.
add_test(NAME train_augmix_splits COMMAND sh -c
  "rm -rf splits-out && ${TRAIN_SHORT} --epochs 1 -b 8 --aug-splits 3 --jsd-loss --split-bn --aa augmix-m3-w2 \
     --reprob 0.25 --resplit --output splits-out > splits.log && grep -q '^Test: .*Acc@1' splits.log && \
   grep -aq 'layer1.0.bn1.aux_bn.1.running_var' splits-out/last.safetensors")
set_tests_properties(train_augmix_splits PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
foreach(bad "one|--aug-splits 1: a split of 1 makes no sense|--aug-splits 1"
            "jsd|--jsd-loss needs --aug-splits 2 or more|--jsd-loss"
            "split_bn|--split-bn needs --aug-splits 2 or more, or --resplit|--split-bn"
            "mixup|--aug-splits with mixup/cutmix|--aug-splits 2 --mixup 0.2"
            "bn_eps|test_resnet takes no option 'bn_eps'|--bn-eps 1e-3")
  string(REPLACE "|" ";" parts "${bad}")
  list(GET parts 0 name)
  list(GET parts 1 pattern)
  list(GET parts 2 flags)
  separate_arguments(flags)
  add_test(NAME train_refuses_splits_${name} COMMAND ${FAIL} "${pattern}" ${TRAIN} shapes-small ${flags})
  set_tests_properties(train_refuses_splits_${name} PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small"
    ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
endforeach()
add_test(NAME train_amp_bad_dtype COMMAND ${FAIL} "--amp-dtype float8 is not one of float16, bfloat16"
  ${CMAKE_BINARY_DIR}/ctimm-train --amp --amp-dtype float8)
add_test(NAME train_start_epoch_past_end COMMAND ${FAIL} "--start-epoch 3: the schedule has 2 epochs"
  ${CMAKE_BINARY_DIR}/ctimm-train --epochs 2 --start-epoch 3 --img-size 32)
set_tests_properties(train_start_epoch_past_end PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# The plateau schedule's state travels with the checkpoint: four epochs in one
# run equal two, then --resume for the other two, bit for bit, LR column
# included; the run must halve its LR somewhere (by the eval loss, patience 0)
# for the comparison to mean something.
add_test(NAME train_resume_plateau COMMAND sh -c
  "rm -rf plat-a plat-b plat-b-* && \
   P='--sched plateau --patience-epochs 0 --decay-rate 0.5 --eval-metric top1' && \
   ${TRAIN_SHORT} --epochs 4 $P --output plat-a && ${TRAIN_SHORT} --epochs 2 $P --output plat-b && \
   ${TRAIN_SHORT} --epochs 4 $P --output plat-b --resume plat-b/last.safetensors && \
   grep -q '^[1-3],.*,0.05$' plat-a/summary.csv && \
   tail -n +2 plat-b-1/summary.csv | cat plat-b/summary.csv - | cmp plat-a/summary.csv - && \
   cmp plat-a/last.safetensors plat-b-1/last.safetensors")
set_tests_properties(train_resume_plateau PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data;OPENBLAS_NUM_THREADS=1")

# ctimm-validate: the best checkpoint of train_resume_bit_exact's run gives the
# top-1/top-5 ctimm-train logged for that epoch (through bn_fold), in
# validate.py's CSV columns; JSON results; --valid-labels keeping every class
# in order changes nothing; a model list with an unknown name reports that row
# and still validates the rest; refusals. tools/check_validate.py checks the
# same numbers against timm's own validate.py.
set(VALIDATE ${CMAKE_BINARY_DIR}/ctimm-validate)
add_test(NAME validate_checkpoint COMMAND sh -c
  "best=$(sort -t, -k4,4g ckpt-a/summary.csv | tail -1) && \
   ${VALIDATE} shapes-small --checkpoint ckpt-a/model_best.safetensors --img-size 32 -b 64 -j 2 --results-file val.csv > val.log && \
   grep -q '^ \\* Acc@1 ' val.log && \
   head -1 val.csv | grep -q '^model,top1,top1_err,top5,top5_err,param_count,img_size,crop_pct,interpolation' && \
   grep -q '^test_resnet,.*,0.37,32,0.95,bilinear' val.csv && \
   echo \"$best\" | awk -F, -v v=\"$(sed -n 2p val.csv)\" '{split(v, r, \",\"); exit !(r[2] == $4 && r[4] == $5)}' && \
   seq 0 9 > all.labels && \
   ${VALIDATE} shapes-small --checkpoint ckpt-a/model_best.safetensors --img-size 32 -b 50 --valid-labels all.labels \
     --results-file val.json --results-format json > val2.log && \
   sed -n 's/^[[:space:]]*.top1.:[[:space:]]*\\([0-9.]*\\),$/\\1/p' val.json | \
     awk -v want=\"$(sed -n 2p val.csv | cut -d, -f2)\" '{ok = $1 == want + 0} END {exit !ok}'")
set_tests_properties(validate_checkpoint PROPERTIES FIXTURES_REQUIRED "shapes_data;train_ckpt"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
add_test(NAME validate_model_list COMMAND sh -c
  "printf 'test_resnet\\nresnet5\\ntest_vit\\n' > models.txt && \
   ${VALIDATE} --model-list models.txt --img-size 32 -b 100 --results-file list.csv > list.log 2> list.err && \
   grep -q \"unknown model 'resnet5'\" list.err && test $(grep -c '^test_' list.csv) -eq 2")
set_tests_properties(validate_model_list PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
add_test(NAME validate_refuses_no_ema COMMAND ${FAIL} "was the run trained with --model-ema"
  ${VALIDATE} --checkpoint ckpt-a/model_best.safetensors --use-ema --img-size 32)
add_test(NAME validate_refuses_other_model COMMAND ${FAIL} "--checkpoint: .*'cls_token' is missing"
  ${VALIDATE} --model test_vit --checkpoint ckpt-a/model_best.safetensors --img-size 32)
add_test(NAME validate_refuses_bad_label_file COMMAND sh -c
  "printf '0\\n12\\n' > bad.labels && ${FAIL} 'bad.labels: line 2 is not a class index in .0, 10.' \
   ${VALIDATE} --checkpoint ckpt-a/model_best.safetensors --valid-labels bad.labels --img-size 32")
set_tests_properties(validate_refuses_no_ema validate_refuses_other_model validate_refuses_bad_label_file
  PROPERTIES FIXTURES_REQUIRED "shapes_data;train_ckpt" ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
add_test(NAME validate_unknown_model COMMAND ${FAIL} "unknown model 'resnet5'" ${VALIDATE} --model resnet5)
add_test(NAME validate_bad_format COMMAND ${FAIL} "--results-format xml is not one of csv, json"
  ${VALIDATE} --results-format xml)
# --gp and --model-kwargs reach the model validate.py builds: test_vit at 32
# with the attention-pool head, and without its class token, average pooled,
# have timm's param counts for create_model('test_vit', img_size=32, ...)
# (365096 plain); a key validate.py passes itself is refused before any model.
add_test(NAME validate_gp_model_kwargs COMMAND sh -c
  "${VALIDATE} --model test_vit --img-size 32 -b 200 --gp map > vkw-map.log && \
   grep -q '^Model test_vit created, param count: 406760;' vkw-map.log && grep -q '^ \\* Acc@1 ' vkw-map.log && \
   ${VALIDATE} --model test_vit --img-size 32 -b 200 --gp avg --model-kwargs img_size=32 class_token=False \
     > vkw-avg.log && grep -q '^Model test_vit created, param count: 364968;' vkw-avg.log && \
   ${FAIL} '^ctimm-validate: --model-kwargs num_classes=5: validate.py passes num_classes to create_model itself \\(--num-classes\\)' \
     ${VALIDATE} --model test_vit --model-kwargs num_classes=5 && \
   ${FAIL} \"^ctimm-validate: test_resnet: test_resnet takes no option 'class_token'\" \
     ${VALIDATE} --model test_resnet --img-size 32 --model-kwargs class_token=False")
set_tests_properties(validate_gp_model_kwargs PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")

# ctimm-avg-checkpoints and ctimm-clean-checkpoint: the average of the single
# best checkpoint is that checkpoint (ctimm-validate gives its top-1), the
# average of two loads and validates; an existing output is refused. The
# cleaned EMA checkpoint validates as --use-ema does on the original; a file
# with another model's tensors in the average is refused by name.
set(AVG ${CMAKE_BINARY_DIR}/ctimm-avg-checkpoints)
set(CLEAN ${CMAKE_BINARY_DIR}/ctimm-clean-checkpoint)
add_test(NAME checkpoint_tools COMMAND sh -c
  "rm -rf avg-out && mkdir avg-out && \
   best=$(tail -n +2 ckpt-a/summary.csv | sort -t, -k4,4g | tail -1 | cut -d, -f1) && \
   ${AVG} --input ckpt-b -n 1 --output avg-out/one.safetensors > avg1.log && \
   grep -q \"checkpoint-$best.safetensors\" avg1.log && grep -aq 'ctimm.xxh3_128' avg-out/one.safetensors && \
   ${VALIDATE} --checkpoint avg-out/one.safetensors --img-size 32 -b 100 --results-file avg-out/one.csv > /dev/null && \
   ${VALIDATE} --checkpoint ckpt-b/checkpoint-$best.safetensors --img-size 32 -b 100 --results-file avg-out/best.csv > /dev/null && \
   cmp avg-out/one.csv avg-out/best.csv && \
   ${AVG} --input ckpt-b --output avg-out/two.safetensors > avg2.log && grep -q 'average of 2 checkpoints' avg2.log && \
   ${VALIDATE} --checkpoint avg-out/two.safetensors --img-size 32 -b 100 > /dev/null && \
   ${FAIL} 'avg-out/two.safetensors already exists' ${AVG} --input ckpt-b --output avg-out/two.safetensors && \
   ${CLEAN} --checkpoint clip-ema-out/last.safetensors --output avg-out/clean.safetensors > clean.log && \
   grep -q '(model EMA weights)' clean.log && c=$(ls avg-out/clean-*.safetensors) && \
   ${VALIDATE} --checkpoint $c --img-size 32 -b 100 --results-file avg-out/clean.csv > /dev/null && \
   ${VALIDATE} --checkpoint clip-ema-out/last.safetensors --use-ema --img-size 32 -b 100 \
     --results-file avg-out/ema.csv > /dev/null && cmp avg-out/clean.csv avg-out/ema.csv && \
   ${FAIL} 'already exists' ${CLEAN} --checkpoint clip-ema-out/last.safetensors --output $c --no-hash && \
   cp ckpt-b/checkpoint-0.safetensors avg-out/checkpoint-0.safetensors && \
   cp ckpt-b/checkpoint-0.state.safetensors avg-out/checkpoint-0.state.safetensors && \
   cp bce-out/last.state.safetensors avg-out/checkpoint-9.state.safetensors && \
   ${CMAKE_BINARY_DIR}/ctimm-compile --model test_vit --num-classes 10 --save-weights avg-out/checkpoint-9.safetensors > /dev/null && \
   ${FAIL} 'does not match|tensors but' ${AVG} --input avg-out --output avg-out/bad.safetensors --no-use-ema")
set_tests_properties(checkpoint_tools PROPERTIES FIXTURES_REQUIRED "shapes_data;train_ckpt;train_ema;train_bce"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
add_test(NAME checkpoint_tools_truncated COMMAND sh -c
  "head -c 5000 ckpt-b/last.safetensors > short.safetensors && \
   ${FAIL} 'short.safetensors' ${CLEAN} --checkpoint short.safetensors --output short-clean.safetensors && \
   test ! -e short-clean.safetensors")
set_tests_properties(checkpoint_tools_truncated PROPERTIES FIXTURES_REQUIRED train_ckpt)

# ctimm-infer: the top-1 class names it writes for the val split (names from
# --class-map) are right exactly as often as ctimm-validate's top-1 says; top-3
# with indices in json-split; refusals.
set(INFER ${CMAKE_BINARY_DIR}/ctimm-infer)
add_test(NAME infer_checkpoint COMMAND sh -c
  "rm -rf infer-out && ls data/shapes-64/val > classes.txt && \
   ${INFER} data/shapes-64/val --img-size 32 --checkpoint ckpt-a/model_best.safetensors --class-map classes.txt \
     -b 100 --results-dir infer-out --no-console-results > infer.log && \
   head -1 infer-out/test_resnet-32.csv | grep -qx 'filename,label,prob' && \
   test $(grep -c jpg infer-out/test_resnet-32.csv) -eq 500 && \
   ${VALIDATE} --checkpoint ckpt-a/model_best.safetensors --img-size 32 -b 100 --results-file infer-val.csv > /dev/null && \
   tail -n +2 infer-out/test_resnet-32.csv | awk -F, -v top1=$(sed -n 2p infer-val.csv | cut -d, -f2) \
     '{split($1, a, \"_\"); n++; c += a[1] == $2} END {exit !(n == 500 && 100 * c / n == top1)}' && \
   ${INFER} data/shapes-64/val --img-size 32 --checkpoint ckpt-a/model_best.safetensors --topk 3 --include-index --num-classes 10 \
     --output-type logit --results-file top3.json --results-format json-split --results-dir infer-out \
     --no-console-results > /dev/null && \
   grep -q '\"columns\":.*\"filename\", \"index\", \"logit\"' infer-out/top3.json")
set_tests_properties(infer_checkpoint PROPERTIES FIXTURES_REQUIRED "shapes_data;train_ckpt"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
add_test(NAME infer_bad_format COMMAND ${FAIL} "--results-format parquet is not one of csv, json, json-split"
  ${INFER} --results-format parquet)
add_test(NAME infer_exclude_needs_topk COMMAND ${FAIL} "--exclude-output needs --topk > 0"
  ${INFER} --exclude-output --topk 0)
# PyTorch checkpoints (runtime/torch_file.h): the train.py checkpoint of
# test_resnet in tests/data/torch (tools/make_torch_ckpt.py) gives ctimm-infer
# the logits of its model EMA (inference.py's create_model loads the EMA) and
# ctimm-validate those of its state_dict (its EMA with --use-ema), exactly as
# the safetensors ctimm-clean-checkpoint writes of each; ctimm-avg-checkpoints
# ranks it by its 'metric'; --initial-checkpoint reads it (naming what another
# model misses) and --resume refuses its optimizer state (a stand-in: one group
# of all 92 tensors, where create_optimizer_v2 makes two of 31 and 16 params).
add_test(NAME torch_checkpoint_cli COMMAND sh -c
  "P=${CMAKE_CURRENT_SOURCE_DIR}/data/torch/test_resnet_views.pth.tar && rm -rf pth-out && mkdir -p pth-out/avg && \
   I='${INFER} data/shapes-64/val --img-size 32 -b 100 --topk 5 --output-type logit --include-index --no-console-results' && \
   V='${VALIDATE} --img-size 32 -b 100' && \
   ${CLEAN} --checkpoint $P --no-use-ema --no-hash --output pth-out/sd.safetensors > /dev/null && \
   ${CLEAN} --checkpoint $P --no-hash --output pth-out/ema.safetensors | grep -q '(model EMA weights)' && \
   for w in pth ema sd; do c=$P && test $w = pth || c=pth-out/$w.safetensors; \
     $I --checkpoint $c --results-file pth-out/$w.csv > /dev/null && \
     $V --checkpoint $c --results-file pth-out/v-$w.csv > /dev/null || exit 1; done && \
   cmp pth-out/pth.csv pth-out/ema.csv && ! cmp -s pth-out/sd.csv pth-out/ema.csv && cmp pth-out/v-pth.csv pth-out/v-sd.csv && \
   $V --checkpoint $P --use-ema --results-file pth-out/v-pth-ema.csv > /dev/null && cmp pth-out/v-pth-ema.csv pth-out/v-ema.csv && \
   cp $P pth-out/avg/a.pth.tar && \
   ${AVG} --input pth-out/avg --filter '*.pth.tar' --output pth-out/avg.safetensors | grep -q '^12.5 ' && \
   $I --checkpoint pth-out/avg.safetensors --results-file pth-out/avg.csv > /dev/null && cmp pth-out/avg.csv pth-out/ema.csv && \
   ${FAIL} \"--initial-checkpoint .*'cls_token' is missing\" ${TRAIN_SHORT} --model test_vit --initial-checkpoint $P \
     --output pth-out/t && \
   ${FAIL} '--resume .*1 param group of 92 params, --opt sgd here 2 param groups of 31, 16 params.*--no-resume-opt' \
     ${TRAIN_SHORT} --num-classes 1000 --resume $P --output pth-out/r")
set_tests_properties(torch_checkpoint_cli PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# --resume from a timm train.py checkpoint (train/resume_torch.h): train.py's
# 'sgd' run of test_resnet saved at epoch 2 (tests/data/torch/resume_sgd.pth.tar)
# goes on at epoch 3 with its optimizer state and model EMA and trains that one
# epoch on the small ten-class set; a plateau schedule goes on at the lr the
# optimizer kept (0.1), as timm's; the state of another optimizer is refused.
add_test(NAME train_resume_torch COMMAND sh -c
  "P=${CMAKE_CURRENT_SOURCE_DIR}/data/torch/resume_sgd.pth.tar && rm -rf pth-resume* && \
   T='${TRAIN} dist-data --val-split val --img-size 32 -b 16 -j 1 --log-interval 1 --model-ema --epochs 4' && \
   $T --resume $P --output pth-resume > pth-resume.log && \
   grep -q '^Resumed from .*resume_sgd.pth.tar (epoch 2); starting at epoch 3$' pth-resume.log && \
   ! grep -q '^Train: [0-2] ' pth-resume.log && grep -q '^Train: 3 ' pth-resume.log && \
   test $(grep -c . pth-resume/summary.csv) -eq 2 && grep -q '^3,' pth-resume/summary.csv && \
   ! grep -q 'LR: 1.000e-01' pth-resume.log && \
   $T --sched plateau --warmup-epochs 0 --resume $P --output pth-resume-plat | grep -q '^Train: 3 .*LR: 1.000e-01' && \
   ${FAIL} 'its optimizer is --opt sgd, the run.s --opt adamw; --no-resume-opt resumes the weights only' \
     $T --opt adamw --resume $P --output pth-resume-adamw && test ! -e pth-resume-adamw")
set_tests_properties(train_resume_torch PROPERTIES FIXTURES_REQUIRED "shapes_data;dist_data"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data;OPENBLAS_NUM_THREADS=1")
# The classifier is timm's, not the folder's: a 1000-class checkpoint scores
# the 10-class val split (ctimm-infer names it from a 10-line class map), the
# log saying where the count came from; a folder with more classes than
# --num-classes is refused before any batch, naming both counts.
add_test(NAME validate_infer_checkpoint_classes COMMAND sh -c
  "ls data/shapes-64/val > classes-1k.txt && \
   ${CMAKE_BINARY_DIR}/ctimm-compile --model test_resnet --save-weights cls1k.safetensors > /dev/null && \
   ${VALIDATE} --checkpoint cls1k.safetensors --img-size 32 -b 100 > cls1k.log && \
   grep -q 'classes: 1000 (from the checkpoint.s fc.weight)' cls1k.log && grep -q '^ \\* Acc@1 ' cls1k.log && \
   ${INFER} data/shapes-64/val --img-size 32 --checkpoint cls1k.safetensors --class-map classes-1k.txt -b 100 \
     --results-file cls1k.csv --no-console-results > cls1k-infer.log && \
   grep -q 'classes: 1000 (from the checkpoint.s fc.weight)' cls1k-infer.log && \
   test $(grep -c jpg cls1k.csv) -eq 500 && \
   ${VALIDATE} --img-size 32 -b 100 | grep -q 'classes: 1000 (the model.s default)' && \
   ${FAIL} 'has 10 classes but the model has 5 \\(from --num-classes\\).*give --num-classes 10' \
     ${VALIDATE} --num-classes 5 --img-size 32 -b 100 > refuse.log && ! grep -q 'Test:' refuse.log")
set_tests_properties(validate_infer_checkpoint_classes PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# --real-labels (ImageNet ReaL's JSON, matched by ILSVRC2012_val_* file names):
# each image's own class gives the plain top-1/top-5, every class gives 100;
# a label file of another length is refused. (On the "mixed" set, with empty
# lists, timm's validate.py --real-labels gives the same numbers.)
add_test(NAME validate_real_labels COMMAND sh -c
  "R=${CMAKE_CURRENT_SOURCE_DIR}/make_real_labels.sh && V='${VALIDATE} --split= --img-size 32 --checkpoint ckpt-a/model_best.safetensors' && \
   sh $R data/shapes-64/val real-own own && sh $R data/shapes-64/val real-all all && \
   $V real-own | grep 'Acc@1 ' > real-plain.txt && $V real-own --real-labels real-own.json | grep 'Acc@1 ' > real-own.txt && \
   cmp real-plain.txt real-own.txt && \
   $V real-all --real-labels real-all.json | grep -q '^ \\* Acc@1 100.000 (0.000) Acc@5 100.000 (0.000)' && \
   ${FAIL} 'real-all.json has 50 entries but the split has 500 images' ${VALIDATE} data/shapes-64 --split val \
     --img-size 32 --real-labels real-all.json")
set_tests_properties(validate_real_labels PROPERTIES FIXTURES_REQUIRED "shapes_data;train_ckpt"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# Progress bars: drawn on a terminal (script(1) gives the run one), never in
# a pipe or a log.
add_test(NAME progress_bar_tty_only COMMAND sh -c
  "V='${VALIDATE} --checkpoint ckpt-a/model_best.safetensors --img-size 32 -b 20' && \
   script -qec \"$V\" /dev/null | tr '\\r' '\\n' | grep -q '^.*Validate \\[#*\\.*\\] [0-9]*/25' && \
   ! $V | grep -q 'Validate \\['")
set_tests_properties(progress_bar_tty_only PROPERTIES FIXTURES_REQUIRED "shapes_data;train_ckpt"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")

# ctimm-bench: benchmark.py's columns (both; --detail's train phases), the
# 13-model set's gmacs/macts/param_count equal to timm's published CSVs
# (bench/anchor_join.awk joins on model and image size with the unfused-
# attention rows of tests/data/timm_stats.csv, gathered from them), an unknown model in a
# list skipped and reported, the out-of-memory batch-size decay (the memory
# plan against $CTIMM_MEMORY_LIMIT) and --no-retry, refusals.
set(BENCH ${CMAKE_BINARY_DIR}/ctimm-bench)
add_test(NAME bench_columns COMMAND sh -c
  "${BENCH} -m test_resnet -b 4 --num-warm-iter 1 --num-bench-iter 2 --results-file both.csv > both.log && \
   head -1 both.csv | tr -d '\\r' | grep -qx 'model,infer_samples_per_sec,infer_step_time,infer_batch_size,infer_img_size,infer_gmacs,infer_macts,train_samples_per_sec,train_step_time,train_batch_size,train_img_size,param_count,infer_peak_planned_mib,infer_peak_rss_mib,train_peak_planned_mib,train_peak_rss_mib' && \
   grep -q '^test_resnet,[0-9.]*,[0-9.]*,4,160,0.1,0.64,[0-9.]*,[0-9.]*,4,160,0.47' both.csv && \
   ${BENCH} -m test_vit --bench train --detail -b 4 --num-warm-iter 0 --num-bench-iter 2 --results-file detail.json \
     --results-format json > /dev/null && grep -q 'train_bwd_time' detail.json && \
   printf 'test_vit\\nresnet5\\ntest_resnet\\n' > bench-list.txt && \
   ${BENCH} --model-list bench-list.txt --bench inference -b 2 --num-warm-iter 0 --num-bench-iter 1 \
     --results-file bench-list.csv > bench-list.log 2> bench-list.err && \
   grep -q \"unknown model 'resnet5'\" bench-list.err && test $(grep -c '^test_' bench-list.csv) -eq 2")
# The memory columns: the planned peak, ctimm-compile's for the same step
# (its "memory peak (planned)"), and the measured peak resident memory of
# the process, which holds at least that much; on a device backend also
# the device memory the program allocated, at least the plan's activations
# and parameters (state) and under the planned peak plus 1 MiB of scratch.
add_test(NAME bench_memory_columns COMMAND sh -c
  "${BENCH} -m test_resnet --bench train -b 4 --num-warm-iter 0 --num-bench-iter 1 --results-file mem.csv > mem.log && \
   planned=$(${COMPILE} --model test_resnet --train --batch-size 4 | sed -n 's/^memory peak (planned): \\([0-9.]*\\) MiB: .*/\\1/p') && \
   test -n \"$planned\" && grep -q \"^Memory: $planned MiB planned peak, [0-9.]* MiB measured peak (resident)$\" mem.log && \
   tr -d '\\r' < mem.csv | awk -F, -v p=$planned 'NR == 2 && $(NF - 1) == p && $NF > p { ok = 1 } END { exit !ok }' && \
   ${BENCH} -m test_resnet --bench train -b 2 --img-size 32 --device cuda-sim --num-warm-iter 0 --num-bench-iter 1 \
     --results-file memsim.csv > memsim.log && \
   grep -q '^Memory: [0-9.]* MiB planned peak, [0-9.]* MiB measured peak (resident), [0-9.]* MiB allocated on the device$' memsim.log && \
   tr -d '\\r' < memsim.csv | awk -F, 'NR == 1 && $NF == \"train_peak_device_mib\" { h = 1 } NR == 2 && h && $NF >= 0.9 * $(NF - 2) && $NF <= $(NF - 2) + 1 { ok = 1 } END { exit !ok }'")
# benchmark.py's input size: the weights' test-time size unless
# --use-train-size (resnet50.a1_in1k: 288 and 224), --img-size over both.
add_test(NAME bench_test_input_size COMMAND sh -c
  "${BENCH} -m resnet50 --bench profile --results-file size-test.csv > /dev/null && \
   ${BENCH} -m resnet50 --bench profile --use-train-size --results-file size-train.csv > /dev/null && \
   ${BENCH} -m resnet50 --bench profile --use-train-size --img-size 160 --results-file size-160.csv > /dev/null && \
   grep -q '^resnet50,[0-9.]*,[0-9.]*,1,288,' size-test.csv && grep -q '^resnet50,[0-9.]*,[0-9.]*,1,224,' size-train.csv && \
   grep -q '^resnet50,[0-9.]*,[0-9.]*,1,160,' size-160.csv")
add_test(NAME bench_anchor_stats COMMAND sh -c
  "${BENCH} --model-list ${CMAKE_SOURCE_DIR}/bench/benchmark_set.txt --bench profile --results-file prof.csv > /dev/null && \
   awk -f ${CMAKE_SOURCE_DIR}/bench/anchor_join.awk ${CMAKE_CURRENT_SOURCE_DIR}/data/timm_stats.csv prof.csv")
add_test(NAME bench_oom_retry COMMAND sh -c
  "CTIMM_MEMORY_LIMIT=40000000 ${BENCH} -m test_resnet --bench train -b 64 --num-warm-iter 0 --num-bench-iter 1 \
     --results-file oom.csv > oom.log 2>&1 && grep -q '^Reducing batch size to 48 for retry.' oom.log && \
   grep -q '^test_resnet,[0-9.]*,[0-9.]*,[1-9],160,' oom.csv && \
   CTIMM_MEMORY_LIMIT=40000000 ${FAIL} 'out of memory: the plan needs' ${BENCH} -m test_resnet --bench train -b 64 --no-retry")
# The cpu backend's choice between oneDNN and its own convolutions (and pooling) is
# timed once and kept in the kernel cache: a second process times nothing
# and runs the same kernels.
if(DNNL_INCLUDE AND DNNL_LIB)
  add_test(NAME bench_conv_choice_cached COMMAND sh -c
    "rm -rf kcc && export CTIMM_CACHE_DIR=$PWD/kcc && \
     ${BENCH} -m test_resnet --bench train -b 2 --num-warm-iter 0 --num-bench-iter 1 > conv1.log && \
     ${BENCH} -m test_resnet --bench train -b 2 --num-warm-iter 0 --num-bench-iter 1 > conv2.log && \
     grep -q '^Convolutions: [0-9]* of 44 on oneDNN [^;]*; pooling: [0-9]* of 8 on oneDNN .*: [1-9][0-9]* timed now, [0-9]* cached)$' conv1.log && \
     grep -q '^Convolutions: [0-9]* of 44 on oneDNN [^;]*; pooling: [0-9]* of 8 on oneDNN .*: 0 timed now, 52 cached)$' conv2.log && \
     test \"$(grep -o '^Convolutions: [0-9]* of 44 on oneDNN [^;]*; pooling: [0-9]*' conv1.log)\" = \
          \"$(grep -o '^Convolutions: [0-9]* of 44 on oneDNN [^;]*; pooling: [0-9]*' conv2.log)\"")
  set_property(TEST bench_conv_choice_cached APPEND PROPERTY ENVIRONMENT CTIMM_CONV=auto)
endif()
add_test(NAME bench_refuses_torchcompile COMMAND ${FAIL} "--torchcompile .benchmark.py's flag. is not implemented"
  ${BENCH} --torchcompile)
# --gp and --model-kwargs reach the model benchmark.py's create_model builds
# (the stats' graph, whose count the log shows, and the inference run's at
# 32): timm's param counts for test_vit (371240 plain) without its class
# token, average pooled, and at img_size 32; global_pool as a model kwarg is
# refused as benchmark.py's create_model call raises (it passes --gp's), and
# so are a Python literal of the wrong kind, a ViT option for a convnet and
# an img_size other than the bench's.
add_test(NAME bench_gp_model_kwargs COMMAND sh -c
  "${BENCH} -m test_vit --bench profile --gp avg --model-kwargs class_token=False > bkw.log && \
   grep -q '^Model test_vit created, param count: 371112$' bkw.log && \
   ${BENCH} -m test_vit --bench inference -b 2 --num-warm-iter 0 --num-bench-iter 1 --img-size 32 --gp avg \
     --model-kwargs img_size=32 class_token=False --results-file bkw.csv > bkw32.log && \
   grep -q '^Model test_vit created, param count: 364968$' bkw32.log && grep -q '^test_vit,.*,2,32,' bkw.csv && \
   ${FAIL} '^ctimm-bench: --model-kwargs global_pool=avg: benchmark.py passes global_pool to create_model itself \\(--gp\\)' \
     ${BENCH} -m test_vit --model-kwargs class_token=False global_pool=avg && \
   ${FAIL} '^ctimm-bench: --model-kwargs fc_norm=yes: fc_norm takes True or False$' \
     ${BENCH} -m test_vit --model-kwargs fc_norm=yes && \
   ${FAIL} \"^ctimm-bench: test_resnet: test_resnet takes no option 'reg_tokens'\" \
     ${BENCH} -m test_resnet --bench profile --model-kwargs reg_tokens=1 && \
   ${FAIL} 'give --img-size 48 too' ${BENCH} -m test_vit --bench profile --model-kwargs img_size=48")
add_test(NAME bench_refuses_headless_train COMMAND ${FAIL}
  "vit_base_patch16_siglip_224 has no classifier .num_classes 0. to train: give --num-classes N"
  ${BENCH} -m vit_base_patch16_siglip_224 --bench train --img-size 32 -b 2)
add_test(NAME bench_refuses_precision COMMAND ${FAIL} "--precision float16 is not one of float32, amp, amp_bfloat16"
  ${BENCH} --precision float16)
# --device cuda where it cannot run (no driver, as on CI): one line saying
# why, then the cpu backend.
add_test(NAME device_cuda_falls_back COMMAND sh -c
  "${VALIDATE} --device cuda --checkpoint ckpt-a/model_best.safetensors --img-size 32 -b 100 > cuda.log 2> cuda.err && \
   grep -q 'ctimm-validate: --device cuda: .*; running on the cpu backend' cuda.err && grep -q 'backend cpu' cuda.log")
set_tests_properties(device_cuda_falls_back PROPERTIES FIXTURES_REQUIRED "shapes_data;train_ckpt"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")

# --pretrained (train/pretrained.h) from a Hugging Face cache made by hand
# (ctimm-compile's initial weights as timm/<model>.<tag>'s model.safetensors):
# ctimm-validate and ctimm-infer give what --checkpoint of the same file
# gives; ctimm-train fine-tunes with a new classifier for the folder's
# classes, a test_vit at 32 with its pos_embed resampled, from a -c config's
# `pretrained: true` too; ctimm-bench loads them; train.py's
# --pretrained-path reads a train.py .pth.tar; a missing cache says where it
# looked and how to download. tests/test_pretrained.c holds the rest.
set(PRE_HUB pre-hub/models--timm--test_resnet.r160_in1k/snapshots/r1)
set(PRE_VIT pre-hub/models--timm--test_vit.r160_in1k/snapshots/r1)
add_test(NAME pretrained_cli COMMAND sh -c
  "rm -rf pre-hub pre-out && mkdir -p ${PRE_HUB} ${PRE_VIT} pre-out && \
   ${COMPILE} --model test_resnet --save-weights ${PRE_HUB}/model.safetensors --seed 3 > /dev/null && \
   ${COMPILE} --model test_vit --save-weights ${PRE_VIT}/model.safetensors --seed 4 > /dev/null && \
   V='${VALIDATE} --img-size 32 -b 100' && \
   I='${INFER} data/shapes-64/val --img-size 32 -b 100 --topk 3 --no-console-results' && \
   $V --pretrained --results-file pre-out/v-pre.csv > pre-out/v.log && \
   grep -q '^Loading pretrained weights from Hugging Face hub (timm/test_resnet.r160_in1k): .*/snapshots/r1/model.safetensors$' pre-out/v.log && \
   $V --checkpoint ${PRE_HUB}/model.safetensors --results-file pre-out/v-ck.csv > /dev/null && \
   cmp pre-out/v-pre.csv pre-out/v-ck.csv && \
   $I --model test_resnet.r160_in1k --pretrained --results-file pre-out/i-pre.csv > /dev/null && \
   $I --checkpoint ${PRE_HUB}/model.safetensors --results-file pre-out/i-ck.csv > /dev/null && \
   cmp pre-out/i-pre.csv pre-out/i-ck.csv && \
   ${TRAIN_SHORT} --epochs 1 --pretrained --output pre-out/t > pre-out/t.log && \
   grep -q '^Re-initialised the classifier (fc.weight, fc.bias) for 10 classes: the pretrained weights are for 1000$' pre-out/t.log && \
   printf 'model: test_vit\\npretrained: true\\nin_chans: 3\\n' > pre-out/vit.yaml && \
   ${TRAIN_SHORT} -c pre-out/vit.yaml --epochs 1 --output pre-out/v > pre-out/tv.log && \
   grep -q '^Resized position embedding: (10, 10) to (2, 2).$' pre-out/tv.log && \
   ${BENCH} -m test_vit --pretrained --img-size 64 --bench inference -b 2 --num-warm-iter 0 --num-bench-iter 1 | \
     grep -q '^Resized position embedding: (10, 10) to (4, 4).$' && \
   ${TRAIN_SHORT} --epochs 1 --pretrained-path ${CMAKE_CURRENT_SOURCE_DIR}/data/torch/test_resnet_views.pth.tar \
     --num-classes 12 --output pre-out/p > pre-out/p.log && \
   grep -q '^Loading pretrained weights from file (.*test_resnet_views.pth.tar)$' pre-out/p.log && \
   grep -q '^Re-initialised the classifier (fc.weight, fc.bias) for 12 classes, as train.py.s --pretrained-path' pre-out/p.log && \
   HF_HUB_CACHE=/nonexistent/hub ${FAIL} '^ctimm-validate: test_resnet: --pretrained: timm/test_resnet.r160_in1k is not in the Hugging Face cache /nonexistent/hub .from .HF_HUB_CACHE.: it has no models--timm--test_resnet.r160_in1k. ctimm never downloads: .huggingface-cli download timm/test_resnet.r160_in1k. puts it there$' \
     $V --pretrained")
set_tests_properties(pretrained_cli PROPERTIES FIXTURES_REQUIRED "shapes_data;shapes_small"
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data;HF_HUB_CACHE=${CMAKE_CURRENT_BINARY_DIR}/pre-hub")
add_test(NAME pretrained_refuses_other_tag COMMAND ${FAIL}
  "--model resnet50.a1h_in1k: the tag names pretrained weights, whose data config comes from their config.json: add --pretrained"
  ${TRAIN} --model resnet50.a1h_in1k)

# --in-chans 1: fine-tuning on gray ('L') images from the RGB weights of a
# hand-made hub cache, the stem summed over RGB (adapt_input_conv), the
# model's mean and std averaged to one channel; its checkpoint validates
# with --in-chans 1 to the top-1 of the run's own eval, and without it is
# refused naming the stem; ctimm-bench builds any channel count, its stem
# repeated and scaled. What timm cannot feed a model is refused by name.
set(GRAY_HUB gray-hub/models--timm--test_resnet.r160_in1k/snapshots/r1)
add_test(NAME train_validate_in_chans_1 COMMAND sh -c
  "rm -rf gray-hub gray-out && mkdir -p ${GRAY_HUB} && \
   ${COMPILE} --model test_resnet --save-weights ${GRAY_HUB}/model.safetensors --seed 3 > /dev/null && \
   HF_HUB_CACHE=gray-hub ${TRAIN} --in-chans 1 --pretrained --epochs 1 -b 32 --img-size 32 --lr 0.1 -j 2 \
     --log-interval 1000 --output gray-out > gray.log && cat gray.log && \
   grep -q '^Converted input conv conv1.0 pretrained weights from 3 to 1 channel(s)$' gray.log && \
   grep -q '32x32 gray (.L.); backend cpu, [0-9][0-9]* threads$' gray.log && \
   grep -q '^Normalising the 1-channel images by mean 0.5, std 0.5 ' gray.log && \
   ${VALIDATE} --in-chans 1 --checkpoint gray-out/model_best.safetensors --img-size 32 -b 100 \
     --results-file gray-out/val.csv > gray-val.log && \
   awk -F, -v v=\"$(sed -n 2p gray-out/val.csv)\" 'NR == 2 {split(v, r, \",\"); exit !(r[2] == $4)}' \
     gray-out/summary.csv && \
   ${FAIL} 'conv1.0.weight. has shape .16,1,3,3. in the file but the model needs .16,3,3,3.' \
     ${VALIDATE} --checkpoint gray-out/model_best.safetensors --img-size 32 && \
   HF_HUB_CACHE=gray-hub ${BENCH} -m test_resnet --pretrained --in-chans 4 --img-size 32 --bench inference -b 2 \
     --num-warm-iter 0 --num-bench-iter 1 > gray-bench.log && \
   grep -q '^Converted input conv conv1.0 pretrained weights from 3 to 4 channel(s)$' gray-bench.log && \
   grep -q 'w/ input size (4, 32, 32) and batch size 2.$' gray-bench.log")
set_tests_properties(train_validate_in_chans_1 PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
add_test(NAME in_chans_refused COMMAND sh -c
  "${FAIL} '^ctimm-train: --in-chans 4: timm.s data pipeline makes .L. .1-channel. images for any count but 3 unless --input-img-mode says otherwise; give --input-img-mode RGBA$' ${TRAIN} --in-chans 4 && \
   ${FAIL} '^ctimm-train: --in-chans 2: timm.s data pipeline makes .L. .1-channel., RGB or RGBA .4-channel. images, which a 2-channel model refuses; give 1, 3 or 4$' ${TRAIN} --in-chans 2 && \
   ${FAIL} '^ctimm-infer: --in-chans 2: timm.s data pipeline' ${INFER} --in-chans 2 && \
   ${FAIL} '^ctimm-train: --input-img-mode RGBA makes 4-channel images, but the model takes 3 .--in-chans.$' \
     ${TRAIN} --input-img-mode RGBA && \
   ${FAIL} '^ctimm-train: --in-chans 4: auto_augment rand-m9-mstd0.5 on RGBA images: not built' \
     ${TRAIN} --in-chans 4 --input-img-mode RGBA --aa rand-m9-mstd0.5 && \
   ${FAIL} 'grayscale_prob 0.2 on RGBA images: torchvision.s RandomGrayscale refuses 4-channel images' \
     ${TRAIN} --in-chans 4 --input-img-mode RGBA --grayscale-prob 0.2 && \
   ${FAIL} '--mean takes 1 or 4 values for 4-channel images, got 3' \
     ${VALIDATE} --in-chans 4 --input-img-mode RGBA --mean 0.1 0.2 0.3 && \
   ${FAIL} '^ctimm-validate: test_resnet: --input-img-mode CMYK: ctimm reads images as RGB, L .gray. or RGBA$' \
     ${VALIDATE} --input-img-mode CMYK && \
   ${FAIL} '^ctimm-train: --in-chans 1: auto_augment rand-m9-mstd0.5 on gray ..L.. images: .* PIL refuses for .L. images$' \
     ${TRAIN} --in-chans 1 --aa rand-m9-mstd0.5 && \
   ${FAIL} '^ctimm-train: --input-size 3 32 32 with --in-chans 1: the images would have another channel count' \
     ${TRAIN} --in-chans 1 --input-size 3 32 32 && \
   ${FAIL} 'crop mode .border. on gray ..L.. images: timm pads with the 3-value mean colour' \
     ${VALIDATE} --input-size 1 32 32 --crop-mode border && \
   ${FAIL} '--mean takes 1 value for 1-channel images, got 3' ${VALIDATE} --in-chans 1 --mean 0.1 0.2 0.3")
set_tests_properties(in_chans_refused PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
# --input-img-mode RGBA --in-chans 4 on a folder of PNGs with every kind of
# transparency and JPEGs (test_rgba checks the pixels against timm's): the
# 4-channel batch normalised by the model's mean and std averaged (timm's
# adapt_to_chs), the train transform's flips, jitter, blur and erasing on
# it; the checkpoint validates to the top-1 of the run's own eval.
add_test(NAME train_validate_rgba COMMAND sh -c
  "rm -rf rgba-data rgba-out && for s in train val; do for c in a b; do mkdir -p rgba-data/$s/$c; done; done && \
   for f in rgba/src.png images/rgba.png images/la.png images/rgb.jpg; do \
     for k in 1 2 3; do cp ${DATA}/$f rgba-data/train/a/$k-\${f##*/}; done; cp ${DATA}/$f rgba-data/val/a/; done && \
   for f in images/pal2_short_adam7.png rgba/trns_rgb.png rgba/trns_l.png images/rgba16_adam7.png; do \
     for k in 1 2 3; do cp ${DATA}/$f rgba-data/train/b/$k-\${f##*/}; done; cp ${DATA}/$f rgba-data/val/b/; done && \
   ${TRAIN} rgba-data --val-split val --in-chans 4 --input-img-mode RGBA --img-size 32 -b 4 --epochs 2 --lr 0.05 \
     --color-jitter 0.4 --gaussian-blur-prob 0.3 --vflip 0.5 --reprob 0.5 --remode pixel -j 2 \
     --log-interval 1000 --output rgba-out > rgba.log && cat rgba.log && \
   grep -q '32x32 RGBA; backend cpu, [0-9][0-9]* threads$' rgba.log && \
   grep -q '^Normalising the 4-channel images by mean 0.5, std 0.5 ' rgba.log && \
   ${VALIDATE} rgba-data --split val --in-chans 4 --input-img-mode RGBA \
     --checkpoint rgba-out/model_best.safetensors --img-size 32 -b 8 --results-file rgba-out/val.csv > rgba-val.log && \
   awk -F, -v v=\"$(sed -n 2p rgba-out/val.csv)\" 'NR > 1 && $4 > best {best = $4} END {split(v, r, \",\"); exit !(r[2] == best)}' \
     rgba-out/summary.csv && \
   ${FAIL} 'conv1.0.weight. has shape .16,4,3,3. in the file but the model needs .16,3,3,3.' \
     ${VALIDATE} rgba-data --split val --checkpoint rgba-out/model_best.safetensors --img-size 32")

# ctimm against timm on pretrained weights: tools/make_pretrained_cache.py
# makes a hub cache of timm's test_resnet, test_vit and test_maxvit (random init) with
# timm's logits and the states its create_model(pretrained=True,
# num_classes=7, img_size=96) loads; test_pretrained compares. Skipped
# (77) where timm is not importable ($CTIMM_TIMM_PYTHON, else
# PYTHONPATH=/opt/timm /usr/bin/python3).
add_test(NAME pretrained_timm COMMAND sh -c
  "PY=\${CTIMM_TIMM_PYTHON:-'env PYTHONPATH=/opt/timm /usr/bin/python3'} && \
   { $PY -c 'import timm' 2> /dev/null || { echo 'timm is not importable: skipped'; exit 77; }; } && \
   $PY ${CMAKE_SOURCE_DIR}/tools/make_pretrained_cache.py pre-timm && $<TARGET_FILE:test_pretrained> pre-timm")
set_tests_properties(pretrained_timm PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# ctimm-plot: a picture per run folder (a PNG of the asked size: IHDR, then
# width and height big-endian at bytes 16-23), a comparison for several
# folders (a one-epoch run among them), and refusals that name the file and
# the line and leave no PNG behind. Epoch 1 appears twice in plot-a, as after
# a resume: the later row wins, and the run has 3 epochs.
set(PLOT ${CMAKE_BINARY_DIR}/ctimm-plot)
set(PLOT_HEADER "epoch,train_loss,eval_loss,eval_top1,eval_top5,lr")
add_test(NAME plot_run COMMAND sh -c
  "rm -rf plot-a plot-b && mkdir plot-a plot-b && \
   printf '${PLOT_HEADER}\\n0,2.3,2.2,10,50,0.1\\n1,2.1,2.0,20,60,0.05\\n1,2.0,1.9,25,65,0.05\\n2,1.9,1.8,30,70,0.01\\n' \
     > plot-a/summary.csv && \
   printf '${PLOT_HEADER}\\n0,2.4,2.3,12,52,0.1\\n' > plot-b/summary.csv && \
   ${PLOT} plot-a --width 900 --height 300 > plot-a.log && grep -q 'plot-a/summary.png: 3 epochs' plot-a.log && \
   test \"$(od -An -tu1 -j12 -N12 plot-a/summary.png | tr -s ' ')\" = ' 73 72 68 82 0 0 3 132 0 0 1 44'")
set_tests_properties(plot_run PROPERTIES FIXTURES_SETUP plot_runs)
add_test(NAME plot_compare COMMAND sh -c
  "rm -f plot-cmp.png plot-b/summary.png && ${PLOT} plot-a plot-b -o plot-cmp.png > plot-cmp.log && \
   grep -q 'plot-cmp.png: 2 runs' plot-cmp.log && test -f plot-b/summary.png && \
   test \"$(od -An -tu1 -j16 -N8 plot-cmp.png | tr -s ' ')\" = ' 0 0 4 176 0 0 1 144'")
set_tests_properties(plot_compare PROPERTIES FIXTURES_REQUIRED plot_runs)
add_test(NAME plot_refuses_malformed COMMAND sh -c
  "rm -rf plot-bad && mkdir plot-bad && \
   printf '${PLOT_HEADER}\\n0,2.3,2.2,10,50,0.1\\n1,2.1,oops,20,60,0.05\\n' > plot-bad/summary.csv && \
   ${FAIL} 'plot-bad/summary.csv:3: eval_loss .oops. is not a number' ${PLOT} plot-bad && \
   test \"$(ls plot-bad)\" = summary.csv")
add_test(NAME plot_refuses_short_row COMMAND sh -c
  "rm -rf plot-short && mkdir plot-short && printf '${PLOT_HEADER}\\n0,2.3,2.2\\n' > plot-short/summary.csv && \
   ${FAIL} 'plot-short/summary.csv:2: 3 fields, but the header has 6 columns' ${PLOT} plot-short && \
   test \"$(ls plot-short)\" = summary.csv")
add_test(NAME plot_refuses_missing COMMAND ${FAIL} "cannot read plot-none/summary.csv: No such file"
  ${PLOT} plot-none)
# The legend names each run by the shortest tail of its path, in whole
# components, that no other run shares (a trailing slash and ./ aside; . and
# paths that climb with .. resolved first); --labels names them instead, one
# per folder, and must name them all.
add_test(NAME plot_labels_by_path_suffix COMMAND sh -c
  "rm -rf plot-lab && mkdir -p plot-lab/a/exp1 plot-lab/b/exp1 plot-lab/x/run plot-lab/y/other && \
   for d in a/exp1 b/exp1 x/run y/other; do printf '${PLOT_HEADER}\\n0,2.3,2.2,10,50,0.1\\n' > plot-lab/$d/summary.csv; done && \
   ${PLOT} plot-lab/a/exp1/ ./plot-lab/b/exp1 plot-lab/x/run -o plot-lab/abx.png | grep -q 'plot-lab/abx.png: 3 runs: a/exp1, b/exp1, run$' && \
   ${PLOT} plot-lab/x/run plot-lab/y/other/ -o plot-lab/xy.png | grep -q ': 2 runs: run, other$' && \
   (cd plot-lab/x/run && ${PLOT} . ../../y/other | grep -q 'compare.png: 2 runs: run, other$') && \
   cd plot-lab/a/exp1 && ${PLOT} ../exp1 ../../b/exp1 | grep -q 'compare.png: 2 runs: a/exp1, b/exp1$'")
set_tests_properties(plot_labels_by_path_suffix PROPERTIES FIXTURES_SETUP plot_label_runs)
add_test(NAME plot_labels_given COMMAND sh -c
  "${PLOT} plot-lab/a/exp1 plot-lab/b/exp1 --labels base,wide -o plot-lab/given.png | \
   grep -q 'plot-lab/given.png: 2 runs: base, wide$'")
set_tests_properties(plot_labels_given PROPERTIES FIXTURES_REQUIRED plot_label_runs)
add_test(NAME plot_refuses_label_count COMMAND sh -c
  "rm -f plot-lab/a/exp1/summary.png plot-lab/bad.png && \
   ${FAIL} '--labels gives 3 labels for 2 runs' ${PLOT} plot-lab/a/exp1 plot-lab/b/exp1 --labels p,q,r -o plot-lab/bad.png && \
   test ! -e plot-lab/bad.png && test ! -e plot-lab/a/exp1/summary.png")
set_tests_properties(plot_refuses_label_count PROPERTIES FIXTURES_REQUIRED plot_label_runs)
# both read and write plot-lab: one at a time
set_tests_properties(plot_labels_given plot_refuses_label_count PROPERTIES RESOURCE_LOCK plot_lab)

# ctimm-compile --compile: the graph's kernels through the kernel cache. A
# cold cache compiles once, a second run compiles nothing (a disk hit), a
# corrupted entry is recompiled exactly once and replaced; two processes
# compiling into one empty cache at once leave it valid. --dot writes a
# Graphviz picture of the fused kernels that dot parses.
set(COMPILE_HOST "${COMPILE} --model test_resnet --train --compile host --cache-stats")
add_test(NAME compile_kernel_cache COMMAND sh -c
  "rm -rf kc && export CTIMM_CACHE_DIR=$PWD/kc && \
   ${COMPILE_HOST} | grep -q 'kernel cache: .*: 1 compiled, 0 from memory, 0 from disk' && \
   ${COMPILE_HOST} | grep -q ': 0 compiled, 0 from memory, 1 from disk, 0 corrupt' && \
   f=$(ls kc/* | head -1) && printf 'X' | dd of=$f bs=1 seek=300 conv=notrunc 2>/dev/null && \
   ${COMPILE_HOST} | grep -q ': 1 compiled, 0 from memory, 0 from disk, 1 corrupt' && \
   ${COMPILE_HOST} | grep -q ': 0 compiled, 0 from memory, 1 from disk, 0 corrupt' && \
   rm -rf kc2 && export CTIMM_CACHE_DIR=$PWD/kc2 && \
   { ${COMPILE_HOST} > two-a.log & ${COMPILE_HOST} > two-b.log; wait; } && \
   grep -q 'compiled: 17 host kernels' two-a.log && grep -q 'compiled: 17 host kernels' two-b.log && \
   ${COMPILE_HOST} | grep -q ': 0 compiled, 0 from memory, 1 from disk, 0 corrupt' && \
   ${COMPILE} --model test_resnet --no-cache --compile host --cache-stats | grep -q '(--no-cache): 1 compiled'")
add_test(NAME compile_dot COMMAND sh -c
  "${COMPILE} --model test_resnet --train --dot train.dot > /dev/null && grep -q 'cluster_.*' train.dot && \
   grep -q 'library call' train.dot && grep -q 'fused elementwise ops' train.dot && dot -Tsvg train.dot -o train.svg && grep -q '<svg' train.svg")
if(CUDAToolkit_FOUND)
  add_test(NAME compile_cuda_kernels COMMAND sh -c
    "CTIMM_CACHE_DIR=$PWD/kc-cuda ${COMPILE} --model test_vit --train --amp --compile cuda --sm 90 | \
     grep -q 'compiled: [0-9]* CUDA kernels, [0-9]* distinct, for sm_90 (cubin'")
  # The cuda Program: its launch plan and an image per translation unit and of the library kernels
  # (of the storage types it launches: f32 here). Through the kernel cache the other tests use, as a
  # user's runs do: a second build's run (the sanitizers') finds the images NVRTC made for the first.
  add_test(NAME compile_dump_program_cuda COMMAND ${COMPILE} --model test_vit --train --dump-program cuda --sm 80)
  set_tests_properties(compile_dump_program_cuda PROPERTIES PASS_REGULAR_EXPRESSION "program: target cuda, .*\ntarget: sm_80, 132 SMs\nsteps: [0-9]+ .*\nstep 0: .*cuBLASLt GEMM.*\nimage unit 0: [0-9]+ bytes, sm_80 cubin\n.*image library f32: [0-9]+ bytes, sm_80 cubin\n.*: device \\+")
endif()
# The roofline of the cuda launch plan (no toolkit needed: nothing is
# compiled): a line a step, the totals, the ten highest floors.
add_test(NAME compile_roofline COMMAND ${COMPILE} --model test_resnet --train --amp --channels-last --roofline h200)
set_tests_properties(compile_roofline PROPERTIES PASS_REGULAR_EXPRESSION
  "roofline on h200: 989 TFLOP/s f16/bf16 tensor cores, 494 TF32 \\(not allowed\\), 67 f32, 4.80 TB/s memory\nstep  floor_us .*cuDNN conv fwd.*\ntotal: [0-9]+ steps, [0-9.]+ GFLOP, [0-9.]+ MB: floor [0-9.]+ ms .*\nthe ten steps of the highest floor:\n  step [0-9]+: ")
add_test(NAME compile_roofline_unknown_device COMMAND ${FAIL} "ctimm-compile: --roofline a100: no roofline for device 'a100' \\(h200, h100\\)"
  ${CMAKE_BINARY_DIR}/ctimm-compile --model test_resnet --roofline a100)
# A graph of several translation units (codegen/units.h; test_convnext's
# training step: its SGD launch has a loop per parameter) is cached per
# unit: a cold cache compiles each unit once, a second run compiles nothing.
# Repeated kernels are compiled once (test_vit: 74 kernels, 9 distinct).
add_test(NAME compile_units_cache COMMAND sh -c
  "rm -rf kcu && export CTIMM_CACHE_DIR=$PWD/kcu && \
   ${COMPILE} --model test_convnext --train --compile host --cache-stats > kcu-cold.log && \
   grep -q 'compiled: 39 host kernels, 19 distinct (.*) in 2 translation units' kcu-cold.log && \
   grep -q ': 2 compiled, 0 from memory, 0 from disk, 0 corrupt' kcu-cold.log && \
   ${COMPILE} --model test_convnext --train --compile host --cache-stats | \
     grep -q ': 0 compiled, 0 from memory, 2 from disk' && \
   ${COMPILE} --model test_vit --train --compile host --cache-stats | grep -q 'compiled: 10 host kernels, 5 distinct'")
add_test(NAME infer_label_type_none COMMAND sh -c
  "ls data/shapes-64/val > classes-lt.txt && \
   ${INFER} data/shapes-64/val --img-size 32 --num-classes 10 --class-map classes-lt.txt --label-type none -b 100 \
     --results-file lt.csv --no-console-results > /dev/null && head -1 lt.csv | grep -qx 'filename,index,prob' && \
   ${FAIL} '--label-type word is not one of' ${INFER} --label-type word")
set_tests_properties(infer_label_type_none PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")
add_test(NAME bench_refuses_unavailable_cuda COMMAND ${FAIL} "ctimm-bench: --device cuda: "
  ${CMAKE_BINARY_DIR}/ctimm-bench -m test_vit --device cuda)

# A ten-class set of 40 training and 20 validation images keeps each run a
# few steps (the data-parallel tests', and train_resume_torch's).
add_test(NAME dist_data COMMAND sh -c
  "rm -rf dist-data && for s in train:4 val:2; do for c in data/shapes-64/\${s%:*}/*; do \
     d=dist-data/\${s%:*}/\${c##*/} && mkdir -p $d && cp $(ls -d $c/* | head -\${s#*:}) $d; done; done")
set_tests_properties(dist_data PROPERTIES FIXTURES_REQUIRED shapes_data FIXTURES_SETUP dist_data)
if(CTIMM_HAVE_MPI)
  # Data-parallel training over MPI (two ranks on two cores): as root in CI,
  # so Open MPI is told that is fine; no CMA single-copy (containers forbid
  # ptrace), one OpenBLAS thread a rank. Under LeakSanitizer, what Open MPI
  # keeps at MPI_Finalize is suppressed by library (tests/lsan_mpi.supp), which
  # needs its plugins kept loaded and whole stacks (Open MPI has no frame
  # pointers); ctimm's own leaks are still caught.
  set(DIST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_btl_vader_single_copy_mechanism=none;OPENBLAS_NUM_THREADS=1;OMPI_MCA_mca_base_component_disable_dlclose=1;PMIX_MCA_mca_base_component_disable_dlclose=1;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_mpi.supp:fast_unwind_on_malloc=0")
  set(TRAIN_DIST "${TRAIN} dist-data --val-split val --model test_vit --img-size 32 --no-aug -vb 4 -j 1 --log-interval 1")
  string(REPLACE "test_vit" "test_resnet" TRAIN_DIST_BN "${TRAIN_DIST}")
  add_test(NAME test_dist_two_ranks COMMAND ${MPIEXEC_EXECUTABLE} -np 2 --oversubscribe $<TARGET_FILE:test_dist>)
  # 2 ranks x batch 4 (--nproc-per-node) train to the weights of 1 rank x
  # batch 8 (the loader's shards interleave into the one-rank batches; no
  # augmentation, no dropout), within 1e-5 relative per tensor, the LR from
  # --lr-base scaled by the global batch in both; --dist-check-params finds
  # the ranks' parameters identical after every step; only rank 0 logs.
  add_test(NAME dist_train_equals_one_rank COMMAND sh -c
    "rm -rf dist-one dist-two && ${TRAIN_DIST} -b 8 --epochs 2 --output dist-one > dist-one.log && \
     ${TRAIN_DIST} -b 4 --epochs 2 --output dist-two --nproc-per-node 2 --dist-check-params > dist-two.log && \
     grep -q '^Distributed: 2 ranks, global batch 8' dist-two.log && \
     test $(grep -c '^Train: 0 ' dist-two.log) -eq 5 && grep -q 'LR: 3.125e-03' dist-two.log && \
     ${RUN} --compare dist-two/last.safetensors dist-one/last.safetensors --tol 1e-5")
  # --sync-bn: 2 ranks x 4 of test_resnet == 1 rank x 8, BN running statistics
  # included (with sync BN they are the global batch's; --dist-bn is off).
  add_test(NAME dist_sync_bn_equals_one_rank COMMAND sh -c
    "rm -rf sbn-one sbn-two && ${TRAIN_DIST_BN} -b 8 --epochs 2 --output sbn-one > sbn-one.log && \
     ${TRAIN_DIST_BN} -b 4 --epochs 2 --output sbn-two --nproc-per-node 2 --sync-bn --dist-check-params > sbn-two.log && \
     grep -q '^Synchronized BatchNorm: [1-9][0-9]* batch norms' sbn-two.log && \
     ${RUN} --compare sbn-two/last.safetensors sbn-one/last.safetensors --tol 1e-5")
  # A torchrun-style launch (torchrun --nproc_per_node 2 --no_python ctimm-train
  # sets these variables; Debian's torchrun itself fails on Python 3.11), rank 1
  # started first: the ranks meet at MASTER_ADDR:MASTER_PORT through rank 0's
  # ompi-server, and train to the weights of 1 rank x batch 8.
  add_test(NAME dist_torchrun_env_equals_one_rank COMMAND sh -c
    "rm -rf trv-one trv-two && ${TRAIN_DIST} -b 8 --epochs 2 --output trv-one > trv-one.log &&    export WORLD_SIZE=2 MASTER_ADDR=localhost MASTER_PORT=29531 &&    (RANK=1 LOCAL_RANK=1 ${TRAIN_DIST} -b 4 --epochs 2 --output trv-two --dist-check-params > trv-1.log 2>&1 &     RANK=0 LOCAL_RANK=0 ${TRAIN_DIST} -b 4 --epochs 2 --output trv-two --dist-check-params > trv-0.log && wait $!) &&    grep -q '^Distributed: 2 ranks, global batch 8' trv-0.log &&    ${RUN} --compare trv-two/last.safetensors trv-one/last.safetensors --tol 1e-5")
  # --aug-repeats 0.5 on 2 ranks: RepeatAugSampler's ceil(40 * 0.5 / 2) = 10
  # samples a rank, 2 batches of 4 (test_loader checks its indices against timm's).
  add_test(NAME dist_aug_repeats COMMAND sh -c
    "rm -rf dist-rep && ${TRAIN_DIST} -b 4 --epochs 1 --output dist-rep --nproc-per-node 2 --aug-repeats 0.5 \
       > dist-rep.log && test $(grep -c '^Train: 0 ' dist-rep.log) -eq 2")
  # A killed rank ends the run within 30 s; --resume goes on (tests/train_dist_kill.sh).
  add_test(NAME dist_kill_resume COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train_dist_kill.sh ${TRAIN} dist-data
    --val-split val --model test_vit --img-size 32 --no-aug -vb 4 -j 1 -b 4 --log-interval 100)
  # The watchdog: a killed rank of a torchrun-style world, and a stopped
  # (hung) rank under mpirun, end the run within 20 s (tests/train_dist_hang.sh).
  foreach(mode torchrun mpirun)
    add_test(NAME dist_watchdog_${mode} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/train_dist_hang.sh ${mode} ${TRAIN}
      dist-data --val-split val --model test_vit --img-size 32 --no-aug -vb 4 -j 1 -b 4 --log-interval 100)
  endforeach()
  add_test(NAME dist_refusals COMMAND sh -c
    "WORLD_SIZE=2 ${FAIL} 'WORLD_SIZE=2 .a torchrun-style launch. needs RANK .0..1., MASTER_ADDR and MASTER_PORT' \
       ${TRAIN} && \
     ${FAIL} '--dist-timeout must be above 0 seconds' ${TRAIN} --dist-timeout 0 && \
     ${FAIL} '--aug-repeats 3: timm.s RepeatAugSampler needs distributed training' ${TRAIN_DIST} --aug-repeats 3 && \
     ${FAIL} '--nproc-per-node 3, but the launcher started 2 ranks' \
       ${MPIEXEC_EXECUTABLE} -np 2 --oversubscribe ${TRAIN_DIST} --nproc-per-node 3")
  set_tests_properties(dist_train_equals_one_rank dist_sync_bn_equals_one_rank dist_torchrun_env_equals_one_rank
    dist_kill_resume dist_watchdog_torchrun dist_watchdog_mpirun dist_refusals dist_aug_repeats PROPERTIES
    FIXTURES_REQUIRED dist_data)
  set_tests_properties(test_dist_two_ranks dist_train_equals_one_rank dist_sync_bn_equals_one_rank dist_aug_repeats
    dist_torchrun_env_equals_one_rank dist_kill_resume dist_watchdog_torchrun dist_watchdog_mpirun dist_refusals PROPERTIES
    ENVIRONMENT "${DIST_ENV}")
  # As root (containers, cloud images) and without Open MPI's
  # OMPI_ALLOW_RUN_AS_ROOT* (unset here too, should the caller's shell have
  # them), --nproc-per-node and tools/distributed_train.sh still start the
  # ranks, as torchrun does, saying so in one line.
  set(DIST_ENV_ROOT ${DIST_ENV})
  list(FILTER DIST_ENV_ROOT EXCLUDE REGEX "^OMPI_ALLOW_RUN_AS_ROOT")
  string(REPLACE "${TRAIN} " "" TRAIN_DIST_ARGS "${TRAIN_DIST}")
  set(AS_ROOT_SAID "'^ctimm-train: running as root: mpiexec started with --allow-run-as-root$'")
  add_test(NAME dist_nproc_per_node_as_root COMMAND sh -c
    "unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM && rm -rf droot && \
     ${TRAIN_DIST} -b 4 --epochs 1 --output droot --nproc-per-node 2 > droot.log 2> droot.err && \
     grep -q '^Distributed: 2 ranks, global batch 8' droot.log && \
     { test $(id -u) -ne 0 || grep -q ${AS_ROOT_SAID} droot.err; }")
  add_test(NAME dist_train_script_as_root COMMAND sh -c
    "unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM && rm -rf droot-sh && \
     CTIMM_TRAIN=${TRAIN} ${CMAKE_SOURCE_DIR}/tools/distributed_train.sh 2 ${TRAIN_DIST_ARGS} -b 4 --epochs 1 \
       --output droot-sh > droot-sh.log 2> droot-sh.err && \
     grep -q '^Distributed: 2 ranks, global batch 8' droot-sh.log && \
     { test $(id -u) -ne 0 || grep -q ${AS_ROOT_SAID} droot-sh.err; }")
  set_tests_properties(dist_nproc_per_node_as_root dist_train_script_as_root PROPERTIES
    FIXTURES_REQUIRED dist_data ENVIRONMENT "${DIST_ENV_ROOT}")
  # One Open MPI job at a time under ctest -j: two ranks a job fill the two
  # cores, and a launch beside another job's failed once in a parallel run.
  set_tests_properties(test_dist_two_ranks dist_train_equals_one_rank dist_sync_bn_equals_one_rank
    dist_torchrun_env_equals_one_rank dist_aug_repeats dist_kill_resume dist_watchdog_torchrun dist_watchdog_mpirun
    dist_refusals dist_nproc_per_node_as_root dist_train_script_as_root PROPERTIES RESOURCE_LOCK mpi)
else()
  # Without MPI (CMake found none) a launch of several ranks, by
  # --nproc-per-node, an MPI launcher or a torchrun-style world, fails in one
  # line that says what to install.
  set(NO_MPI "this build of ctimm has no MPI.*'libopenmpi-dev openmpi-bin'")
  add_test(NAME dist_nproc_per_node_without_mpi COMMAND sh -c
    "${FAIL} \"^ctimm-train: --nproc-per-node 2: ${NO_MPI}\" ${TRAIN} --nproc-per-node 2 \
       > nompi.log && test $(wc -l < nompi.log) -eq 1 && \
     OMPI_COMM_WORLD_SIZE=2 ${FAIL} \"^ctimm-train: an MPI launcher started this process as a rank, but ${NO_MPI}\" \
       ${TRAIN} && \
     WORLD_SIZE=2 ${FAIL} \"^ctimm-train: WORLD_SIZE=2 .a torchrun-style launch., but ${NO_MPI}\" ${TRAIN}")
endif()

# Ctrl-C while the cpu backend's C compiler runs (tests/compile_interrupt.sh:
# a cold private kernel cache, a CTIMM_CC that sleeps over its Nth compile):
# every tool exits 130 at once, leaving no compiler process and no temporary
# file. ctimm-train interrupted compiling its training step has trained
# nothing; interrupted compiling its eval graph, at the first validation, it
# leaves a recovery checkpoint of the whole epoch, and the resumed run equals
# the uninterrupted one bit for bit. test_efficientnet, whose eval graph has
# kernels to compile (its squeeze-excite gates); test_resnet's eval steps are
# all library calls, the activations epilogues of its batch norms.
set(INTR ${CMAKE_CURRENT_SOURCE_DIR}/compile_interrupt.sh)
set(TRAIN_INTR "${TRAIN} --model test_efficientnet -b 16 --img-size 32 --lr 0.1 -j 1 --log-interval 1000 --epochs 1 --train-split val")
add_test(NAME compile_interrupt_train_step COMMAND ${INTR} intr-step 1
  "Interrupted at epoch 0, batch 0 of 31, compiling the training step; nothing trained" ${TRAIN} -b 16 --img-size 32
  --lr 0.1 -j 1 --epochs 1 --train-split val)
add_test(NAME compile_interrupt_train_validation COMMAND sh -c
  "rm -rf intr-va intr-vb intr-vb-* && ${TRAIN_INTR} --output intr-va > intr-va.log && \
   ${INTR} intr-vb 2 \"Interrupted in epoch 0's validation; resume with --resume intr-vb/recovery-0-30.safetensors\" \
     ${TRAIN_INTR} --output intr-vb && \
   ${TRAIN_INTR} --output intr-vb --resume intr-vb/recovery-0-30.safetensors > intr-vc.log && \
   last=$(ls -td intr-vb intr-vb-[0-9]* | head -1) && \
   cmp intr-va/summary.csv $last/summary.csv && cmp intr-va/last.safetensors $last/last.safetensors")
add_test(NAME compile_interrupt_validate COMMAND ${INTR} intr-validate 1 "interrupted by SIGINT"
  ${VALIDATE} --img-size 32 -b 100 -j 1)
add_test(NAME compile_interrupt_infer COMMAND ${INTR} intr-infer 1 "interrupted by SIGINT"
  ${INFER} data/shapes-64/val --img-size 32 -b 100 -j 1 --no-console-results --results-dir intr-infer-out)
set_tests_properties(compile_interrupt_train_step compile_interrupt_train_validation compile_interrupt_validate
  compile_interrupt_infer PROPERTIES FIXTURES_REQUIRED shapes_data
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data;OPENBLAS_NUM_THREADS=1")
add_test(NAME compile_interrupt_bench COMMAND ${INTR} intr-bench 1 "interrupted by SIGINT"
  ${BENCH} -m test_resnet -b 4 --num-warm-iter 1 --num-bench-iter 2)
add_test(NAME compile_interrupt_run COMMAND ${INTR} intr-run 1 "interrupted by SIGINT"
  ${RUN} --model test_resnet --backend cpu --vectors ${DATA}/test_resnet.safetensors --out intr-run.safetensors)
add_test(NAME compile_interrupt_compile COMMAND ${INTR} intr-compile 1 "compiling kernel .*: interrupted"
  ${COMPILE} --model test_resnet --train --compile host)
# A kernel cache path that cannot be used (here a regular file) is said once
# a process, in one line, and the run goes on compiling in memory (ctimm-run
# compiles three graphs).
add_test(NAME cache_unusable_said_once COMMAND sh -c
  "rm -rf kc-file && touch kc-file && \
   CTIMM_CACHE_DIR=$PWD/kc-file ${RUN} --model test_resnet --backend cpu --vectors ${DATA}/test_resnet.safetensors \
     --out kc-file.safetensors 2> kc-file.err && cat kc-file.err && \
   test $(grep -c 'kernel cache' kc-file.err) -eq 1 && \
   grep -q '^ctimm: warning: kernel cache: .*/kc-file is not a directory; .*set CTIMM_CACHE_DIR' kc-file.err")

# --gp and ViT --model-kwargs: test_vit without its class token, average
# pooled with fc_norm and one register token, trains an epoch; its weights
# hold reg_token and fc_norm and no cls_token (timm's names for these options).
add_test(NAME train_gp_model_kwargs COMMAND sh -c
  "rm -rf gp-out && ${TRAIN_SHORT} --model test_vit --epochs 1 --gp avg --model-kwargs img_size=32 class_token=False \
   reg_tokens=1 fc_norm=True --output gp-out && grep -q reg_token gp-out/last.safetensors && \
   grep -q fc_norm.weight gp-out/last.safetensors && ! grep -q cls_token gp-out/last.safetensors")
set_tests_properties(train_gp_model_kwargs PROPERTIES FIXTURES_REQUIRED shapes_small
  ENVIRONMENT "CTIMM_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/data")

# WebDataset shards (--dataset wds/NAME, runtime/data/wds.h): 10 train shards
# of 6 generated shapes images, timm's _info.json; 2 val shards by pattern.
add_test(NAME wds_data COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/make_wds_shards.sh data/shapes-64 wds-data)
set_tests_properties(wds_data PROPERTIES FIXTURES_REQUIRED shapes_data FIXTURES_SETUP wds_data)
set(TRAIN_WDS "${TRAIN} wds-data --dataset wds/shapes --val-split 'shapes-val-{000000..000001}.tar|20' --model test_vit --img-size 32 --no-aug -j 1 --log-interval 100")
if(CTIMM_HAVE_MPI)
  # 2 ranks x batch 5, one loader worker each: timm's epoch is 30 samples a
  # rank, each rank's 5 shards (shuffled by epoch); CTIMM_SAMPLE_LOG shows every
  # one of the 60 samples trained on exactly once in each of 2 epochs, in
  # another order in the second; validation's 20 are 2 batches of 5 a rank.
  add_test(NAME wds_two_ranks_each_sample_once COMMAND sh -c
    "rm -rf wds-two wds-seen.* && CTIMM_SAMPLE_LOG=wds-seen ${TRAIN_WDS} -b 5 -vb 5 --epochs 2 --nproc-per-node 2 \
       > wds-two.log && \
     for e in 0 1; do \
       test $(grep -c \"^$e \" wds-seen.rank0) -eq 30 && test $(grep -c \"^$e \" wds-seen.rank1) -eq 30 && \
       test $(cat wds-seen.rank0 wds-seen.rank1 | grep \"^$e \" | sort -u | wc -l) -eq 60 && \
       test $(cat wds-seen.rank0 wds-seen.rank1 | grep \"^$e \" | cut -d' ' -f2 | cut -d: -f1 | sort -u | wc -l) -eq 10 \
         || exit 1; \
     done && \
     test \"$(grep '^0 ' wds-seen.rank0 | cut -d' ' -f2)\" != \"$(grep '^1 ' wds-seen.rank0 | cut -d' ' -f2)\" && \
     test $(grep -c '^Test: \\[2/2\\]' wds-two.log) -eq 2")
  set_tests_properties(wds_two_ranks_each_sample_once PROPERTIES FIXTURES_REQUIRED wds_data ENVIRONMENT "${DIST_ENV}"
    RESOURCE_LOCK mpi)
endif()
# Damaged shards, as timm's log_and_continue takes them: a shard cut short
# keeps the samples before the damage, a missing one and one cut inside its
# first header give none; each is a warning and the epoch (60 samples) is
# made of the rest. A split no shard of which can be read is refused.
add_test(NAME wds_damaged_shards COMMAND sh -c
  "rm -rf wds-dmg dmg-seen.* && cp -r wds-data wds-dmg && \
   head -c 12000 wds-data/shapes-train-000003.tar > wds-dmg/shapes-train-000003.tar && \
   rm wds-dmg/shapes-train-000005.tar && head -c 300 wds-data/shapes-train-000007.tar > wds-dmg/shapes-train-000007.tar && \
   CTIMM_SAMPLE_LOG=dmg-seen ${TRAIN} wds-dmg --dataset wds/shapes --val-split 'shapes-val-{000000..000001}.tar|20' \
     --model test_vit --img-size 32 --no-aug -j 1 --log-interval 100 -b 5 --epochs 1 > dmg.log 2> dmg.err && \
   test $(grep -c 'log_and_continue' dmg.err) -eq 3 && grep -q 'shapes-train-000003.tar: member at offset' dmg.err && \
   grep -q 'shapes-train-000005.tar: No such file' dmg.err && \
   test $(grep -c '^0 ' dmg-seen.rank0) -eq 60 && grep -q 'shapes-train-000003.tar:' dmg-seen.rank0 && \
   ! grep -q 'shapes-train-00000[57].tar:' dmg-seen.rank0 && \
   ${FAIL} \"split 'shapes-train-000005.tar|10': no shard could be read\" ${TRAIN} wds-dmg --dataset wds/shapes \
     --train-split 'shapes-train-000005.tar|10' --val-split '' --model test_vit --img-size 32 -j 1")
set_tests_properties(wds_damaged_shards PROPERTIES FIXTURES_REQUIRED wds_data)
# --val-interval 2 over 3 epochs: train.py validates (and saves) after epochs
# 1 and 2 (the last) only; --train-num-samples sets the wds epoch (24: 3 batches of 8);
# --input-img-mode: RGB or L, matching the model's channels; a training split
# of unknown size is refused as timm refuses it, and so are a --target-key
# the samples' .json lack (there is none) and an --input-key of no member.
add_test(NAME wds_val_interval_and_refusals COMMAND sh -c
  "rm -rf wds-vi && ${TRAIN_WDS} -b 8 --epochs 3 --val-interval 2 --train-num-samples 24 --input-img-mode RGB \
     --output wds-vi --experiment e > wds-vi.log && \
   test $(grep -c '^Skipping eval and checkpointing' wds-vi.log) -eq 1 && \
   test $(grep -c '^Test: ' wds-vi.log) -eq 2 && test \"$(tail -n +2 wds-vi/e/summary.csv | cut -d, -f1 | paste -sd' ')\" = '1 2' && \
   grep -q '^Train: 0 \\[   3/3 ' wds-vi.log && \
   ${FAIL} '--input-img-mode L makes 1-channel images, but the model takes 3' ${TRAIN_WDS} --input-img-mode L && \
   ${FAIL} '--input-img-mode CMYK: ctimm reads images as RGB, L .gray. or RGBA' ${TRAIN_WDS} --input-img-mode CMYK && \
   ${FAIL} 'sample count is not known' ${TRAIN_WDS} --train-split 'shapes-train-{000000..000009}.tar' && \
   ${FAIL} \"sample 'train_00000' has no .json for its label field 'y'\" ${TRAIN_WDS} --target-key y && \
   ${FAIL} 'no samples .an image with a .cls' ${TRAIN_WDS} --input-key 'png;webp'")
set_tests_properties(wds_val_interval_and_refusals PROPERTIES FIXTURES_REQUIRED wds_data)
# --tta 2 (train.py's validate: each 2 consecutive outputs averaged, scored
# on the first one's target): a validation split of one image a class, each
# image also the next class's (so consecutive pairs are one image, labelled
# right then wrong), scores with --tta 2 what --tta 0 scores on the right
# halves alone, after the same training; a batch it cannot halve is refused.
add_test(NAME train_tta_averages_pairs COMMAND sh -c
  "rm -rf tta-data && ls data/shapes-64/train > tta-classes.txt && k=0 && \
   for c in data/shapes-64/train/*; do n=\${c##*/} && mkdir -p tta-data/train/$n tta-data/eval/$n && \
     cp $(ls -d $c/* | head -4) tta-data/train/$n && \
     if [ $((k % 2)) -eq 0 ]; then f=$(ls -d data/shapes-64/val/$n/* | head -1) && mkdir -p tta-data/val/$n && \
       cp $f tta-data/val/$n/x.jpg; fi && cp $f tta-data/eval/$n/x.jpg && k=$((k + 1)); done && \
   T='${TRAIN} tta-data --model test_vit --img-size 32 --no-aug -j 1 -b 8 -vb 4 --epochs 1 --log-interval 100 --class-map tta-classes.txt' && \
   $T --val-split val > tta-1.log && $T --val-split eval --tta 2 > tta-2.log && $T --val-split eval > tta-0.log && \
   grep '^Test: ' tta-1.log | sed 's/.*Loss/Loss/' > tta-1.txt && grep '^Test: ' tta-2.log | sed 's/.*Loss/Loss/' > tta-2.txt && \
   grep '^Test: ' tta-0.log | sed 's/.*Loss/Loss/' > tta-0.txt && \
   test -s tta-1.txt && cmp tta-1.txt tta-2.txt && ! cmp -s tta-1.txt tta-0.txt && \
   ${FAIL} '--tta 3: the validation batch size 4 is not a multiple of it' $T --val-split eval --tta 3")
set_tests_properties(train_tta_averages_pairs PROPERTIES FIXTURES_REQUIRED shapes_data ENVIRONMENT OPENBLAS_NUM_THREADS=1)
# --val-split '': train.py makes no eval loader; summary.csv has the train
# loss and lr only, and the train loss ranks the checkpoints.
add_test(NAME train_without_validation COMMAND sh -c
  "rm -rf wds-nv && ${TRAIN_WDS} -b 8 --epochs 2 --val-split '' --output wds-nv --experiment e > wds-nv.log && \
   ! grep -q '^Test' wds-nv.log && grep -q ', 0 validation images' wds-nv.log && \
   test \"$(head -1 wds-nv/e/summary.csv)\" = epoch,train_loss,lr && test $(wc -l < wds-nv/e/summary.csv) -eq 3 && \
   test -f wds-nv/e/model_best.safetensors")
set_tests_properties(train_without_validation PROPERTIES FIXTURES_REQUIRED wds_data)
# ctimm-validate (and ctimm-infer, through cli/eval.c) reads wds splits too: the
# 20 val samples once.
add_test(NAME validate_wds COMMAND sh -c
  "${VALIDATE} wds-data --dataset wds/shapes --split 'shapes-val-{000000..000001}.tar' --model test_vit \
     --img-size 32 --num-classes 10 -b 8 > wds-val.log && grep -q '^Data: wds-data: 20 images' wds-val.log")
set_tests_properties(validate_wds PROPERTIES FIXTURES_REQUIRED wds_data)

# Rematerialisation (passes/remat.c, tests/test_remat.c for its numbers): the
# flags of ctimm-compile, ctimm-train and ctimm-bench reach the pass, and a
# budget nothing meets, or a flag without a training step, is refused.
add_test(NAME compile_grad_checkpointing COMMAND ${COMPILE} --model test_resnet --train --grad-checkpointing)
set_tests_properties(compile_grad_checkpointing PROPERTIES PASS_REGULAR_EXPRESSION
  "remat: [1-9][0-9]* activations recomputed in the backward by [1-9][0-9]* nodes")
add_test(NAME compile_memory_budget_too_small COMMAND ${FAIL} "--memory-budget 1.0 MiB: the step needs at least"
  ${COMPILE} --model test_resnet --train --memory-budget 1M)
add_test(NAME compile_remat_needs_train COMMAND ${FAIL} "add --train" ${COMPILE} --model test_resnet --grad-checkpointing)
add_test(NAME compile_memory_budget_bad COMMAND ${FAIL} "--memory-budget expects a size in bytes"
  ${COMPILE} --model test_resnet --train --memory-budget 2X)
# Without a flag the pass recomputes the cheap ones (RematSpec.cheap): the
# planned peak falls; --keep-activations keeps them all.
add_test(NAME compile_cheap_remat COMMAND sh -c
  "${COMPILE} --model test_vit --train > cheap.log && ${COMPILE} --model test_vit --train --keep-activations > keep.log && \
   a=$(sed -n 's/^remat: [1-9][0-9]* activations recomputed .*planned peak \\([0-9.]*\\) -> \\([0-9.]*\\) MiB/\\1 \\2/p' cheap.log) && \
   echo \"planned peak without, with: $a\" && echo $a | awk '{ exit !($2 > 0 && $2 < $1) }' && ! grep -q '^remat:' keep.log")
add_test(NAME train_cheap_remat COMMAND sh -c
  "${TRAIN_SHORT} --epochs 1 --output cheap-out > cheap-train.log && \
   grep -q 'Recomputing [1-9][0-9]* activations in the backward (cheap ones' cheap-train.log && \
   grep -q '^Convolutions: ' cheap-train.log && \
   ${TRAIN_SHORT} --epochs 1 --keep-activations --output keep-out > keep-train.log && \
   ! grep -q 'Recomputing' keep-train.log && grep -q '^0,' keep-out/summary.csv")
set_tests_properties(train_cheap_remat PROPERTIES FIXTURES_REQUIRED shapes_small ENVIRONMENT CTIMM_CONV=auto)
add_test(NAME train_grad_checkpointing COMMAND sh -c
  "${TRAIN_SHORT} --epochs 1 --grad-checkpointing --output remat-out > remat.log && \
   grep -q 'Recomputing [1-9][0-9]* activations in the backward (--grad-checkpointing)' remat.log && \
   grep -q '^0,' remat-out/summary.csv")
set_tests_properties(train_grad_checkpointing PROPERTIES FIXTURES_REQUIRED shapes_small)
add_test(NAME bench_grad_checkpointing COMMAND sh -c
  "${BENCH} -m test_resnet -b 4 --bench train --num-warm-iter 1 --num-bench-iter 1 > remat-plain.log && \
   ${BENCH} -m test_resnet -b 4 --bench train --num-warm-iter 1 --num-bench-iter 1 --grad-checkpointing > remat-ckpt.log && \
   a=$(sed -n 's/^Memory: \\([0-9.]*\\) MiB planned.*/\\1/p' remat-plain.log) && \
   b=$(sed -n 's/^Memory: \\([0-9.]*\\) MiB planned.*/\\1/p' remat-ckpt.log) && \
   echo \"planned peak $a MiB, with checkpointing $b MiB\" && awk -v a=$a -v b=$b 'BEGIN { exit !(b > 0 && b < a) }'")
