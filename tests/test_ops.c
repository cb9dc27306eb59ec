/*
 * Every op's shape rule and ref kernel against PyTorch. Each test builds a
 * tiny graph with the builder, runs it on the ref backend and compares the
 * outputs with values PyTorch computed in float64 from the same inputs,
 * by relative error ||got - want|| / ||want||. Shape rules that must reject
 * their inputs are checked to fail the build with a message naming the op.
 *
 * Inputs: graph input k (in value order) holds amp * sin(0.7 i + 0.3 + 1.1 k)
 * and f32 state_dict entry j holds 0.5 * sin(0.7 i + 0.3 + 1.1 (10 + j)),
 * both rounded to each tensor's dtype; gen() below and in the snippet.
 * The want_* arrays are the output of this Python (torch 1.13, Debian's
 * /usr/bin/python3); to regenerate, save it as gen.py, run it and replace
 * the arrays with what it prints:
 *
    import math, torch, torch.nn.functional as F
    D = torch.float64
    def gen(shape, k, amp=1.0, f32=True):  # input k: amp*sin(0.7i+0.3+1.1k), rounded to f32
        t = torch.tensor([amp * math.sin(0.7 * i + 0.3 + 1.1 * k) for i in range(math.prod(shape))], dtype=D)
        return (t.float().double() if f32 else t).reshape(shape)
    par = lambda shape, j: gen(shape, 10 + j, 0.5)  # state_dict entry j
    sdpa = getattr(F, 'scaled_dot_product_attention', None) or (lambda *qkv: F._scaled_dot_product_attention(*qkv)[0])
    E = {}
    x, w, b = gen((2, 4, 5, 7), 0), par((4, 2, 3, 3), 0), par((4,), 1)
    E['conv'], E['conv_bias'] = F.conv2d(x, w, None, 2, 1, 2, 2), F.conv2d(x, w, b, 2, 1, 2, 2)
    x, w, b = (gen(s, k, 1.0, False) for k, s in enumerate([(2, 4, 5, 7), (4, 2, 3, 3), (4,)]))
    E['conv_f64'] = F.conv2d(x, w, b, 2, 1, 2, 2)
    x, w, b, rm = gen((2, 3, 2, 2), 0), par((3,), 0), par((3,), 1), par((3,), 2)
    rv = 0.5 + 0.25 * torch.arange(3, dtype=D)  # running_var: set by the test
    E['bn_eval'] = F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)
    E['bn_train'] = F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)  # updates rm, rv in place
    E['bn_mean'], E['bn_var'] = rm, rv
    E['layer_norm'] = F.layer_norm(gen((2, 3, 5), 0), (5,), par((5,), 0), par((5,), 1), 1e-6)
    E['group_norm'] = F.group_norm(gen((2, 6, 2, 3), 0), 3, par((6,), 0), par((6,), 1), 1e-5)
    E['group_norm_3d'] = F.group_norm(gen((2, 4, 5), 0), 1, par((4,), 0), par((4,), 1), 1e-5)
    x, w = gen((2, 4, 5, 5), 0), par((6, 4, 3, 3), 0)  # timm's StdConv2d and ScaledStdConv2d
    ws = F.batch_norm(w.reshape(1, 6, -1), None, None, training=True, momentum=0., eps=1e-8).reshape_as(w)
    E['std_conv'] = F.conv2d(x, ws, None, 2, 1)
    w, b, gain = par((6, 2, 3, 3), 0), par((6,), 1), par((6, 1, 1, 1), 2)
    ws = F.batch_norm(w.reshape(1, 6, -1), None, None, weight=(gain * (1.7 * 18 ** -0.5)).view(-1), training=True,
                      momentum=0., eps=1e-5).reshape_as(w)
    E['scaled_std_conv'] = F.conv2d(x, ws, b, 1, 1, 1, 2)
    E['linear'] = F.linear(gen((2, 3, 4), 0), par((5, 4), 0), par((5,), 1))
    E['matmul'] = gen((2, 3, 4), 0) @ gen((2, 4, 2), 1)
    E['matmul_shared'] = gen((2, 3, 4), 0) @ gen((4, 2), 1)
    x = gen((16,), 0, 4.0)
    E['act'] = torch.stack([F.relu(x), F.gelu(x), F.gelu(x, approximate='tanh'), F.silu(x), torch.sigmoid(x),
                            F.hardswish(x), F.hardsigmoid(x)])
    E['add'], E['mul'] = gen((2, 3, 1), 0) + gen((4,), 1), gen((2, 3, 1), 0) * gen((4,), 1)
    E['scale_shift'] = 1.5 * gen((6,), 0) - 0.25
    x = gen((1, 2, 5, 7), 0)
    E['avg_ceil'], E['avg_pad'] = F.avg_pool2d(x, 2, 2, 0, True, False), F.avg_pool2d(x, 3, 2, 1, False, True)
    E['max_pool'], E['adaptive'] = F.max_pool2d(x, 3, 2, 1), F.adaptive_avg_pool2d(x, (3, 2))
    E['global_pool'] = x.mean((2, 3))
    E['avg_ceil_pad'] = F.avg_pool2d(gen((1, 1, 6, 8), 0), 3, 2, 1, True, True)
    E['reshape'] = gen((2, 3, 4), 0).reshape(4, 6)
    E['permute'] = gen((2, 3, 4), 0).permute(2, 0, 1)
    E['slice'] = gen((2, 5, 3), 0)[:, 1:5:2]
    E['pad'] = F.pad(gen((1, 2, 3, 4), 0), (1, 2, 0, 1))
    E['pad_crop'] = F.pad(gen((1, 2, 3, 4), 0), (-1, 1, 2, -1), value=-2.5)
    idx = torch.tensor([[4, 0, 4], [2, 2, 1]])  # gather: a bias table's rows, and their gradient
    E['gather_table'] = gen((5, 2), 0)[idx.view(-1)].view(2, 3, 2)
    E['gather_dim1'] = gen((2, 4), 0)[:, torch.tensor([[3, 0], [1, 3]])]
    E['gather_grad'] = torch.zeros(5, 2, dtype=D).index_add_(0, idx.view(-1), gen((6, 2), 0))
    E['concat'] = torch.cat([gen((2, 1, 3), 0), gen((2, 2, 3), 1), gen((2, 3, 3), 2)], 1)
    E['expand'] = gen((1, 1, 4), 0).expand(2, 3, 4)
    E['softmax'] = gen((2, 3, 4), 0, 2.0).softmax(1)
    E['sdpa'] = sdpa(*(gen((1, 2, 3, 4), k) for k in range(3)))
    sdpa_bias = lambda q, k, v, a, s: (q @ k.transpose(-1, -2) * s + a).softmax(-1) @ v  # F.sdpa, float attn_mask
    for name, a in (('sdpa_bias_h', (1, 2, 2, 3)), ('sdpa_bias_b', (2, 1, 2, 3))):
        E[name] = sdpa_bias(gen((2, 2, 2, 3), 0), gen((2, 2, 3, 3), 1), gen((2, 2, 3, 3), 2), gen(a, 3), 0.6)
    E['logit_scale'] = torch.clamp(gen((6,), 0, 6.0), max=math.log(1. / 0.01)).exp()  # SwinV2's
    x = gen((2, 3, 4), 0); x[1, 2] = 0
    E['normalize'] = F.normalize(x, dim=-1)  # SwinV2's cosine attention, a zero row at the floor
    for name, t in E.items():
        f, per = ('%.17g', 4) if name.endswith('f64') else ('%.9g', 6)
        v = [f % e for e in t.flatten().tolist()]
        rows = [', '.join(v[i:i + per]) for i in range(0, len(v), per)]
        print('static const double want_%s[] = {\n    %s,\n};' % (name, ',\n    '.join(rows)))
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/builder.h"
#include "runtime/backend.h"
#include "tests/check.h"

#define TOL_F32 1e-5
#define TOL_F64 1e-12
#define NELEM(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))

static const double want_conv[] = {
    0.500768978, 1.80158919, 1.39197876, 0.054241932, -0.693726929, -2.22644333,
    0.488525733, 1.79216495, 1.45054202, 0.0747834546, -0.636802324, -2.21474681,
    -1.93438577, 0.197190379, 0.799576782, 1.38681752, 1.46830109, -0.607326157,
    -1.94927182, 0.13600921, 0.807057608, 1.33795758, 1.50402488, -0.587780935,
    -1.6418607, -1.60992235, -0.921904926, 0.835379158, 1.53052514, 1.83907881,
    -1.64118524, -1.6369698, -0.974889342, 0.787381568, 1.49704815, 1.83829397,
    0.949251468, -1.19645987, -1.41685638, -0.942846178, -0.589441661, 1.71075949,
    0.966773312, -1.14929635, -1.45482983, -0.923879019, -0.647302924, 1.68824491,
};
static const double want_conv_bias[] = {
    0.417966891, 1.71878711, 1.30917668, -0.0285601551, -0.776529016, -2.30924541,
    0.742856457, 2.04649568, 1.70487274, 0.329114179, -0.3824716, -1.96041608,
    -1.46253794, 0.669038212, 1.27142461, 1.85866535, 1.94014893, -0.135478324,
    -1.4818243, 0.603456729, 1.27450513, 1.8054051, 1.9714724, -0.120333416,
    -1.72466279, -1.69272444, -1.00470701, 0.752577071, 1.44772305, 1.75627673,
    -1.38685452, -1.38263907, -0.720558618, 1.04171229, 1.75137888, 2.09262469,
    1.4210993, -0.724612038, -0.945008548, -0.470998346, -0.117593829, 2.18260733,
    1.43422083, -0.681848826, -0.987382309, -0.456431499, -0.179855405, 2.15569243,
};
static const double want_conv_f64[] = {
    -0.61758772523640637, -2.8342059253167515, -0.26174423860747048, 1.0618939313874654,
    3.3707469596648068, 4.8420068239415883, -1.2678842274817672, -3.5295933427887687,
    -1.066479338206028, 0.36653151342962764, 2.6331412567373147, 4.2327011300828774,
    2.3174126456207791, -2.700495993527503, -1.8938201621382234, -4.4624694573332313,
    -2.3041269509348719, 0.91488053911390599, 2.0977229470523318, -2.9027445516885906,
    -2.2377718237600344, -4.7234318313655592, -2.7193208483767348, 0.59258730547303384,
    3.5114459648853353, 2.7006437010132389, 0.78178213942809294, -2.1805802889791006,
    -3.0109317647346536, -2.6651728911116828, 2.9039183062509526, 2.1418615864222263,
    0.24835044625357108, -2.7770397145654857, -3.6548317596809721, -3.3772112292955732,
    -1.8844231718199416, 2.7051715004663821, 0.77667258387050542, 1.4906678715006962,
    -1.223313929201276, -4.3165725890982447, -2.2509925443906664, 2.3514685062607912,
    0.58246885845485363, 1.1797375959788929, -1.4073081551523292, -4.6347621719700882,
};
static const double want_bn_eval[] = {
    -0.0110449478, -0.379336075, -0.480654867, -0.267349444, 0.396038089, 0.598465813,
    0.711746851, 0.682603365, 0.422864161, 0.468523753, 0.504422633, 0.513676992,
    -0.258921179, 0.171595897, 0.609973426, 0.850035637, 0.680124277, 0.519894596,
    0.307471493, 0.142760887, 0.513504704, 0.491089586, 0.448300685, 0.405262295,
};
static const double want_bn_train[] = {
    -0.125413198, -0.514513554, -0.621557073, -0.396199441, 0.102518817, 0.384842341,
    0.542834049, 0.502187977, 0.390174119, 0.467717824, 0.528684907, 0.544401589,
    -0.387294962, 0.0675472406, 0.530694028, 0.784320263, 0.498730423, 0.275260005,
    -0.0210039528, -0.250723863, 0.544108991, 0.506041387, 0.433372979, 0.360280863,
};
static const double want_bn_mean[] = {
    0.385276206, 0.418133161, 0.360101318,
};
static const double want_bn_var[] = {
    0.501194134, 0.719064981, 0.939623673,
};
static const double want_layer_norm[] = {
    0.288691212, 0.0463743618, 0.551961634, 0.579475577, -0.507070758, 0.0256990966,
    0.528240182, 0.417434665, 0.57441365, 1.1307296, -0.455477989, -0.0172372292,
    0.503131562, 0.248526398, -0.592093916, 0.44117753, 0.508940592, 0.457442536,
    0.747025006, 0.99692969, -0.712028157, 0.0216714937, 0.472151383, 0.147930579,
    -0.420215131, 0.633129722, 0.458461986, 0.485590282, 0.817550752, 0.797669871,
};
static const double want_group_norm[] = {
    -0.161931669, -0.533305437, -0.63547228, -0.420381465, 0.0108064224, 0.455296959,
    0.696877141, 0.660885168, 0.465927611, 0.203696086, -0.00247785324, -0.0556273581,
    0.537724983, 0.473976274, 0.409063632, 0.37351648, 0.384053205, 0.435718217,
    0.647300162, 0.942433795, 1.01326874, 0.826490241, 0.469943074, 0.111316987,
    -0.32662213, -0.243515451, 0.129638809, 0.617340405, 0.990215627, 1.07289546,
    0.364671901, 0.00214410445, -0.358048484, -0.546501677, -0.474583023, -0.176116939,
    -0.199808009, -0.550001332, -0.62106833, -0.37958506, 0.0608750971, 0.49315686,
    0.702452023, 0.649281812, 0.443765855, 0.182561483, -0.0114827834, -0.0471048995,
    0.533961268, 0.468682509, 0.405398536, 0.373872789, 0.388932319, 0.443494395,
    0.690005807, 0.96826498, 1.01379422, 0.805180392, 0.440537833, 0.0913636497,
    -0.341311411, -0.225626606, 0.169386624, 0.657947327, 1.0102778, 1.06067147,
    0.332278526, -0.039584076, -0.391304892, -0.557464129, -0.459914524, -0.144535121,
};
static const double want_group_norm_3d[] = {
    -0.244223998, -0.61722313, -0.719837119, -0.503804932, -0.0707298961, 0.512211302,
    0.652724774, 0.616575278, 0.420764464, 0.15738525, 0.547336992, 0.56059187,
    0.529450233, 0.468558478, 0.40655495, -0.0840718625, -0.0281429524, 0.246094783,
    0.609663069, 0.891570038, -0.68551618, -0.461200296, -0.0329968813, 0.39770326,
    0.628335097, 0.610481417, 0.413739895, 0.156604538, -0.0399898638, -0.083581907,
    0.523494686, 0.463326946, 0.403546773, 0.372269716, 0.384205857, 0.255688809,
    0.610437378, 0.877819422, 0.932080991, 0.747702004,
};
static const double want_std_conv[] = {
    -2.63558902, -0.0600778154, 1.36088341, -1.63890329, 1.36584914, 2.95743477,
    -0.11071376, 2.1463061, 2.58935514, -2.65865003, -0.117715661, 1.47888957,
    -1.54841589, 1.3640007, 3.03396533, -0.0865133161, 2.02799315, 2.55160609,
    -2.66975785, -0.174826658, 1.59025119, -1.45096239, 1.35601928, 3.09685761,
    -0.0619229961, 1.90055668, 2.50238288, -2.6688608, -0.231156721, 1.69447173,
    -1.34697466, 1.34193923, 3.14582894, -0.0370516957, 1.76456146, 2.44190149,
    -2.6559583, -0.286455058, 1.79108514, -1.236913, 1.32182064, 3.18065659,
    -0.0120101865, 1.62060928, 2.37042717, -2.63110222, -0.340475, 1.87965759,
    -1.12126466, 1.29575045, 3.20117883, 0.0130900311, 1.46933758, 2.28827309,
    -0.88868883, 2.22062924, 1.80410063, 0.962231163, 3.41851314, 2.40354424,
    1.3808839, 2.93350913, 0.749283283, -0.888025551, 2.26227626, 1.94408002,
    0.996396867, 3.41359822, 2.41736709, 1.28135922, 2.8302704, 0.729769839,
    -0.883369275, 2.29375318, 2.07532432, 1.02608398, 3.39333451, 2.42032148,
    1.17606879, 2.7143016, 0.706974452, -0.87474003, 2.31491802, 2.197248,
    1.05115973, 3.35780897, 2.41239165, 1.06547988, 2.58611546, 0.680997504,
    -0.862174687, 2.32567277, 2.30930536, 1.07151054, 3.30717403, 2.39360914,
    0.950082207, 2.44627798, 0.65195346, -0.845727442, 2.32596468, 2.41099285,
    1.0870437, 3.24164817, 2.36405249, 0.830387496, 2.29540651, 0.619970328,
};
static const double want_scaled_std_conv[] = {
    0.0803444369, 0.599719623, 0.987599338, 0.872052555, 0.414235394, -0.513000947,
    -0.917018162, -1.37763865, -1.22927729, -0.851998507, 0.679391894, 1.05603571,
    1.21477045, 0.763236552, 0.367170022, -1.08012654, -1.38153056, -1.21820646,
    -0.520883971, -0.156364445, 0.57333911, 1.0298008, 0.870213363, 0.262407872,
    -0.275276798, 0.457148084, 1.10343707, 1.60375045, 1.46941066, 0.898265513,
    -0.282893613, -0.778725164, -1.35329696, -1.17177635, -0.705324807, 1.19719518,
    1.66688169, 1.86681466, 1.30837125, 0.810714335, -0.974348408, -1.35819897,
    -1.1580843, -0.293688788, 0.171927953, 1.0373874, 1.61027326, 1.42667875,
    0.691710649, 0.0176291172, 0.618762831, 1.08736586, 1.46288452, 1.37230315,
    0.957131841, 0.0809488659, -0.27356771, -0.69117899, -0.561800594, -0.225773437,
    1.15145648, 1.49273827, 1.63944499, 1.23701251, 0.87270271, -0.41010133,
    -0.694775986, -0.551933651, 0.0724090959, 0.418702641, 1.01546389, 1.43437448,
    1.31208964, 0.794625936, 0.302251213, 0.388154541, 0.331759615, 0.317179504,
    0.37327279, 0.427035128, 0.576363703, 0.626116095, 0.638187258, 0.569956853,
    0.514955971, 0.332716549, 0.291971541, 0.322846793, 0.421730028, 0.473190199,
    0.610870771, 0.637430249, 0.567532413, 0.450563086, 0.409183529, 0.384546951,
    0.329674318, 0.385977493, 0.480597294, 0.547810398, 0.654527346, 0.951499733,
    1.03430679, 0.745043654, 0.460324156, -0.316144377, -0.575106745, -0.639001264,
    -0.287983041, 0.000195623742, 0.932466257, 1.14907951, 0.991171097, 0.481479879,
    0.207751055, -0.488394136, -0.635129616, -0.275486324, 0.328102948, 0.552594644,
    0.652510596, 0.944555279, 0.664531679, 0.186348902, -0.168831216, 0.61355742,
    1.13304896, 1.28811825, 0.792483502, 0.291697609, -1.04982039, -1.49768591,
    -1.61001265, -1.01000716, -0.508359964, 1.07604205, 1.45843954, 1.19013936,
    0.317216143, -0.166262576, -1.33510254, -1.60343439, -0.988604647, 0.0462994233,
    0.450165959, 0.574423512, 1.09052832, 0.628584324, -0.173874583, -0.797289188,
    0.810639424, 1.00821413, 0.758678779, 0.11338183, -0.0997271859, -1.14800474,
    -1.40012431, -1.09040344, -0.306791934, 0.0264850546, 1.02550035, 1.15084457,
    0.563107518, -0.328410904, -0.565172839, -1.0933539, -1.07599318, -0.284933487,
    0.601191791, 0.711349419, 0.527370629, 0.744421875, 0.0598311308, -0.691842261,
    -0.998971474, 1.37007305, 1.63297221, 1.32876392, 0.519232917, 0.234034945,
    -1.05613098, -1.38197954, -0.999894502, -0.0279277653, 0.401720479, 1.6142015,
    1.78813793, 1.06021069, -0.0467344773, -0.360989285, -0.982127744, -0.982047023,
    -0.000787437132, 1.10045825, 1.25938206, 0.983763222, 1.27556851, 0.445072349,
    -0.475132594, -0.876637573, 1.28371316, 1.48665214, 1.27063621, 0.678937639,
    0.457685008, -0.467460627, -0.712483422, -0.437844668, 0.264636665, 0.586952665,
    1.44392941, 1.58302783, 1.05770944, 0.256851175, 0.0148020372, -0.409468308,
    -0.424964797, 0.284272285, 1.08172911, 1.21275019, 0.979168085, 1.20644141,
    0.619728132, -0.0365355717, -0.341621501, 0.327258329, 0.325668091, 0.397214529,
    0.50179264, 0.511526394, 0.608647013, 0.627258941, 0.541848577, 0.421446235,
    0.386714108, 0.344055419, 0.343834684, 0.453807732, 0.570195784, 0.587760952,
    0.557350743, 0.539152231, 0.418592602, 0.321010206, 0.322844294, 0.419485949,
    0.408909558, 0.506501932, 0.585726406, 0.604459393, 0.971202153, 0.991343971,
    0.620216327, 0.0717717113, 0.00787969168, -0.47609086, -0.582970354, -0.143056181,
    0.478519992, 0.669549288, 0.869732246, 0.883121267, 0.315914651, -0.285491102,
    -0.388596369, -0.2109523, -0.129149274, 0.493265416, 0.998070116, 1.00014806,
    0.480736894, 0.54912022, 0.0546252689, -0.351180347, -0.460046378, 1.16073486,
    1.21590784, 0.576239412, -0.379325299, -0.512499087, -1.31257558, -1.51456855,
    -0.761722827, 0.304491132, 0.652435864, 0.961177793, 1.00531575, 0.0332772779,
    -0.999293892, -1.19762938, -0.857216577, -0.737890158, 0.329807981, 1.19751037,
    1.22103083, 0.294634677, 0.435756606, -0.396353286, -1.08693392, -1.29468772,
};
static const double want_linear[] = {
    -0.13341425, 0.676455829, -0.273011431, 1.4489685, -0.86156336, -0.330646705,
    0.141725189, 0.931891361, -0.28687353, 1.2046321, 0.434859545, 0.0444045208,
    0.349780522, 0.907402818, -0.463804765, -0.810462181, 0.76253058, 0.241833397,
    0.392697143, 0.614076742, 0.770771465, -0.493417572, 1.0273646, 0.168355187,
    0.251305515, -0.963654163, 1.1552212, -0.344978388, 1.10582087, -0.142953682,
};
static const double want_matmul[] = {
    -0.717605317, -1.00298463, 1.24569756, 1.19604502, -1.62984283, -1.25089605,
    1.64632118, 1.81925603, -1.8425873, -1.79856208, 1.82593274, 1.57003474,
};
static const double want_matmul_shared[] = {
    -0.717605317, -1.00298463, 1.24569756, 1.19604502, -1.62984283, -1.25089605,
    1.82565107, 1.16119937, -1.81049564, -0.937319951, 1.58612784, 0.605128192,
};
static const double want_act[] = {
    1.18208086, 3.36588383, 3.96665931, 2.7018528, 0.166322649, 0,
    0, 0, 0, 1.24616539, 3.40174651, 3.95743299,
    2.65187693, 0.0991016999, 0, 0, 1.04190167, 3.36459976,
    3.96651475, 2.69253758, 0.0941466821, -0.0176066325, -0.000180354492, -0.000723729441,
    -0.100783888, 1.11363341, 3.40060766, 3.95728308, 2.64126336, 0.0534625168,
    -0.0155135402, -0.000171042017, 1.04169228, 3.36485439, 3.96657703, 2.69301081,
    0.0941464351, -0.0171870359, -0.000107089871, -0.000538990757, -0.101002576, 1.11341049,
    3.40084662, 3.95734706, 2.6417348, 0.0534624853, -0.0150735468, -0.000100550584,
    0.904672187, 3.25353446, 3.8929403, 2.53200321, 0.0900612313, -0.194880598,
    -0.0768121641, -0.100237304, -0.273822254, 0.967816119, 3.29207105, 3.88321651,
    2.47718872, 0.0520041292, -0.189617367, -0.0760569798, 0.765321743, 0.966621139,
    0.981415341, 0.937135885, 0.541485072, 0.0796265769, 0.0196444494, 0.0283651518,
    0.183096648, 0.776635367, 0.967759074, 0.98124631, 0.93412658, 0.524755168,
    0.0758383763, 0.0193837728, 0.823926294, 3.36588383, 3.96665931, 2.56759449,
    0.0877718615, -0.225395572, -0, -0, -0.374996635, 0.881904063,
    3.40174651, 3.95743299, 2.49801367, 0.0511877078, -0.208239145, -0,
    0.697013477, 1, 1, 0.9503088, 0.527720441, 0.0920947393,
    0, 0, 0.250748893, 0.707694232, 1, 1,
    0.941979488, 0.51651695, 0.0832862457, 0,
};
static const double want_logit_scale[] = {
    5.88920632, 100, 100, 57.5571978, 1.283363, 0.0254472564,
};
static const double want_normalize[] = {
    0.197671049, 0.562853021, 0.663316468, 0.451811794, 0.0286106925, -0.421005272,
    -0.672615882, -0.607884746, -0.268502965, 0.223736287, 0.610748891, 0.71051673,
    0.495099153, 0.0185020531, -0.466796837, -0.7325539, -0.663651261, -0.271561741,
    0.248247521, 0.651302074, 0, 0, 0, 0,
};
static const double want_add[] = {
    1.28096995, 1.15872958, 0.630508363, -0.0552630126, 1.82692069, 1.70468032,
    1.1764591, 0.490687728, 1.97711456, 1.85487419, 1.32665297, 0.640881598,
    1.66091293, 1.53867257, 1.01045135, 0.324679971, 1.02703039, 0.904790029,
    0.376568809, -0.309202567, 0.37359184, 0.251351476, -0.276869744, -0.96264112,
};
static const double want_mul[] = {
    0.291220318, 0.255095819, 0.0989957696, -0.103663536, 0.829227328, 0.726365612,
    0.281882797, -0.295173899, 0.977235837, 0.856014367, 0.332195963, -0.34785939,
    0.665635029, 0.583066161, 0.226272166, -0.236941162, 0.0409756523, 0.035892817,
    0.013929029, -0.0145857989, -0.602955194, -0.528161463, -0.204965141, 0.214629487,
};
static const double want_scale_shift[] = {
    0.193280324, 1.01220644, 1.23749724, 0.763194799, -0.187629007, -1.16778684,
};
static const double want_avg_ceil[] = {
    -0.0300850421, 0.707276501, 0.270512562, -0.476377348, -0.236938953, -0.713963285,
    -0.00576163828, 0.665043429, 0.925775379, 0.314285656, -0.818938911, -0.858707011,
    -0.451758228, 0.480161831, 0.614981685, -0.0262393653, 0.213204989, -0.645110259,
    -0.432500087, 0.306523621, 0.652379572, 0.776934832, -0.388272755, -0.995520592,
};
static const double want_avg_pad[] = {
    -0.0133711298, 0.366300033, 0.289772231, -0.100182595, -0.245009684, -0.337858319,
    0.126380364, 0.28161252, 0.278866868, -0.000192279824, -0.426719658, -0.204976473,
    -0.200781435, 0.158859627, 0.423932253, 0.0999111618, -0.109626243, -0.382751615,
    -0.113720953, 0.19555626, 0.319573886, 0.255895101, -0.300702729, -0.311818527,
};
static const double want_max_pool[] = {
    0.841470957, 0.991664827, 0.989358246, 0.662969232, 0.650287867, 0.850436628,
    0.989358246, 0.986771941, 0.983906686, 0.983906686, -0.00885130931, 0.343314916,
    0.35905835, 0.980763257, 0.980763257, 0.977342486, 0.973645449, 0.597760379,
    0.977342486, 0.977342486, 0.973645449, 0.969673097, 0.584196568, -0.278562605,
};
static const double want_adaptive[] = {
    0.338595729, 0.206899422, -0.324913526, 0.207690463, 0.189525177, -0.544483627,
    0.0142018013, 0.470363943, -0.291922852, 0.0167261511, 0.460295404, -0.49755097,
};
static const double want_global_pool[] = {
    0.00928657076, 0.0218014556,
};
static const double want_avg_ceil_pad[] = {
    0.119406207, 0.517770578, 0.198032097, -0.450452681, -0.310731818, -0.349698212,
    0.234819478, 0.707576687, 0.00571010096, -0.271315707, -0.464271351, -0.615746174,
    0.257467104, 0.703268072, 0.265478051, -0.114882864, -0.417181671, -0.13099434,
    0.372652198, 0.244335622,
};
static const double want_reshape[] = {
    0.295520216, 0.841470957, 0.991664827, 0.6754632, 0.0415806621, -0.611857891,
    -0.977530122, -0.88345468, -0.373876661, 0.311541349, 0.850436628, 0.989358246,
    0.662969232, 0.024775425, -0.625070632, -0.980936229, -0.875452161, -0.35822928,
    0.327474445, 0.859161794, 0.986771941, 0.650287867, 0.00796318334, -0.638106704,
};
static const double want_permute[] = {
    0.295520216, 0.0415806621, -0.373876661, 0.662969232, -0.875452161, 0.986771941,
    0.841470957, -0.611857891, 0.311541349, 0.024775425, -0.35822928, 0.650287867,
    0.991664827, -0.977530122, 0.850436628, -0.625070632, 0.327474445, 0.00796318334,
    0.6754632, -0.88345468, 0.989358246, -0.980936229, 0.859161794, -0.638106704,
};
static const double want_slice[] = {
    0.6754632, 0.0415806621, -0.611857891, 0.311541349, 0.850436628, 0.989358246,
    0.327474445, 0.859161794, 0.986771941, -0.984064996, -0.867202163, -0.34248063,
};
static const double want_pad[] = {
    0, 0.295520216, 0.841470957, 0.991664827, 0.6754632, 0,
    0, 0, 0.0415806621, -0.611857891, -0.977530122, -0.88345468,
    0, 0, 0, -0.373876661, 0.311541349, 0.850436628,
    0.989358246, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0.662969232,
    0.024775425, -0.625070632, -0.980936229, 0, 0, 0,
    -0.875452161, -0.35822928, 0.327474445, 0.859161794, 0, 0,
    0, 0.986771941, 0.650287867, 0.00796318334, -0.638106704, 0,
    0, 0, 0, 0, 0, 0,
    0, 0,
};
static const double want_pad_crop[] = {
    -2.5, -2.5, -2.5, -2.5, -2.5, -2.5,
    -2.5, -2.5, 0.841470957, 0.991664827, 0.6754632, -2.5,
    -0.611857891, -0.977530122, -0.88345468, -2.5, -2.5, -2.5,
    -2.5, -2.5, -2.5, -2.5, -2.5, -2.5,
    0.024775425, -0.625070632, -0.980936229, -2.5, -0.35822928, 0.327474445,
    0.859161794, -2.5,
};
static const double want_gather_table[] = {
    -0.373876661, 0.311541349, 0.295520216, 0.841470957, -0.373876661, 0.311541349,
    0.0415806621, -0.611857891, 0.0415806621, -0.611857891, 0.991664827, 0.6754632,
};
static const double want_gather_dim1[] = {
    0.6754632, 0.295520216, 0.841470957, 0.6754632, -0.88345468, 0.0415806621,
    -0.611857891, -0.88345468,
};
static const double want_gather_grad[] = {
    0.991664827, 0.6754632, 0.850436628, 0.989358246, -1.35140678, -0.571913332,
    0, 0, 0.337100878, 0.229613066,
};
static const double want_concat[] = {
    0.295520216, 0.841470957, 0.991664827, 0.985449731, 0.863209367, 0.334988147,
    -0.350783229, -0.871575773, -0.982452631, 0.598472118, -0.0583741441, -0.687766135,
    -0.993691027, -0.832267463, -0.279415488, 0.404849917, 0.898708105, 0.96988982,
    0.6754632, 0.0415806621, -0.611857891, -0.631266654, 0.0168139003, 0.656986594,
    0.98816824, 0.85459888, 0.319098353, 0.584917188, -0.0751511231, -0.699874699,
    -0.995436251, -0.822828591, -0.263231784, 0.420167029, 0.905954719, 0.965657771,
};
static const double want_expand[] = {
    0.295520216, 0.841470957, 0.991664827, 0.6754632, 0.295520216, 0.841470957,
    0.991664827, 0.6754632, 0.295520216, 0.841470957, 0.991664827, 0.6754632,
    0.295520216, 0.841470957, 0.991664827, 0.6754632, 0.295520216, 0.841470957,
    0.991664827, 0.6754632, 0.295520216, 0.841470957, 0.991664827, 0.6754632,
};
static const double want_softmax[] = {
    0.536500194, 0.713692993, 0.563885692, 0.342733525, 0.322849999, 0.0390091094,
    0.0109842416, 0.0151669314, 0.140649808, 0.247297897, 0.425130066, 0.642099544,
    0.33817327, 0.201662244, 0.08875563, 0.0234525717, 0.0155913397, 0.0937456092,
    0.596439026, 0.929992205, 0.64623539, 0.704592147, 0.314805344, 0.0465552234,
};
static const double want_sdpa[] = {
    0.686940437, 0.287366589, -0.247360252, -0.665749727, -0.203842348, -0.0985683527,
    0.0530638566, 0.179739302, 0.462142702, 0.216616479, -0.13078786, -0.416680643,
    -0.634814042, -0.715875575, -0.460249631, 0.0118389171, 0.022691535, 0.0540266488,
    0.0599521748, 0.0376812644, -0.279234479, -0.346008209, -0.250048871, -0.0364876284,
};

static const double want_sdpa_bias_h[] = {
    0.448327766, 0.125666478, -0.256097719, -0.112665326, -0.014693741, 0.0901885442,
    -0.542762116, -0.404863488, -0.0765512299, 0.442768328, 0.122754102, -0.254993299,
    0.0669624447, -0.166443116, -0.321567866, -0.286911827, 0.00101295036, 0.28846132,
    0.401841983, 0.0422604694, -0.337196799, 0.052611771, -0.172744611, -0.3168565,
};
static const double want_sdpa_bias_b[] = {
    0.448327766, 0.125666478, -0.256097719, -0.112665326, -0.014693741, 0.0901885442,
    -0.396871368, -0.243200994, 0.0248506143, 0.349278604, 0.476239962, 0.379218236,
    -0.0419036954, -0.259709339, -0.355369608, -0.394807752, -0.237590373, 0.03136948,
    0.401841983, 0.0422604694, -0.337196799, 0.052611771, -0.172744611, -0.3168565,
};

/* Input k's element i, as gen() in the snippet (before rounding to a dtype). */
static double gen(int64_t i, int k, double amp) { return amp * sin(0.7 * (double)i + 0.3 + 1.1 * k); }

/* One tiny graph: built, given state and inputs, run on the ref backend. */
typedef struct Case {
    Graph g;
    Builder b;
    CtState s;
    CtTensor out[8];
    int nout;
} Case;

static void case_begin(Case *c, int training)
{
    memset(c, 0, sizeof *c);
    graph_init(&c->g);
    b_init(&c->b, &c->g, training);
}

/* Marks the outputs, finishes the build and creates the state, every f32
 * entry j filled as par(j) in the snippet. 0 on success. */
static int case_build(Case *c, const char *what, int nout, const ValueId *outs)
{
    CtErr err;
    for (int k = 0; k < nout; k++)
        if (outs[k] >= 0)
            graph_mark_output(&c->g, outs[k]);
    if (b_finish(&c->b, &err)) {
        CHECKF(0, "%s: build failed: %s", what, err.msg);
        return -1;
    }
    state_create(&c->s, &c->g);
    for (int j = 0; j < c->s.n; j++) {
        if (c->s.e[j].type.dtype != CT_F32)
            continue;
        float *p = state_data(&c->s, j);
        for (int64_t i = 0; i < shape_numel(&c->s.e[j].type.shape); i++)
            p[i] = (float)gen(i, 10 + j, 0.5);
    }
    return 0;
}

/* Runs with input k = gen(k, amp) in its dtype. 0 on success. */
static int case_run(Case *c, const char *what, double amp)
{
    CtTensor in[8];
    int nin = 0, rc;
    CtErr err;
    for (int v = 0; v < c->g.nvalues; v++) {
        const Value *val = &c->g.values[v];
        if (val->role != CT_ROLE_INPUT)
            continue;
        CT_ASSERT(nin < 8);
        int64_t n = shape_numel(&val->type.shape);
        double *x = malloc((size_t)n * sizeof *x);
        CT_ASSERT(x != NULL);
        for (int64_t i = 0; i < n; i++)
            x[i] = gen(i, nin, amp);
        tensor_alloc(&in[nin], val->type);
        elems_from_double(x, val->type.dtype, n, in[nin++].data);
        free(x);
    }
    rc = backend_run_once(&ct_backend_ref, &c->g, &c->s, in, nin, c->out, NULL, &err);
    if (rc == 0)
        c->nout = c->g.noutputs;
    else
        CHECKF(0, "%s: run failed: %s", what, err.msg);
    for (int k = 0; k < nin; k++)
        tensor_free(&in[k]);
    return rc;
}

static void case_end(Case *c)
{
    for (int k = 0; k < c->nout; k++)
        tensor_free(&c->out[k]);
    state_free(&c->s);
    graph_free(&c->g);
}

/* Checks a tensor's shape, then ||got - want|| / ||want|| <= tol. */
static void expect_data(const char *what, const void *data, CtType type, CtShape shape, const double *want,
                        int64_t n, double tol)
{
    char a[96], b[96];
    if (!shape_equal(&type.shape, &shape) || shape_numel(&shape) != n) {
        CHECKF(0, "%s: shape %s, want %s (%lld values)", what, shape_str(&type.shape, a, sizeof a),
               shape_str(&shape, b, sizeof b), (long long)n);
        return;
    }
    double *got = malloc((size_t)n * sizeof *got), num = 0, den = 0;
    CT_ASSERT(got != NULL);
    elems_to_double(data, type.dtype, n, got);
    for (int64_t i = 0; i < n; i++) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    CHECKF(rel <= tol, "%s: relative error %.3g > %.3g", what, rel, tol);
    free(got);
}

static void expect(const Case *c, int k, const char *what, CtShape shape, const double *want, int64_t n, double tol)
{
    if (k >= c->nout) {
        CHECKF(0, "%s: no output %d", what, k);
        return;
    }
    expect_data(what, c->out[k].data, c->out[k].type, shape, want, n, tol);
}

/* conv2d with stride 2, padding 1, dilation 2, groups 2 on a 5x7 input. */
static void test_conv2d(void)
{
    for (int bias = 0; bias < 2; bias++) {
        Case c;
        case_begin(&c, 0);
        ValueId x = b_input(&c.b, "x", (CtShape){4, {2, 4, 5, 7}}, CT_F32);
        ValueId y = nn_conv2d(&c.b, "conv", x, 4, 3,
                              (ConvOpts){.stride = 2, .padding = 1, .dilation = 2, .groups = 2, .bias = bias});
        if (case_build(&c, "conv2d", 1, &y) == 0 && case_run(&c, "conv2d", 1) == 0)
            expect(&c, 0, bias ? "conv2d with bias" : "conv2d", (CtShape){4, {2, 4, 2, 3}},
                   bias ? want_conv_bias : want_conv, NELEM(want_conv), TOL_F32);
        case_end(&c);
    }
}

/* The same conv in f64 throughout: x, weight and bias are f64 graph inputs. */
static void test_conv2d_f64(void)
{
    Case c;
    case_begin(&c, 0);
    ValueId in[3] = {b_input(&c.b, "x", (CtShape){4, {2, 4, 5, 7}}, CT_F64),
                     b_input(&c.b, "w", (CtShape){4, {4, 2, 3, 3}}, CT_F64),
                     b_input(&c.b, "bias", (CtShape){1, {4}}, CT_F64)};
    int64_t a[] = {2, 2, 1, 1, 2, 2, 2};
    ValueId y = b_node(&c.b, CT_OP_conv2d, 3, in, a, 7, NULL, 0, 0);
    if (case_build(&c, "conv2d f64", 1, &y) == 0 && case_run(&c, "conv2d f64", 1) == 0) {
        CHECK(c.out[0].type.dtype == CT_F64);
        expect(&c, 0, "conv2d f64", (CtShape){4, {2, 4, 2, 3}}, want_conv_f64, NELEM(want_conv_f64), TOL_F64);
    }
    case_end(&c);
}

/* batch_norm in eval and in training; training also writes the running
 * stats back through assign nodes and counts the batch. */
static void test_batch_norm(void)
{
    for (int training = 0; training < 2; training++) {
        Case c;
        const char *what = training ? "batch_norm train" : "batch_norm eval";
        case_begin(&c, training);
        ValueId x = b_input(&c.b, "x", (CtShape){4, {2, 3, 2, 2}}, CT_F32);
        ValueId y = nn_batch_norm(&c.b, "bn", x, (BNOpts){0});
        if (case_build(&c, what, 1, &y)) {
            case_end(&c);
            continue;
        }
        int mean = state_find(&c.s, "bn.running_mean"), var = state_find(&c.s, "bn.running_var");
        int nbt = state_find(&c.s, "bn.num_batches_tracked");
        CHECK(mean == 2 && var == 3 && nbt == 4);
        if (mean < 0 || var < 0 || nbt < 0) {
            case_end(&c);
            continue;
        }
        for (int i = 0; i < 3; i++)
            ((float *)state_data(&c.s, var))[i] = 0.5f + 0.25f * (float)i;
        if (case_run(&c, what, 1) == 0) {
            CtShape ch = {1, {3}};
            float *m = state_data(&c.s, mean);
            expect(&c, 0, what, (CtShape){4, {2, 3, 2, 2}}, training ? want_bn_train : want_bn_eval,
                   NELEM(want_bn_eval), TOL_F32);
            if (training) {
                expect_data("batch_norm train running_mean", m, (CtType){ch, CT_F32}, ch, want_bn_mean, 3, TOL_F32);
                expect_data("batch_norm train running_var", state_data(&c.s, var), (CtType){ch, CT_F32}, ch,
                            want_bn_var, 3, TOL_F32);
            } else {
                for (int i = 0; i < 3; i++)
                    CHECK(m[i] == (float)gen(i, 12, 0.5));
            }
            CHECKF(*(int64_t *)state_data(&c.s, nbt) == training, "%s: num_batches_tracked %lld", what,
                   (long long)*(int64_t *)state_data(&c.s, nbt));
        }
        case_end(&c);
    }
}

static void test_layer_norm_linear(void)
{
    Case c;
    case_begin(&c, 0);
    ValueId x = b_input(&c.b, "x", (CtShape){3, {2, 3, 5}}, CT_F32);
    ValueId y = nn_layer_norm(&c.b, "norm", x, 1e-6);
    if (case_build(&c, "layer_norm", 1, &y) == 0 && case_run(&c, "layer_norm", 1) == 0)
        expect(&c, 0, "layer_norm", (CtShape){3, {2, 3, 5}}, want_layer_norm, NELEM(want_layer_norm), TOL_F32);
    case_end(&c);

    case_begin(&c, 0);
    x = b_input(&c.b, "x", (CtShape){3, {2, 3, 4}}, CT_F32);
    y = nn_linear(&c.b, "fc", x, 5, (LinearOpts){0});
    if (case_build(&c, "linear", 1, &y) == 0 && case_run(&c, "linear", 1) == 0)
        expect(&c, 0, "linear", (CtShape){3, {2, 3, 5}}, want_linear, NELEM(want_linear), TOL_F32);
    case_end(&c);
}

/* group_norm: three groups of two channels of [2,6,2,3], and one group of
 * a 3-D input. */
static void test_group_norm(void)
{
    static const struct {
        const char *what;
        CtShape x;
        int groups;
        const double *want;
        int64_t n;
    } cases[] = {{"group_norm", {4, {2, 6, 2, 3}}, 3, want_group_norm, NELEM(want_group_norm)},
                 {"group_norm 3-D", {3, {2, 4, 5}}, 1, want_group_norm_3d, NELEM(want_group_norm_3d)}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Case c;
        case_begin(&c, 0);
        ValueId x = b_input(&c.b, "x", cases[i].x, CT_F32);
        ValueId y = nn_group_norm(&c.b, "norm", x, (GNOpts){.groups = cases[i].groups});
        if (case_build(&c, cases[i].what, 1, &y) == 0 && case_run(&c, cases[i].what, 1) == 0)
            expect(&c, 0, cases[i].what, cases[i].x, cases[i].want, cases[i].n, TOL_F32);
        case_end(&c);
    }
}

/* nn_std_conv2d: StdConv2d (eps 1e-8, stride 2) and a grouped
 * ScaledStdConv2d (bias, gain, gamma 1.7), their weights standardised by
 * group_norm without an affine and with the gain as its weight. */
static void test_std_conv(void)
{
    for (int scaled = 0; scaled < 2; scaled++) {
        Case c;
        const char *what = scaled ? "scaled std conv" : "std conv";
        case_begin(&c, 0);
        ValueId x = b_input(&c.b, "x", (CtShape){4, {2, 4, 5, 5}}, CT_F32);
        ValueId y = scaled ? nn_std_conv2d(&c.b, "conv", x, 6, 3, (ConvOpts){.padding = 1, .groups = 2, .bias = 1},
                                           (StdConvOpts){.eps = 1e-5, .scaled = 1, .gamma = 1.7, .gain_init = 1})
                           : nn_std_conv2d(&c.b, "conv", x, 6, 3, (ConvOpts){.stride = 2, .padding = 1},
                                           (StdConvOpts){.eps = 1e-8});
        if (case_build(&c, what, 1, &y) == 0 && case_run(&c, what, 1) == 0)
            expect(&c, 0, what, scaled ? (CtShape){4, {2, 6, 5, 5}} : (CtShape){4, {2, 6, 3, 3}},
                   scaled ? want_scaled_std_conv : want_std_conv,
                   scaled ? NELEM(want_scaled_std_conv) : NELEM(want_std_conv), TOL_F32);
        case_end(&c);
    }
}

/* matmul with batched [2,4,2] and shared 2-D [4,2] right-hand sides. */
static void test_matmul(void)
{
    for (int shared = 0; shared < 2; shared++) {
        Case c;
        const char *what = shared ? "matmul shared rhs" : "matmul batched";
        case_begin(&c, 0);
        ValueId a = b_input(&c.b, "a", (CtShape){3, {2, 3, 4}}, CT_F32);
        ValueId b = b_input(&c.b, "b", shared ? (CtShape){2, {4, 2}} : (CtShape){3, {2, 4, 2}}, CT_F32);
        ValueId y = f_matmul(&c.b, a, b);
        if (case_build(&c, what, 1, &y) == 0 && case_run(&c, what, 1) == 0)
            expect(&c, 0, what, (CtShape){3, {2, 3, 2}}, shared ? want_matmul_shared : want_matmul,
                   NELEM(want_matmul), TOL_F32);
        case_end(&c);
    }
}

/* The activations on 16 values in [-4, 4]; want_act holds one row each. */
static void test_activations(void)
{
    static const char *names[] = {"relu", "gelu", "gelu tanh", "silu", "sigmoid", "hard_swish", "hard_sigmoid"};
    Case c;
    case_begin(&c, 0);
    ValueId x = b_input(&c.b, "x", (CtShape){1, {16}}, CT_F32);
    ValueId y[7] = {f_relu(&c.b, x),    f_gelu(&c.b, x, 0),       f_gelu(&c.b, x, 1),        f_silu(&c.b, x),
                    f_sigmoid(&c.b, x), f_hard_swish(&c.b, x), f_hard_sigmoid(&c.b, x)};
    if (case_build(&c, "activations", 7, y) == 0 && case_run(&c, "activations", 4) == 0)
        for (int k = 0; k < 7; k++)
            expect(&c, k, names[k], (CtShape){1, {16}}, want_act + 16 * k, 16, TOL_F32);
    case_end(&c);
}

/* add and mul broadcasting [2,3,1] with [4]; scale_shift 1.5 x - 0.25. */
static void test_binary(void)
{
    Case c;
    case_begin(&c, 0);
    ValueId a = b_input(&c.b, "a", (CtShape){3, {2, 3, 1}}, CT_F32);
    ValueId b = b_input(&c.b, "b", (CtShape){1, {4}}, CT_F32);
    ValueId y[2] = {f_add(&c.b, a, b), f_mul(&c.b, a, b)};
    if (case_build(&c, "add/mul", 2, y) == 0 && case_run(&c, "add/mul", 1) == 0) {
        expect(&c, 0, "add", (CtShape){3, {2, 3, 4}}, want_add, NELEM(want_add), TOL_F32);
        expect(&c, 1, "mul", (CtShape){3, {2, 3, 4}}, want_mul, NELEM(want_mul), TOL_F32);
    }
    case_end(&c);

    case_begin(&c, 0);
    ValueId x = b_input(&c.b, "x", (CtShape){1, {6}}, CT_F32);
    ValueId s = f_scale_shift(&c.b, x, 1.5, -0.25);
    if (case_build(&c, "scale_shift", 1, &s) == 0 && case_run(&c, "scale_shift", 1) == 0)
        expect(&c, 0, "scale_shift", (CtShape){1, {6}}, want_scale_shift, NELEM(want_scale_shift), TOL_F32);
    case_end(&c);
}

/* Pools of one odd 5x7 input, and a ceil-mode window that overhangs the
 * padding of a 6x8 input (divisor counts only up to the padded edge). */
static void test_pools(void)
{
    Case c;
    case_begin(&c, 0);
    ValueId x = b_input(&c.b, "x", (CtShape){4, {1, 2, 5, 7}}, CT_F32);
    ValueId y[5] = {f_avg_pool2d(&c.b, x, 2, 2, 0, 1, 0), f_avg_pool2d(&c.b, x, 3, 2, 1, 0, 1),
                    f_max_pool2d(&c.b, x, 3, 2, 1), f_adaptive_avg_pool2d(&c.b, x, 3, 2),
                    f_global_avg_pool(&c.b, x)};
    if (case_build(&c, "pools", 5, y) == 0 && case_run(&c, "pools", 1) == 0) {
        expect(&c, 0, "avg_pool2d k2 s2 ceil", (CtShape){4, {1, 2, 3, 4}}, want_avg_ceil, NELEM(want_avg_ceil),
               TOL_F32);
        expect(&c, 1, "avg_pool2d k3 s2 p1 count_include_pad", (CtShape){4, {1, 2, 3, 4}}, want_avg_pad,
               NELEM(want_avg_pad), TOL_F32);
        expect(&c, 2, "max_pool2d k3 s2 p1", (CtShape){4, {1, 2, 3, 4}}, want_max_pool, NELEM(want_max_pool),
               TOL_F32);
        expect(&c, 3, "adaptive_avg_pool2d 3x2", (CtShape){4, {1, 2, 3, 2}}, want_adaptive, NELEM(want_adaptive),
               TOL_F32);
        expect(&c, 4, "global avg pool", (CtShape){2, {1, 2}}, want_global_pool, NELEM(want_global_pool), TOL_F32);
    }
    case_end(&c);

    case_begin(&c, 0);
    x = b_input(&c.b, "x", (CtShape){4, {1, 1, 6, 8}}, CT_F32);
    y[0] = f_avg_pool2d(&c.b, x, 3, 2, 1, 1, 1);
    if (case_build(&c, "avg_pool2d ceil pad", 1, y) == 0 && case_run(&c, "avg_pool2d ceil pad", 1) == 0)
        expect(&c, 0, "avg_pool2d k3 s2 p1 ceil count_include_pad", (CtShape){4, {1, 1, 4, 5}}, want_avg_ceil_pad,
               NELEM(want_avg_ceil_pad), TOL_F32);
    case_end(&c);
}

static void test_data_movement(void)
{
    Case c;
    case_begin(&c, 0);
    ValueId x = b_input(&c.b, "x", (CtShape){3, {2, 3, 4}}, CT_F32);
    ValueId y[2] = {f_reshape(&c.b, x, 2, (int64_t[]){4, 6}), f_permute(&c.b, x, 3, (int64_t[]){2, 0, 1})};
    if (case_build(&c, "reshape/permute", 2, y) == 0 && case_run(&c, "reshape/permute", 1) == 0) {
        expect(&c, 0, "reshape", (CtShape){2, {4, 6}}, want_reshape, NELEM(want_reshape), TOL_F32);
        expect(&c, 1, "permute", (CtShape){3, {4, 2, 3}}, want_permute, NELEM(want_permute), TOL_F32);
    }
    case_end(&c);

    case_begin(&c, 0);
    x = b_input(&c.b, "x", (CtShape){3, {2, 5, 3}}, CT_F32);
    y[0] = f_slice(&c.b, x, 1, 1, 5, 2);
    if (case_build(&c, "slice", 1, y) == 0 && case_run(&c, "slice", 1) == 0)
        expect(&c, 0, "slice 1:5:2", (CtShape){3, {2, 2, 3}}, want_slice, NELEM(want_slice), TOL_F32);
    case_end(&c);

    /* SAME padding's zeros (right and bottom heavier); a crop of left and
     * bottom with rows above and a column on the right of value -2.5 */
    static const struct {
        const char *what;
        int64_t a[4];
        double value;
        CtShape y;
        const double *want;
        int64_t n;
    } pads[] = {{"pad 0,1,1,2", {0, 1, 1, 2}, 0, {4, {1, 2, 4, 7}}, want_pad, NELEM(want_pad)},
                {"pad 2,-1,-1,1 value -2.5", {2, -1, -1, 1}, -2.5, {4, {1, 2, 4, 4}}, want_pad_crop,
                 NELEM(want_pad_crop)}};
    for (size_t i = 0; i < sizeof pads / sizeof *pads; i++) {
        case_begin(&c, 0);
        x = b_input(&c.b, "x", (CtShape){4, {1, 2, 3, 4}}, CT_F32);
        y[0] = f_pad(&c.b, x, pads[i].a[0], pads[i].a[1], pads[i].a[2], pads[i].a[3], pads[i].value);
        if (case_build(&c, pads[i].what, 1, y) == 0 && case_run(&c, pads[i].what, 1) == 0)
            expect(&c, 0, pads[i].what, pads[i].y, pads[i].want, pads[i].n, TOL_F32);
        case_end(&c);
    }

    case_begin(&c, 0);
    ValueId parts[3];
    for (int k = 0; k < 3; k++)
        parts[k] = b_input(&c.b, "x", (CtShape){3, {2, k + 1, 3}}, CT_F32);
    y[0] = f_concat(&c.b, 3, parts, 1);
    if (case_build(&c, "concat", 1, y) == 0 && case_run(&c, "concat", 1) == 0)
        expect(&c, 0, "concat", (CtShape){3, {2, 6, 3}}, want_concat, NELEM(want_concat), TOL_F32);
    case_end(&c);

    case_begin(&c, 0);
    x = b_input(&c.b, "x", (CtShape){3, {1, 1, 4}}, CT_F32);
    y[0] = f_expand(&c.b, x, 3, (int64_t[]){2, 3, 4});
    if (case_build(&c, "expand", 1, y) == 0 && case_run(&c, "expand", 1) == 0)
        expect(&c, 0, "expand", (CtShape){3, {2, 3, 4}}, want_expand, NELEM(want_expand), TOL_F32);
    case_end(&c);
}

static void test_attention(void)
{
    Case c;
    case_begin(&c, 0);
    ValueId x = b_input(&c.b, "x", (CtShape){3, {2, 3, 4}}, CT_F32);
    ValueId y = f_softmax(&c.b, x, 1);
    if (case_build(&c, "softmax", 1, &y) == 0 && case_run(&c, "softmax", 2) == 0)
        expect(&c, 0, "softmax dim 1", (CtShape){3, {2, 3, 4}}, want_softmax, NELEM(want_softmax), TOL_F32);
    case_end(&c);

    case_begin(&c, 0);
    CtShape s = {4, {1, 2, 3, 4}};
    ValueId q = b_input(&c.b, "q", s, CT_F32), k = b_input(&c.b, "k", s, CT_F32), v = b_input(&c.b, "v", s, CT_F32);
    y = f_sdpa(&c.b, q, k, v, 1 / sqrt(4.0));
    if (case_build(&c, "sdpa", 1, &y) == 0 && case_run(&c, "sdpa", 1) == 0)
        expect(&c, 0, "sdpa", s, want_sdpa, NELEM(want_sdpa), TOL_F32);
    case_end(&c);

    /* a bias broadcast over B, then over H: q [2,2,2,3], k and v [2,2,3,3] */
    static const struct {
        const char *what;
        CtShape bias;
        const double *want;
    } biased[] = {{"sdpa bias [1,H,N,M]", {4, {1, 2, 2, 3}}, want_sdpa_bias_h},
                  {"sdpa bias [B,1,N,M]", {4, {2, 1, 2, 3}}, want_sdpa_bias_b}};
    for (int i = 0; i < 2; i++) {
        case_begin(&c, 0);
        CtShape sq = {4, {2, 2, 2, 3}}, sk = {4, {2, 2, 3, 3}};
        q = b_input(&c.b, "q", sq, CT_F32), k = b_input(&c.b, "k", sk, CT_F32), v = b_input(&c.b, "v", sk, CT_F32);
        y = f_sdpa_bias(&c.b, q, k, v, b_input(&c.b, "bias", biased[i].bias, CT_F32), 0.6);
        if (case_build(&c, biased[i].what, 1, &y) == 0 && case_run(&c, biased[i].what, 1) == 0)
            expect(&c, 0, biased[i].what, sq, biased[i].want, NELEM(want_sdpa_bias_h), TOL_F32);
        case_end(&c);
    }

    /* the packed form against the separate one on timm's split of a qkv
     * projection's output [2, 5, 3 * 2 heads * 4] (its reshape, permute,
     * slices; the output's transpose), with and without a bias [2, 1, 5, 5] */
    for (int bias = 0; bias < 2; bias++) {
        const char *what = bias ? "packed sdpa bias [B,1,N,N] vs separate" : "packed sdpa vs separate";
        case_begin(&c, 0);
        ValueId x = b_input(&c.b, "qkv", (CtShape){3, {2, 5, 24}}, CT_F32), t[3], ys[2];
        ValueId a = bias ? b_input(&c.b, "bias", (CtShape){4, {2, 1, 5, 5}}, CT_F32) : -1;
        ys[0] = f_reshape(&c.b, f_sdpa_qkv(&c.b, f_reshape(&c.b, x, 5, (int64_t[]){2, 5, 3, 2, 4}), a, 0.4), 3,
                          (int64_t[]){2, 5, 8});
        f_split_heads(&c.b, x, 3, 2, t);
        ys[1] = f_merge_heads(&c.b, bias ? f_sdpa_bias(&c.b, t[0], t[1], t[2], a, 0.4) : f_sdpa(&c.b, t[0], t[1], t[2], 0.4));
        if (case_build(&c, what, 2, ys) == 0 && case_run(&c, what, 1) == 0 && c.nout == 2) {
            double want[80];
            elems_to_double(c.out[1].data, c.out[1].type.dtype, 80, want);
            expect(&c, 0, what, (CtShape){3, {2, 5, 8}}, want, 80, 1e-6);
        }
        case_end(&c);
    }
}

/* SwinV2's logit scale, clamp(max=log(100)).exp(), on 6 sin(...) (two
 * values above the bound); F.normalize(x, dim=-1) composed as x * rsqrt(max(
 * sum x^2, eps^2)), one row all zeros (0 / eps). Within 1e-6 of torch's. */
static void test_cosine_attention_parts(void)
{
    Case c;
    CtErr err;
    case_begin(&c, 0);
    ValueId in[2] = {b_input(&c.b, "s", (CtShape){1, {6}}, CT_F32),
                     b_input(&c.b, "x", (CtShape){3, {2, 3, 4}}, CT_F32)};
    ValueId y[2] = {f_exp(&c.b, f_clamp(&c.b, in[0], -HUGE_VAL, log(1 / 0.01))), f_normalize(&c.b, in[1], 1e-12)};
    if (case_build(&c, "logit scale and normalize", 2, y)) {
        case_end(&c);
        return;
    }
    float s[6], x[24];
    for (int i = 0; i < 6; i++)
        s[i] = (float)gen(i, 0, 6);
    for (int i = 0; i < 24; i++)
        x[i] = i >= 20 ? 0 : (float)gen(i, 0, 1);
    CtTensor t[2] = {{{{1, {6}}, CT_F32}, s}, {{{3, {2, 3, 4}}, CT_F32}, x}};
    if (backend_run_once(&ct_backend_ref, &c.g, &c.s, t, 2, c.out, NULL, &err) == 0) {
        c.nout = 2;
        expect(&c, 0, "clamp(max=log 100).exp()", (CtShape){1, {6}}, want_logit_scale, 6, 1e-6);
        expect(&c, 1, "F.normalize", (CtShape){3, {2, 3, 4}}, want_normalize, 24, 1e-6);
    } else {
        CHECKF(0, "logit scale and normalize: run failed: %s", err.msg);
    }
    case_end(&c);
}

/* dropout and drop_path: no node in eval mode or at rate 0; in training at
 * rate 0.5 each element (dropout) or sample (drop_path) is 0 or 2x. */
static void test_stochastic(void)
{
    for (int op = 0; op < 2; op++) {
        ValueId (*f)(Builder *, ValueId, double) = op ? f_drop_path : f_dropout;
        const char *name = op ? "drop_path" : "dropout";
        for (int training = 0; training < 2; training++)
            for (int p = 0; p < 2; p++) {
                if (training && p)
                    continue; /* the stochastic case, below */
                Case c;
                CtErr err;
                case_begin(&c, training);
                ValueId x = b_input(&c.b, "x", (CtShape){2, {50, 20}}, CT_F32);
                ValueId y = f(&c.b, x, p ? 0.5 : 0.0);
                CHECKF(y == x && c.g.nnodes == 0, "%s training=%d p=%s is not the identity", name, training,
                       p ? "0.5" : "0");
                CHECK(b_finish(&c.b, &err) == 0);
                case_end(&c);
            }

        Case c;
        case_begin(&c, 1);
        ValueId x = b_input(&c.b, "x", (CtShape){2, {50, 20}}, CT_F32);
        ValueId y = f(&c.b, x, 0.5);
        CHECKF(y != x && c.g.nnodes == 1, "%s: training at p=0.5 gives no node", name);
        if (case_build(&c, name, 1, &y) || case_run(&c, name, 1)) {
            case_end(&c);
            continue;
        }
        const float *out = c.out[0].data;
        int kept = 0, samples_kept = 0, bad = 0;
        for (int s = 0; s < 50; s++) {
            int kept_here = 0;
            for (int i = 0; i < 20; i++) {
                float xi = (float)gen(s * 20 + i, 0, 1), yi = out[s * 20 + i];
                if (yi == 2 * xi)
                    kept_here++;
                else if (yi != 0)
                    bad++;
            }
            kept += kept_here;
            samples_kept += kept_here == 20;
            if (op)
                bad += kept_here != 0 && kept_here != 20;
        }
        CHECKF(bad == 0, "%s: %d outputs (or samples) neither 0 nor 2x", name, bad);
        CHECKF(kept >= 400 && kept <= 600, "%s: kept %d of 1000", name, kept);
        if (op)
            CHECKF(samples_kept >= 15 && samples_kept <= 35, "drop_path: kept %d of 50 samples", samples_kept);
        case_end(&c);
    }
}

/* gather(x, dim, index) at an i32 or i64 index (torch.index_select on
 * index.view(-1), viewed back), and gather_grad (index_add_ into zeros; row
 * 2 of the table taken twice); an index outside [0, T) gives zeros and
 * takes no gradient (torch rejects it: this is ctimm's rule, by formula). */
static void test_gather(void)
{
    static const int32_t swin[6] = {4, 0, 4, 2, 2, 1}, outside[3] = {5, -1, 1};
    static const int64_t levit[4] = {3, 0, 1, 3};
    static const struct {
        const char *what;
        int grad, dim;
        CtShape x, index, y;
        CtDType dt;
        const void *index_data;
        const double *want; /* NULL: by formula from x (outside's) */
    } cases[] = {
        {"gather dim 0 (a bias table)", 0, 0, {2, {5, 2}}, {2, {2, 3}}, {3, {2, 3, 2}}, CT_I32, swin,
         want_gather_table},
        {"gather dim 1, i64 index", 0, 1, {2, {2, 4}}, {2, {2, 2}}, {3, {2, 2, 2}}, CT_I64, levit, want_gather_dim1},
        {"gather_grad (index_add_)", 1, 0, {3, {2, 3, 2}}, {2, {2, 3}}, {2, {5, 2}}, CT_I32, swin, want_gather_grad},
        {"gather at indices 5, -1 of 5", 0, 0, {2, {5, 2}}, {1, {3}}, {2, {3, 2}}, CT_I32, outside, NULL},
        {"gather_grad at indices 5, -1 of 5", 1, 0, {2, {3, 2}}, {1, {3}}, {2, {5, 2}}, CT_I32, outside, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Case c;
        CtErr err;
        case_begin(&c, 0);
        ValueId in[2] = {b_input(&c.b, "x", cases[i].x, CT_F32), b_input(&c.b, "index", cases[i].index, cases[i].dt)};
        ValueId y = cases[i].grad ? b_node(&c.b, CT_OP_gather_grad, 2, in, (int64_t[]){cases[i].dim, 5}, 2, NULL, 0, 0)
                                  : f_gather(&c.b, in[0], cases[i].dim, in[1]);
        if (case_build(&c, cases[i].what, 1, &y)) {
            case_end(&c);
            continue;
        }
        float x[12];
        double want[12] = {0};
        for (int64_t j = 0; j < shape_numel(&cases[i].x); j++)
            x[j] = (float)gen(j, 0, 1);
        /* outside's: y = [0, 0, 0, 0, x[2], x[3]]; dx has dy's last row at row 1 */
        want[cases[i].grad ? 2 : 4] = x[cases[i].grad ? 4 : 2];
        want[cases[i].grad ? 3 : 5] = x[cases[i].grad ? 5 : 3];
        CtTensor t[2] = {{{cases[i].x, CT_F32}, x}, {{cases[i].index, cases[i].dt}, (void *)cases[i].index_data}};
        if (backend_run_once(&ct_backend_ref, &c.g, &c.s, t, 2, c.out, NULL, &err) == 0) {
            c.nout = 1;
            expect(&c, 0, cases[i].what, cases[i].y, cases[i].want ? cases[i].want : want, shape_numel(&cases[i].y),
                   TOL_F32);
        } else {
            CHECKF(0, "%s: run failed: %s", cases[i].what, err.msg);
        }
        case_end(&c);
    }
}

/* Finishes a build that must fail, with a message naming `op`. */
static void expect_reject(Case *c, const char *op, const char *what)
{
    CtErr err = {{0}};
    int rc = b_finish(&c->b, &err);
    CHECKF(rc == -1, "%s: built", what);
    if (rc == -1)
        CHECKF(strstr(err.msg, op) != NULL, "%s: message does not name %s: %s", what, op, err.msg);
    case_end(c);
}

static void test_rejections(void)
{
    Case c;
    case_begin(&c, 0);
    ValueId x = b_input(&c.b, "x", (CtShape){4, {1, 4, 5, 5}}, CT_F32);
    ValueId w = b_input(&c.b, "w", (CtShape){4, {4, 2, 3, 3}}, CT_F32);
    b_node(&c.b, CT_OP_conv2d, 2, (ValueId[]){x, w}, (int64_t[]){1, 1, 0, 0, 1, 1, 3}, 7, NULL, 0, 0);
    expect_reject(&c, "conv2d", "conv2d groups=3 on 4 channels");

    case_begin(&c, 0);
    x = b_input(&c.b, "x", (CtShape){4, {1, 4, 5, 5}}, CT_F32);
    w = b_input(&c.b, "w", (CtShape){4, {3, 2, 3, 3}}, CT_F32);
    b_node(&c.b, CT_OP_conv2d, 2, (ValueId[]){x, w}, (int64_t[]){1, 1, 0, 0, 1, 1, 2}, 7, NULL, 0, 0);
    expect_reject(&c, "conv2d", "conv2d groups=2 on 3 out channels");

    case_begin(&c, 0);
    x = b_input(&c.b, "x", (CtShape){4, {1, 4, 5, 5}}, CT_F32);
    nn_conv2d(&c.b, "stem", x, 6, 3, (ConvOpts){.groups = 3});
    expect_reject(&c, "stem", "nn_conv2d groups=3 on 4 channels");

    case_begin(&c, 0);
    f_matmul(&c.b, b_input(&c.b, "a", (CtShape){3, {2, 3, 4}}, CT_F32),
             b_input(&c.b, "b", (CtShape){3, {2, 5, 2}}, CT_F32));
    expect_reject(&c, "matmul", "matmul K 4 vs 5");

    case_begin(&c, 0); /* read transposed, a [4,3]^T is [3,4]: K 4 vs b's 3 */
    b_node(&c.b, CT_OP_matmul, 2,
           (ValueId[]){b_input(&c.b, "a", (CtShape){2, {4, 3}}, CT_F32), b_input(&c.b, "b", (CtShape){2, {3, 2}}, CT_F32)},
           (int64_t[]){1, 0}, 2, NULL, 0, 0);
    expect_reject(&c, "matmul", "matmul a^T K 4 vs 3");

    case_begin(&c, 0);
    b_node(&c.b, CT_OP_matmul, 2,
           (ValueId[]){b_input(&c.b, "a", (CtShape){2, {4, 3}}, CT_F32), b_input(&c.b, "b", (CtShape){2, {3, 2}}, CT_F32)},
           (int64_t[]){0, 2}, 2, NULL, 0, 0);
    expect_reject(&c, "matmul", "matmul trans_b=2");

    case_begin(&c, 0);
    f_reshape(&c.b, b_input(&c.b, "x", (CtShape){3, {2, 3, 4}}, CT_F32), 2, (int64_t[]){5, 5});
    expect_reject(&c, "reshape", "reshape 24 to 25 elements");

    case_begin(&c, 0);
    f_add(&c.b, b_input(&c.b, "a", (CtShape){2, {2, 3}}, CT_F32), b_input(&c.b, "b", (CtShape){1, {4}}, CT_F32));
    expect_reject(&c, "add", "add [2,3] + [4]");

    /* a product's factor: x's dtype, or 16-bit beside an f32 x, not wider */
    case_begin(&c, 0);
    b_node(&c.b, CT_OP_reduce_sum, 2,
           (ValueId[]){b_input(&c.b, "x", (CtShape){2, {2, 3}}, CT_BF16),
                       b_input(&c.b, "f", (CtShape){2, {2, 3}}, CT_F32)},
           (int64_t[]){1, 0}, 2, NULL, 0, 0);
    expect_reject(&c, "reduce_sum", "reduce_sum of a bf16 x times an f32 factor");

    case_begin(&c, 0);
    f_slice(&c.b, b_input(&c.b, "x", (CtShape){3, {2, 5, 3}}, CT_F32), 1, 0, 6, 1);
    expect_reject(&c, "slice", "slice 0:6 of 5");

    case_begin(&c, 0);
    f_pad(&c.b, b_input(&c.b, "x", (CtShape){4, {1, 2, 3, 4}}, CT_F32), 0, 0, -2, -2, 0);
    expect_reject(&c, "pad", "pad cropping all 4 columns");

    case_begin(&c, 0);
    f_pad(&c.b, b_input(&c.b, "x", (CtShape){3, {2, 3, 4}}, CT_F32), 1, 1, 1, 1, 0);
    expect_reject(&c, "pad", "pad of a 3-D input");

    case_begin(&c, 0);
    f_gather(&c.b, b_input(&c.b, "x", (CtShape){2, {5, 2}}, CT_F32), 0, b_input(&c.b, "i", (CtShape){1, {3}}, CT_F32));
    expect_reject(&c, "gather", "gather at a float index");

    case_begin(&c, 0);
    f_gather(&c.b, b_input(&c.b, "x", (CtShape){2, {5, 2}}, CT_F32), 2, b_input(&c.b, "i", (CtShape){1, {3}}, CT_I32));
    expect_reject(&c, "gather", "gather on dim 2 of 2");

    case_begin(&c, 0);
    f_concat(&c.b, 2,
             (ValueId[]){b_input(&c.b, "a", (CtShape){3, {2, 1, 3}}, CT_F32),
                         b_input(&c.b, "b", (CtShape){3, {2, 2, 4}}, CT_F32)},
             1);
    expect_reject(&c, "concat", "concat [2,1,3] with [2,2,4]");

    case_begin(&c, 0);
    nn_group_norm(&c.b, "gn", b_input(&c.b, "x", (CtShape){4, {1, 6, 2, 2}}, CT_F32), (GNOpts){.groups = 4});
    expect_reject(&c, "group_norm", "group_norm 4 groups of 6 channels");

    case_begin(&c, 0);
    nn_group_norm(&c.b, "gn", b_input(&c.b, "x", (CtShape){1, {6}}, CT_F32), (GNOpts){.groups = 2});
    expect_reject(&c, "group_norm", "group_norm of a 1-D input");

    /* q [2,2,3,4], k and v [2,2,5,4]: a bias of 3 heads, and one of 4 keys */
    static const CtShape bad_bias[] = {{4, {1, 3, 3, 5}}, {4, {2, 2, 3, 4}}};
    for (int i = 0; i < 2; i++) {
        case_begin(&c, 0);
        CtShape sq = {4, {2, 2, 3, 4}}, sk = {4, {2, 2, 5, 4}};
        f_sdpa_bias(&c.b, b_input(&c.b, "q", sq, CT_F32), b_input(&c.b, "k", sk, CT_F32),
                    b_input(&c.b, "v", sk, CT_F32), b_input(&c.b, "bias", bad_bias[i], CT_F32), 0.5);
        expect_reject(&c, "sdpa", i ? "sdpa bias of 4 keys for 5" : "sdpa bias of 3 heads for 2");
    }

    case_begin(&c, 0);
    x = b_input(&c.b, "x", (CtShape){1, {4}}, CT_F32);
    b_node(&c.b, CT_OP_assign, 2, (ValueId[]){f_relu(&c.b, x), x}, NULL, 0, NULL, 0, 0);
    expect_reject(&c, "assign", "assign to an activation");
}

/* jsd_cross_entropy against timm's JsdCrossEntropy on 6 rows of 3 logits:
 * 3 splits of 2 with smoothing 0.1 (targets [2, 0] repeated), 2 splits of
 * 3 unsmoothed (targets [2, 0, 1] repeated), alpha 12 (float64). */
static void test_jsd_values(void)
{
    static const double logits[18] = {0.5, -1, 2, 0, 1, -0.5, 1.5, 0.2, -0.3, -2, 0.4, 0.9, 0.3, 0.3, -1, 2.5, -0.5, 0.1};
    static const struct { int splits; double smoothing; int64_t t[6]; double want; } cases[] = {
        {3, 0.1, {2, 0, 2, 0, 2, 0}, 4.714889516537649}, {2, 0, {2, 0, 1, 2, 0, 1}, 1.7839583206392553}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Graph g;
        CtErr err;
        graph_init(&g);
        ValueId x = graph_add_value(&g, (CtType){{2, {6, 3}}, CT_F64}, CT_ROLE_INPUT, "x");
        ValueId t = graph_add_value(&g, (CtType){{1, {6}}, CT_I64}, CT_ROLE_INPUT, "t");
        Node n = {.op = CT_OP_jsd_cross_entropy, .nin = 2, .in = {x, t}, .iattr = {cases[i].splits},
                  .fattr = {cases[i].smoothing, 12}};
        int id = graph_add_node(&g, &n, "loss", &err);
        CHECKF(id >= 0, "jsd case %zu: %s", i, err.msg);
        if (id < 0) {
            graph_free(&g);
            continue;
        }
        graph_mark_output(&g, g.nodes[id].out[0]);
        CtTensor in[2] = {{{{2, {6, 3}}, CT_F64}, (void *)logits}, {{{1, {6}}, CT_I64}, (void *)cases[i].t}};
        CtTensor out;
        CtState st;
        state_create(&st, &g);
        CHECKF(backend_run_once(&ct_backend_ref, &g, &st, in, 2, &out, NULL, &err) == 0, "%s", err.msg);
        CHECKF(fabs(*(double *)out.data - cases[i].want) < 1e-12, "jsd case %zu: %.17g, timm %.17g", i,
               *(double *)out.data, cases[i].want);
        tensor_free(&out);
        state_free(&st);
        graph_free(&g);
    }
}

/* binary_cross_entropy against timm's BinaryCrossEntropy on logits
 * [[0.5,-1,2],[0,1,-0.5]]: class targets [2,0] with (smoothing, threshold)
 * (0, none), (0.1, none), (0.1, 0.2); soft targets [[.2,.3,.5],[.7,.1,.2]]
 * with threshold none and 0.25; then pos_weight and sum_classes
 * (--bce-pos-weight, --bce-sum): (0.1, none, 2.5, mean), soft (0, none,
 * 0.375, sum), (0.1, 0.2, 3, sum) (values from timm 1.0, float64). */
static void test_bce_values(void)
{
    static const double logits[6] = {0.5, -1, 2, 0, 1, -0.5}, soft[6] = {0.2, 0.3, 0.5, 0.7, 0.1, 0.2};
    static const int64_t labels[2] = {2, 0};
    static const struct { int soft; double smoothing, threshold, pos_weight; int sum; double want; } cases[] = {
        {0, 0, -1, 0, 0, 0.6491254224999295}, {0, 0.1, -1, 0, 0, 0.6713476447221517},
        {0, 0.1, 0.2, 0, 0, 0.6491254224999295}, {1, 0, -1, 0, 0, 0.8491254224999295},
        {1, 0, 0.25, 0, 0, 0.8157920891665961}, {0, 0.1, -1, 2.5, 0, 0.8883208339578047},
        {1, 0, -1, 0.375, 1, 2.152500486064545}, {0, 0.1, 0.2, 3, 1, 2.7674514591027064}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Graph g;
        CtErr err;
        graph_init(&g);
        ValueId x = graph_add_value(&g, (CtType){{2, {2, 3}}, CT_F64}, CT_ROLE_INPUT, "x");
        ValueId t = cases[i].soft ? graph_add_value(&g, (CtType){{2, {2, 3}}, CT_F64}, CT_ROLE_INPUT, "t")
                                  : graph_add_value(&g, (CtType){{1, {2}}, CT_I64}, CT_ROLE_INPUT, "t");
        Node n = {.op = CT_OP_binary_cross_entropy, .nin = 2, .in = {x, t},
                  .iattr = {cases[i].sum}, .fattr = {cases[i].smoothing, cases[i].threshold, cases[i].pos_weight}};
        int id = graph_add_node(&g, &n, "loss", &err);
        CHECKF(id >= 0, "bce case %zu: %s", i, err.msg);
        if (id < 0) {
            graph_free(&g);
            continue;
        }
        graph_mark_output(&g, g.nodes[id].out[0]);
        CtTensor in[2] = {{{{2, {2, 3}}, CT_F64}, (void *)logits},
                          cases[i].soft ? (CtTensor){{{2, {2, 3}}, CT_F64}, (void *)soft}
                                        : (CtTensor){{{1, {2}}, CT_I64}, (void *)labels}};
        CtTensor out;
        CtState st;
        state_create(&st, &g);
        CHECKF(backend_run_once(&ct_backend_ref, &g, &st, in, 2, &out, NULL, &err) == 0, "%s", err.msg);
        CHECKF(fabs(*(double *)out.data - cases[i].want) < 1e-12, "bce case %zu: %.17g, timm %.17g", i,
               *(double *)out.data, cases[i].want);
        tensor_free(&out);
        state_free(&st);
        graph_free(&g);
    }
}

int main(void)
{
    test_conv2d();
    test_conv2d_f64();
    test_batch_norm();
    test_layer_norm_linear();
    test_group_norm();
    test_std_conv();
    test_matmul();
    test_activations();
    test_binary();
    test_pools();
    test_data_movement();
    test_gather();
    test_attention();
    test_cosine_attention_parts();
    test_stochastic();
    test_rejections();
    test_bce_values();
    test_jsd_values();
    return check_done("test_ops");
}
