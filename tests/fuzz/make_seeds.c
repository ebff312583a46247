/* make_seeds.c -- writes the generated seed inputs of the fuzz targets:
 *
 *   make_fuzz_seeds DIR     (make fuzz-seeds: DIR is tests/fuzz/corpus)
 *
 * DIR/onnx and DIR/run: small valid ONNX models, one or a few ops each,
 * together covering every op family the engine runs (with the attributes
 * and optional inputs that change what a kernel does), the patterns the
 * loader rewrites (constant folding, Conv+BatchNormalization, the erf
 * GELU chain), symbolic dims shared between inputs, and a plan whose
 * shapes depend on data. DIR/codec: request bodies in the codec target's
 * format (fuzz_codec.c): JSON and binary-extension requests for the
 * models that target serves ("mlp" has the demo mlp's inputs and
 * outputs), every datatype, nested and flat data, ids, requested outputs.
 *
 * Everything is deterministic: a rerun writes the same bytes. The config
 * corpora are hand-written and not touched. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "common/error.h"
#include "server/encoding.h"
#include "tests/fuzz/fuzz_model.h"

#define D(...) ((const int64_t[]){__VA_ARGS__})
#define P(...) ((const char *const[]){__VA_ARGS__})
#define F(...) ((const float[]){__VA_ARGS__})

static const char *out_root;

static void die(const char *what)
{
    fprintf(stderr, "make_fuzz_seeds: %s: %s\n", what, errno ? strerror(errno) : fs_errmsg());
    exit(1);
}

static void dir_make(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        die(path);
    errno = 0;
}

static void file_write(const char *sub, const char *name, const void *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", out_root, sub);
    dir_make(path);
    snprintf(path, sizeof path, "%s/%s/%s", out_root, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
        die(path);
}

/* n floats (i % 7 - 3) * scale, in a buffer reused by the next call. */
static const float *ramp(size_t n, float scale)
{
    static float v[4096];
    if (n > sizeof v / sizeof v[0]) {
        errno = 0;
        die("ramp: too many values");
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((int)(i % 7) - 3) * scale;
    return v;
}

/* Packs the model and writes it as NAME.onnx to onnx/ and run/. */
static void model_write(fuzz_mb_t *b, const char *name)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (fuzz_mb_pack(b, &bytes, &len) != 0)
        die(name);
    char file[256];
    snprintf(file, sizeof file, "%s.onnx", name);
    file_write("onnx", file, bytes, len);
    file_write("run", file, bytes, len);
    free(bytes);
    fuzz_mb_free(b);
}

/* ---- element-wise --------------------------------------------------------- */

static void seeds_unary(void)
{
    static const char *const ops[] = {"Abs", "Acos", "Asin", "Atan", "Ceil", "Cos", "Erf",
                                      "Exp", "Floor", "Log", "Neg", "Reciprocal", "Relu",
                                      "Round", "Sigmoid", "Sign", "Sin", "Softplus",
                                      "Softsign", "Sqrt", "Tan", "Tanh", "Identity"};
    const size_t n_ops = sizeof ops / sizeof ops[0], half = n_ops / 2;
    fuzz_mb_t b;
    /* Two models, each op on the input with an output of its own. */
    for (size_t part = 0; part < 2; part++) {
        fuzz_mb_init(&b, 8, 13);
        fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 2, D(-1, 3), P("n", NULL));
        for (size_t i = part ? half : 0; i < (part ? n_ops : half); i++) {
            char out[32];
            snprintf(out, sizeof out, "y_%s", ops[i]);
            fuzz_mb_node(&b, ops[i], "x", out);
            fuzz_mb_output(&b, out, FUZZ_DT_FLOAT, 2, D(-1, 3), P("n", NULL));
        }
        model_write(&b, part ? "unary_b" : "unary_a");
    }

    fuzz_mb_init(&b, 8, 20);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 3, D(2, -1, 4), P(NULL, "t", NULL));
    fuzz_mb_attr_f(&b, fuzz_mb_node(&b, "Elu", "x", "elu"), "alpha", 0.5f);
    fuzz_mb_attr_f(&b, fuzz_mb_node(&b, "LeakyRelu", "elu", "leaky"), "alpha", 0.1f);
    Onnx__NodeProto *n = fuzz_mb_node(&b, "HardSigmoid", "leaky", "hs");
    fuzz_mb_attr_f(&b, n, "alpha", 0.3f);
    fuzz_mb_attr_f(&b, n, "beta", 0.4f);
    fuzz_mb_node(&b, "HardSwish", "hs", "hsw");
    fuzz_mb_node(&b, "Selu", "hsw", "selu");
    fuzz_mb_attr_f(&b, fuzz_mb_node(&b, "ThresholdedRelu", "selu", "tr"), "alpha", 0.2f);
    fuzz_mb_attr_s(&b, fuzz_mb_node(&b, "Gelu", "tr", "gelu"), "approximate", "tanh");
    fuzz_mb_init_f(&b, "lo", 0, NULL, F(-0.5f));
    fuzz_mb_init_f(&b, "hi", 0, NULL, F(0.5f));
    fuzz_mb_node(&b, "Clip", "gelu,lo,hi", "clip");
    fuzz_mb_node(&b, "Clip", "x,,hi", "clip_hi");
    fuzz_mb_node(&b, "Dropout", "clip", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 3, D(2, -1, 4), P(NULL, "t", NULL));
    fuzz_mb_output(&b, "clip_hi", FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "activations");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 1, D(6), NULL);
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Cast", "x", "i64"), "to", FUZZ_DT_INT64);
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Cast", "x", "i32"), "to", FUZZ_DT_INT32);
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Cast", "x", "u8"), "to", FUZZ_DT_UINT8);
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Cast", "x", "b"), "to", FUZZ_DT_BOOL);
    fuzz_mb_node(&b, "Not", "b", "nb");
    fuzz_mb_node(&b, "CastLike", "i64,x", "back");
    fuzz_mb_output(&b, "i32", FUZZ_DT_INT32, 1, D(6), NULL);
    fuzz_mb_output(&b, "u8", FUZZ_DT_UINT8, 1, D(6), NULL);
    fuzz_mb_output(&b, "nb", FUZZ_DT_BOOL, 1, D(6), NULL);
    fuzz_mb_output(&b, "back", FUZZ_DT_FLOAT, 1, D(6), NULL);
    model_write(&b, "cast");
}

static void seeds_binary(void)
{
    fuzz_mb_t b;
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "a", FUZZ_DT_FLOAT, 2, D(-1, 3), P("n", NULL));
    fuzz_mb_input(&b, "b", FUZZ_DT_FLOAT, 1, D(3), NULL);
    fuzz_mb_node(&b, "Add", "a,b", "add");
    fuzz_mb_node(&b, "Sub", "add,b", "sub");
    fuzz_mb_node(&b, "Mul", "sub,a", "mul");
    fuzz_mb_node(&b, "Div", "mul,b", "div");
    fuzz_mb_node(&b, "Pow", "div,b", "pow");
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Mod", "pow,b", "fmod"), "fmod", 1);
    fuzz_mb_node(&b, "Max", "a,b,fmod", "max");
    fuzz_mb_node(&b, "Min", "a,b", "min");
    fuzz_mb_node(&b, "Mean", "max,min", "mean");
    fuzz_mb_node(&b, "Sum", "mean,a,b", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 2, D(-1, 3), P("n", NULL));
    model_write(&b, "arith_broadcast");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "a", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    fuzz_mb_input(&b, "b", FUZZ_DT_FLOAT, 2, D(2, 1), NULL);
    fuzz_mb_node(&b, "Equal", "a,b", "eq");
    fuzz_mb_node(&b, "Greater", "a,b", "gt");
    fuzz_mb_node(&b, "GreaterOrEqual", "a,b", "ge");
    fuzz_mb_node(&b, "Less", "a,b", "lt");
    fuzz_mb_node(&b, "LessOrEqual", "a,b", "le");
    fuzz_mb_node(&b, "And", "eq,gt", "and");
    fuzz_mb_node(&b, "Or", "and,ge", "or");
    fuzz_mb_node(&b, "Xor", "or,lt", "xor");
    fuzz_mb_node(&b, "Where", "xor,a,b", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    fuzz_mb_output(&b, "le", FUZZ_DT_BOOL, 2, D(2, 3), NULL);
    model_write(&b, "compare_where");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "a", FUZZ_DT_INT64, 1, D(-1), P("n"));
    fuzz_mb_init_i64(&b, "m", 1, D(1), D(3));
    fuzz_mb_node(&b, "Mod", "a,m", "mod");
    fuzz_mb_node(&b, "Mul", "mod,a", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_INT64, 1, D(-1), P("n"));
    model_write(&b, "int_mod");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 4, D(1, 2, 3, 3), NULL);
    fuzz_mb_init_f(&b, "slope", 3, D(2, 1, 1), F(0.1f, 0.2f));
    fuzz_mb_node(&b, "PRelu", "x,slope", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 4, D(1, 2, 3, 3), NULL);
    model_write(&b, "prelu");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "a", FUZZ_DT_INT32, 2, D(2, 2), NULL);
    fuzz_mb_input(&b, "c", FUZZ_DT_UINT8, 2, D(2, 2), NULL);
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Cast", "c", "ci"), "to", FUZZ_DT_INT32);
    fuzz_mb_node(&b, "Add", "a,ci", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_INT32, 2, D(2, 2), NULL);
    model_write(&b, "int32_uint8");
}

/* ---- reductions and shapes ------------------------------------------------- */

static void seeds_reduce(void)
{
    fuzz_mb_t b;
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 3, D(2, 3, 4), NULL);
    fuzz_mb_init_i64(&b, "axes", 1, D(1), D(1));
    fuzz_mb_node(&b, "ReduceSum", "x,axes", "sum");
    Onnx__NodeProto *n = fuzz_mb_node(&b, "ReduceMean", "x", "mean");
    fuzz_mb_attr_ints(&b, n, "axes", D(-1), 1);
    fuzz_mb_attr_i(&b, n, "keepdims", 0);
    fuzz_mb_node(&b, "ReduceMax", "x", "max");
    fuzz_mb_attr_ints(&b, fuzz_mb_node(&b, "ReduceMin", "x", "min"), "axes", D(0, 2), 2);
    fuzz_mb_attr_ints(&b, fuzz_mb_node(&b, "ReduceProd", "x", "prod"), "axes", D(2), 1);
    fuzz_mb_attr_ints(&b, fuzz_mb_node(&b, "ReduceL2", "x", "l2"), "axes", D(1), 1);
    fuzz_mb_node(&b, "ReduceSumSquare", "x", "ss");
    const char *outs[] = {"sum", "mean", "max", "min", "prod", "l2", "ss"};
    for (size_t i = 0; i < 7; i++)
        fuzz_mb_output(&b, outs[i], FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "reduce");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 2, D(-1, 5), P("n", NULL));
    n = fuzz_mb_node(&b, "ArgMax", "x", "amax");
    fuzz_mb_attr_i(&b, n, "axis", 1);
    fuzz_mb_attr_i(&b, n, "select_last_index", 1);
    n = fuzz_mb_node(&b, "ArgMin", "x", "amin");
    fuzz_mb_attr_i(&b, n, "keepdims", 0);
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Softmax", "x", "sm"), "axis", 0);
    fuzz_mb_node(&b, "LogSoftmax", "sm", "lsm");
    fuzz_mb_init_i64(&b, "cax", 0, NULL, D(1));
    n = fuzz_mb_node(&b, "CumSum", "lsm,cax", "cs");
    fuzz_mb_attr_i(&b, n, "exclusive", 1);
    fuzz_mb_attr_i(&b, n, "reverse", 1);
    fuzz_mb_output(&b, "amax", FUZZ_DT_INT64, -1, NULL, NULL);
    fuzz_mb_output(&b, "amin", FUZZ_DT_INT64, -1, NULL, NULL);
    fuzz_mb_output(&b, "cs", FUZZ_DT_FLOAT, 2, D(-1, 5), P("n", NULL));
    model_write(&b, "arg_softmax_cumsum");
}

static void seeds_shape(void)
{
    fuzz_mb_t b;
    Onnx__NodeProto *n;
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 2, D(-1, 6), P("n", NULL));
    fuzz_mb_init_i64(&b, "shape", 1, D(3), D(0, 2, -1));
    fuzz_mb_node(&b, "Reshape", "x,shape", "r");
    fuzz_mb_attr_ints(&b, fuzz_mb_node(&b, "Transpose", "r", "t"), "perm", D(2, 0, 1), 3);
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Flatten", "t", "f"), "axis", 2);
    fuzz_mb_init_i64(&b, "ax0", 1, D(1), D(0));
    fuzz_mb_node(&b, "Unsqueeze", "f,ax0", "u");
    fuzz_mb_node(&b, "Squeeze", "u,ax0", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "reshape_transpose");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "a", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    fuzz_mb_input(&b, "b", FUZZ_DT_FLOAT, 2, D(2, -1), P(NULL, "k"));
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Concat", "a,b,a", "c"), "axis", 1);
    fuzz_mb_init_i64(&b, "parts", 1, D(2), D(1, 2));
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Split", "a,parts", "s0,s1"), "axis", 1);
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Concat", "s1,s0", "back"), "axis", 1);
    fuzz_mb_output(&b, "c", FUZZ_DT_FLOAT, 2, D(2, -1), NULL);
    fuzz_mb_output(&b, "back", FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "concat_split");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 3, D(2, 5, 4), NULL);
    fuzz_mb_init_i64(&b, "starts", 1, D(2), D(-1, 1));
    fuzz_mb_init_i64(&b, "ends", 1, D(2), D(INT64_MIN, 4));
    fuzz_mb_init_i64(&b, "axes", 1, D(2), D(1, 2));
    fuzz_mb_init_i64(&b, "steps", 1, D(2), D(-2, 2));
    fuzz_mb_node(&b, "Slice", "x,starts,ends,axes,steps", "s");
    fuzz_mb_init_i64(&b, "idx", 2, D(2, 2), D(0, -1, 1, 0));
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Gather", "x,idx", "g"), "axis", 1);
    fuzz_mb_init_i64(&b, "eidx", 3, D(2, 1, 4), D(0, 1, 2, 3, 4, -1, 0, 1));
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "GatherElements", "x,eidx", "ge"), "axis", 1);
    fuzz_mb_output(&b, "s", FUZZ_DT_FLOAT, -1, NULL, NULL);
    fuzz_mb_output(&b, "g", FUZZ_DT_FLOAT, -1, NULL, NULL);
    fuzz_mb_output(&b, "ge", FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "slice_gather");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 2, D(1, 3), NULL);
    fuzz_mb_init_i64(&b, "eshape", 1, D(3), D(2, 1, 3));
    fuzz_mb_node(&b, "Expand", "x,eshape", "e");
    fuzz_mb_init_i64(&b, "reps", 1, D(3), D(1, 2, 2));
    fuzz_mb_node(&b, "Tile", "e,reps", "t");
    fuzz_mb_init_i64(&b, "pads", 1, D(6), D(0, 1, 2, 0, 1, 0));
    fuzz_mb_init_f(&b, "pv", 0, NULL, F(9.0f));
    fuzz_mb_node(&b, "Pad", "t,pads,pv", "p");
    fuzz_mb_attr_s(&b, fuzz_mb_node(&b, "Pad", "t,pads", "p_reflect"), "mode", "reflect");
    fuzz_mb_attr_s(&b, fuzz_mb_node(&b, "Pad", "t,pads", "p_edge"), "mode", "edge");
    fuzz_mb_output(&b, "p", FUZZ_DT_FLOAT, -1, NULL, NULL);
    fuzz_mb_output(&b, "p_reflect", FUZZ_DT_FLOAT, -1, NULL, NULL);
    fuzz_mb_output(&b, "p_edge", FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "expand_tile_pad");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 4, D(1, 8, 2, 2), NULL);
    Onnx__NodeProto *d2s = fuzz_mb_node(&b, "DepthToSpace", "x", "d");
    fuzz_mb_attr_i(&b, d2s, "blocksize", 2);
    fuzz_mb_attr_s(&b, d2s, "mode", "CRD");
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "SpaceToDepth", "d", "y"), "blocksize", 2);
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 4, D(1, 8, 2, 2), NULL);
    model_write(&b, "depth_space");

    /* Shape values folded at plan time, and ConstantOfShape / Range. */
    fuzz_mb_init(&b, 8, 15);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 3, D(-1, -1, 2), P("a", "b", NULL));
    n = fuzz_mb_node(&b, "Shape", "x", "sh");
    fuzz_mb_attr_i(&b, n, "start", 1);
    fuzz_mb_node(&b, "Size", "x", "sz");
    n = fuzz_mb_node(&b, "ConstantOfShape", "sh", "ones");
    fuzz_mb_attr_tensor_f(&b, n, "value", 1, D(1), F(1.5f));
    fuzz_mb_init_i64(&b, "zero", 0, NULL, D(0));
    fuzz_mb_init_i64(&b, "one", 0, NULL, D(1));
    fuzz_mb_node(&b, "Range", "zero,sz,one", "range");
    fuzz_mb_output(&b, "ones", FUZZ_DT_FLOAT, -1, NULL, NULL);
    fuzz_mb_output(&b, "range", FUZZ_DT_INT64, -1, NULL, NULL);
    model_write(&b, "shape_range");

    /* A Reshape target from an input: the plan is dynamic. */
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 1, D(6), NULL);
    fuzz_mb_input(&b, "shape", FUZZ_DT_INT64, 1, D(2), NULL);
    fuzz_mb_node(&b, "Abs", "shape", "pos");
    fuzz_mb_init_i64(&b, "six", 1, D(1), D(6));
    fuzz_mb_node(&b, "Max", "pos,six", "dims");
    fuzz_mb_node(&b, "ConstantOfShape", "dims", "z");
    fuzz_mb_output(&b, "z", FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "dynamic_shape");

    /* Constant nodes in their forms, and folding of a constant subgraph. */
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 1, D(3), NULL);
    fuzz_mb_attr_tensor_f(&b, fuzz_mb_node(&b, "Constant", "", "c0"), "value", 1, D(3),
                          F(1, 2, 3));
    fuzz_mb_attr_f(&b, fuzz_mb_node(&b, "Constant", "", "c1"), "value_float", 2.0f);
    fuzz_mb_attr_ints(&b, fuzz_mb_node(&b, "Constant", "", "c2"), "value_ints", D(3), 1);
    fuzz_mb_node(&b, "Mul", "c0,c1", "c3");
    fuzz_mb_node(&b, "Reshape", "c3,c2", "c4");
    fuzz_mb_node(&b, "Add", "x,c4", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 1, D(3), NULL);
    model_write(&b, "constants_folded");
}

/* ---- nn and linear algebra -------------------------------------------------- */

static void seeds_nn(void)
{
    fuzz_mb_t b;
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 4, D(-1, 2, 5, 5), P("n", NULL, NULL, NULL));
    fuzz_mb_init_f(&b, "w", 4, D(3, 2, 3, 3), ramp(54, 0.1f));
    fuzz_mb_init_f(&b, "bias", 1, D(3), F(0.1f, -0.1f, 0.2f));
    Onnx__NodeProto *n = fuzz_mb_node(&b, "Conv", "x,w,bias", "c");
    fuzz_mb_attr_ints(&b, n, "pads", D(1, 1, 1, 1), 4);
    fuzz_mb_attr_ints(&b, n, "strides", D(2, 1), 2);
    fuzz_mb_init_f(&b, "scale", 1, D(3), F(1, 2, 3));
    fuzz_mb_init_f(&b, "shift", 1, D(3), F(0, 1, 0));
    fuzz_mb_init_f(&b, "mean", 1, D(3), F(0.5f, 0, -0.5f));
    fuzz_mb_init_f(&b, "var", 1, D(3), F(1, 2, 0.5f));
    fuzz_mb_node(&b, "BatchNormalization", "c,scale,shift,mean,var", "bn");
    fuzz_mb_node(&b, "Relu", "bn", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 4, D(-1, 3, 3, 5), P("n", NULL, NULL, NULL));
    model_write(&b, "conv_bn_relu");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 4, D(1, 4, 4, 4), NULL);
    fuzz_mb_init_f(&b, "w", 4, D(4, 1, 3, 3), ramp(36, 0.2f));
    n = fuzz_mb_node(&b, "Conv", "x,w", "dw");
    fuzz_mb_attr_i(&b, n, "group", 4);
    fuzz_mb_attr_ints(&b, n, "dilations", D(2, 2), 2);
    fuzz_mb_attr_s(&b, n, "auto_pad", "SAME_UPPER");
    fuzz_mb_init_f(&b, "wt", 4, D(4, 2, 2, 2), ramp(32, 0.1f));
    n = fuzz_mb_node(&b, "ConvTranspose", "dw,wt", "up");
    fuzz_mb_attr_ints(&b, n, "strides", D(2, 2), 2);
    fuzz_mb_attr_ints(&b, n, "output_padding", D(1, 0), 2);
    fuzz_mb_output(&b, "up", FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "conv_group_transpose");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 4, D(1, 2, 5, 5), NULL);
    n = fuzz_mb_node(&b, "MaxPool", "x", "mp");
    fuzz_mb_attr_ints(&b, n, "kernel_shape", D(2, 2), 2);
    fuzz_mb_attr_ints(&b, n, "strides", D(2, 2), 2);
    fuzz_mb_attr_i(&b, n, "ceil_mode", 1);
    n = fuzz_mb_node(&b, "AveragePool", "x", "ap");
    fuzz_mb_attr_ints(&b, n, "kernel_shape", D(3, 3), 2);
    fuzz_mb_attr_ints(&b, n, "pads", D(1, 1, 1, 1), 4);
    fuzz_mb_attr_i(&b, n, "count_include_pad", 1);
    fuzz_mb_node(&b, "GlobalAveragePool", "ap", "gap");
    fuzz_mb_node(&b, "GlobalMaxPool", "mp", "gmp");
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "LRN", "x", "lrn"), "size", 3);
    fuzz_mb_output(&b, "gap", FUZZ_DT_FLOAT, -1, NULL, NULL);
    fuzz_mb_output(&b, "gmp", FUZZ_DT_FLOAT, -1, NULL, NULL);
    fuzz_mb_output(&b, "lrn", FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "pools_lrn");

    fuzz_mb_init(&b, 8, 17);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 3, D(-1, 3, 4), P("n", NULL, NULL));
    fuzz_mb_init_f(&b, "g", 1, D(4), F(1, 1, 2, 2));
    fuzz_mb_init_f(&b, "beta", 1, D(4), F(0, 0.5f, 0, 0.5f));
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "LayerNormalization", "x,g,beta", "ln"), "axis", -1);
    fuzz_mb_init_f(&b, "s3", 1, D(3), F(1, 2, 3));
    fuzz_mb_init_f(&b, "b3", 1, D(3), F(0, 0, 1));
    fuzz_mb_node(&b, "InstanceNormalization", "ln,s3,b3", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 3, D(-1, 3, 4), P("n", NULL, NULL));
    model_write(&b, "layernorm_instancenorm");
}

static void seeds_linalg(void)
{
    fuzz_mb_t b;
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "a", FUZZ_DT_FLOAT, 3, D(2, -1, 3), P(NULL, "m", NULL));
    fuzz_mb_init_f(&b, "w", 2, D(3, 4), ramp(12, 0.25f));
    fuzz_mb_node(&b, "MatMul", "a,w", "mm");
    fuzz_mb_init_f(&b, "w2", 2, D(5, 4), ramp(20, 0.5f));
    fuzz_mb_init_f(&b, "c", 1, D(5), F(1, 2, 3, 4, 5));
    fuzz_mb_init_i64(&b, "flat", 1, D(2), D(-1, 4));
    fuzz_mb_node(&b, "Reshape", "mm,flat", "mm2");
    Onnx__NodeProto *n = fuzz_mb_node(&b, "Gemm", "mm2,w2,c", "gemm");
    fuzz_mb_attr_i(&b, n, "transB", 1);
    fuzz_mb_attr_f(&b, n, "alpha", 0.5f);
    fuzz_mb_attr_f(&b, n, "beta", 2.0f);
    fuzz_mb_attr_s(&b, fuzz_mb_node(&b, "Einsum", "gemm,gemm", "ein"), "equation", "ij,kj->ik");
    fuzz_mb_output(&b, "ein", FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "matmul_gemm_einsum");

    /* The demo mlp's shape in small: MatMul+Add, Relu, Softmax. */
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "input", FUZZ_DT_FLOAT, 2, D(-1, 8), P("batch", NULL));
    fuzz_mb_init_f(&b, "w1", 2, D(8, 6), ramp(48, 0.125f));
    fuzz_mb_init_f(&b, "b1", 1, D(6), ramp(6, 0.01f));
    fuzz_mb_init_f(&b, "w2", 2, D(6, 4), ramp(24, 0.25f));
    fuzz_mb_node(&b, "MatMul", "input,w1", "h");
    fuzz_mb_node(&b, "Add", "h,b1", "hb");
    fuzz_mb_node(&b, "Relu", "hb", "r");
    fuzz_mb_node(&b, "MatMul", "r,w2", "logits");
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Softmax", "logits", "probabilities"), "axis", -1);
    fuzz_mb_output(&b, "probabilities", FUZZ_DT_FLOAT, 2, D(-1, 4), P("batch", NULL));
    model_write(&b, "mlp_small");

    /* The erf GELU chain as PyTorch exports it (fused at load). */
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 2, D(2, 4), NULL);
    fuzz_mb_init_f(&b, "sqrt2", 0, NULL, F(1.4142135f));
    fuzz_mb_init_f(&b, "one", 0, NULL, F(1.0f));
    fuzz_mb_init_f(&b, "half", 0, NULL, F(0.5f));
    fuzz_mb_node(&b, "Div", "x,sqrt2", "d");
    fuzz_mb_node(&b, "Erf", "d", "e");
    fuzz_mb_node(&b, "Add", "e,one", "a");
    fuzz_mb_node(&b, "Mul", "x,a", "m");
    fuzz_mb_node(&b, "Mul", "m,half", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 2, D(2, 4), NULL);
    model_write(&b, "gelu_erf_chain");
}

static void seeds_misc(void)
{
    fuzz_mb_t b;
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 2, D(3, 5), NULL);
    fuzz_mb_init_i64(&b, "k", 1, D(1), D(2));
    Onnx__NodeProto *n = fuzz_mb_node(&b, "TopK", "x,k", "vals,idx");
    fuzz_mb_attr_i(&b, n, "largest", 0);
    fuzz_mb_init_i64(&b, "diag", 0, NULL, D(1));
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "Trilu", "x,diag", "tri"), "upper", 0);
    fuzz_mb_output(&b, "vals", FUZZ_DT_FLOAT, 2, D(3, 2), NULL);
    fuzz_mb_output(&b, "idx", FUZZ_DT_INT64, 2, D(3, 2), NULL);
    fuzz_mb_output(&b, "tri", FUZZ_DT_FLOAT, 2, D(3, 5), NULL);
    model_write(&b, "topk_trilu");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 4, D(1, 1, 2, 3), NULL);
    fuzz_mb_init_f(&b, "scales", 1, D(4), F(1, 1, 2, 1.5f));
    n = fuzz_mb_node(&b, "Resize", "x,,scales", "lin");
    fuzz_mb_attr_s(&b, n, "mode", "linear");
    fuzz_mb_attr_s(&b, n, "coordinate_transformation_mode", "align_corners");
    fuzz_mb_init_i64(&b, "sizes", 1, D(4), D(1, 1, 3, 5));
    n = fuzz_mb_node(&b, "Resize", "x,,,sizes", "near");
    fuzz_mb_attr_s(&b, n, "mode", "nearest");
    fuzz_mb_attr_s(&b, n, "nearest_mode", "floor");
    n = fuzz_mb_node(&b, "Resize", "x,,scales", "cubic");
    fuzz_mb_attr_s(&b, n, "mode", "cubic");
    fuzz_mb_output(&b, "lin", FUZZ_DT_FLOAT, -1, NULL, NULL);
    fuzz_mb_output(&b, "near", FUZZ_DT_FLOAT, -1, NULL, NULL);
    fuzz_mb_output(&b, "cubic", FUZZ_DT_FLOAT, -1, NULL, NULL);
    model_write(&b, "resize");

    /* Opset 6's binary broadcast attributes, and an old Softmax. */
    fuzz_mb_init(&b, 3, 6);
    fuzz_mb_input(&b, "a", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    fuzz_mb_init_f(&b, "b", 1, D(3), F(1, 2, 3));
    n = fuzz_mb_node(&b, "Add", "a,b", "s");
    fuzz_mb_attr_i(&b, n, "broadcast", 1);
    fuzz_mb_node(&b, "Softmax", "s", "y");
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    model_write(&b, "opset6_broadcast");
}

/* ---- control flow ------------------------------------------------------------- */

/* If with a nested If reading values two graphs up; Loop with a trip count,
 * a condition computed in the body, carried values and scan outputs; Scan
 * over axis 1 in reverse. */
static void seeds_control(void)
{
    fuzz_mb_t b;
    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "c", FUZZ_DT_BOOL, 0, NULL, NULL);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    Onnx__NodeProto *n = fuzz_mb_node(&b, "If", "c", "y");
    fuzz_mb_begin_g(&b, n, "then_branch");
    fuzz_mb_init_f(&b, "k", 1, D(3), F(1, 2, 3));
    fuzz_mb_node(&b, "Add", "x,k", "t");
    fuzz_mb_output(&b, "t", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    fuzz_mb_end_g(&b);
    fuzz_mb_begin_g(&b, n, "else_branch");
    fuzz_mb_attr_i(&b, fuzz_mb_node(&b, "ReduceSum", "x", "s"), "keepdims", 0);
    fuzz_mb_init_f(&b, "zero", 0, NULL, F(0));
    fuzz_mb_node(&b, "Greater", "s,zero", "g");
    Onnx__NodeProto *inner = fuzz_mb_node(&b, "If", "g", "e");
    fuzz_mb_begin_g(&b, inner, "then_branch");
    fuzz_mb_node(&b, "Neg", "x", "ng");
    fuzz_mb_output(&b, "ng", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    fuzz_mb_end_g(&b);
    fuzz_mb_begin_g(&b, inner, "else_branch");
    fuzz_mb_output(&b, "x", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    fuzz_mb_end_g(&b);
    fuzz_mb_output(&b, "e", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    fuzz_mb_end_g(&b);
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 2, D(2, 3), NULL);
    model_write(&b, "if_nested");

    fuzz_mb_init(&b, 8, 13);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 1, D(3), NULL);
    fuzz_mb_init_i64(&b, "M", 0, NULL, D(4));
    fuzz_mb_input(&b, "c0", FUZZ_DT_BOOL, 0, NULL, NULL);
    n = fuzz_mb_node(&b, "Loop", "M,c0,x", "last,scan,iters");
    fuzz_mb_begin_g(&b, n, "body");
    fuzz_mb_input(&b, "i", FUZZ_DT_INT64, 0, NULL, NULL);
    fuzz_mb_input(&b, "c_in", FUZZ_DT_BOOL, 0, NULL, NULL);
    fuzz_mb_input(&b, "v", FUZZ_DT_FLOAT, 1, D(3), NULL);
    fuzz_mb_init_i64(&b, "two", 0, NULL, D(2));
    fuzz_mb_node(&b, "Add", "v,x", "w");
    fuzz_mb_node(&b, "Less", "i,two", "c_out");
    fuzz_mb_node(&b, "Identity", "i", "it");
    fuzz_mb_output(&b, "c_out", FUZZ_DT_BOOL, 0, NULL, NULL);
    fuzz_mb_output(&b, "w", FUZZ_DT_FLOAT, 1, D(3), NULL);
    fuzz_mb_output(&b, "w", FUZZ_DT_FLOAT, 1, D(3), NULL);
    fuzz_mb_output(&b, "it", FUZZ_DT_INT64, 0, NULL, NULL);
    fuzz_mb_end_g(&b);
    fuzz_mb_output(&b, "last", FUZZ_DT_FLOAT, 1, D(3), NULL);
    fuzz_mb_output(&b, "scan", FUZZ_DT_FLOAT, 2, D(-1, 3), NULL);
    fuzz_mb_output(&b, "iters", FUZZ_DT_INT64, 1, D(-1), NULL);
    model_write(&b, "loop");

    fuzz_mb_init(&b, 8, 16);
    fuzz_mb_input(&b, "h0", FUZZ_DT_FLOAT, 1, D(2), NULL);
    fuzz_mb_input(&b, "x", FUZZ_DT_FLOAT, 2, D(2, 4), NULL);
    n = fuzz_mb_node(&b, "Scan", "h0,x", "h,ys");
    fuzz_mb_attr_i(&b, n, "num_scan_inputs", 1);
    fuzz_mb_attr_ints(&b, n, "scan_input_axes", D(1), 1);
    fuzz_mb_attr_ints(&b, n, "scan_input_directions", D(1), 1);
    fuzz_mb_attr_ints(&b, n, "scan_output_axes", D(-1), 1);
    fuzz_mb_begin_g(&b, n, "body");
    fuzz_mb_input(&b, "h_in", FUZZ_DT_FLOAT, 1, D(2), NULL);
    fuzz_mb_input(&b, "xt", FUZZ_DT_FLOAT, 1, D(2), NULL);
    fuzz_mb_node(&b, "Add", "h_in,xt", "h_out");
    fuzz_mb_node(&b, "Tanh", "h_out", "y");
    fuzz_mb_output(&b, "h_out", FUZZ_DT_FLOAT, 1, D(2), NULL);
    fuzz_mb_output(&b, "y", FUZZ_DT_FLOAT, 1, D(2), NULL);
    fuzz_mb_end_g(&b);
    fuzz_mb_output(&b, "h", FUZZ_DT_FLOAT, 1, D(2), NULL);
    fuzz_mb_output(&b, "ys", FUZZ_DT_FLOAT, 2, D(2, 4), NULL);
    model_write(&b, "scan");
}

/* ---- codec requests ---------------------------------------------------------- */

static void request_json(const char *name, const char *json)
{
    size_t n = strlen(json);
    char *buf = malloc(n + 1);
    if (!buf)
        die(name);
    buf[0] = 'J';
    memcpy(buf + 1, json, n);
    file_write("codec", name, buf, n + 1);
    free(buf);
}

/* 'B', the header's length (4 bytes, little-endian), the header, the
 * binary parts. */
static void request_binary(const char *name, const char *json, const void *bin, size_t bin_len)
{
    size_t n = strlen(json);
    uint8_t *buf = malloc(5 + n + bin_len);
    if (!buf)
        die(name);
    buf[0] = 'B';
    for (int i = 0; i < 4; i++)
        buf[1 + i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 5, json, n);
    memcpy(buf + 5 + n, bin, bin_len);
    file_write("codec", name, buf, 5 + n + bin_len);
    free(buf);
}

/* `tag` ('Z' gzip, 'D' deflate), then the JSON compressed so; with `cut`,
 * the stream's last `cut` bytes left off (a stream cut short). */
static void request_compressed(const char *name, char tag, const char *json, size_t cut)
{
    srv_buf_t z = {0};
    if (srv_buf_append(&z, &tag, 1) != 0 ||
        srv_deflate(tag == 'Z' ? SRV_ENC_GZIP : SRV_ENC_DEFLATE,
                    &(struct iovec){(void *)json, strlen(json)}, 1, &z) != 0 || z.len <= cut + 1)
        die(name);
    file_write("codec", name, z.data, z.len - cut);
    srv_buf_free(&z);
}

/* 'R', the model's letter, then `len` raw bytes. */
static void request_raw(const char *name, char model, const void *bytes, size_t len)
{
    uint8_t *buf = malloc(2 + len);
    if (!buf)
        die(name);
    buf[0] = 'R';
    buf[1] = (uint8_t)model;
    memcpy(buf + 2, bytes, len);
    file_write("codec", name, buf, 2 + len);
    free(buf);
}

static void seeds_codec(void)
{
    char json[8192];
    /* mlp: nested data for two rows of 64, and flat for one. */
    size_t at = (size_t)snprintf(json, sizeof json,
                                 "{\"model\":\"mlp\",\"id\":\"r1\",\"inputs\":[{\"name\":\"input\","
                                 "\"shape\":[2,64],\"datatype\":\"FP32\",\"data\":[");
    for (int r = 0; r < 2; r++) {
        at += (size_t)snprintf(json + at, sizeof json - at, "%s[", r ? "," : "");
        for (int i = 0; i < 64; i++)
            at += (size_t)snprintf(json + at, sizeof json - at, "%s%g", i ? "," : "",
                                   (double)((i * 5 + r) % 9 - 4) * 0.125);
        at += (size_t)snprintf(json + at, sizeof json - at, "]");
    }
    snprintf(json + at, sizeof json - at, "]}]}");
    request_json("mlp_nested.json", json);
    at = (size_t)snprintf(json, sizeof json,
                          "{\"model\":\"mlp\",\"version\":\"1\",\"inputs\":[{\"name\":\"input\","
                          "\"shape\":[1,64],\"datatype\":\"FP32\",\"data\":[");
    for (int i = 0; i < 64; i++)
        at += (size_t)snprintf(json + at, sizeof json - at, "%s%d", i ? "," : "", i % 3 - 1);
    snprintf(json + at, sizeof json - at,
             "]}],\"outputs\":[{\"name\":\"probabilities\",\"parameters\":{\"binary_data\":"
             "true}}]}");
    request_json("mlp_flat_binary_out.json", json);
    request_compressed("mlp_flat.gzip", 'Z', json, 0);
    request_compressed("mlp_flat.deflate", 'D', json, 0);
    request_compressed("mlp_flat_cut.gzip", 'Z', json, 9);
    /* Twice the bound of blanks at zlib's best level: 2 KiB that inflate
     * past it. */
    size_t blanks = (size_t)2 << 20;
    uLongf zlen = compressBound((uLong)blanks);
    char *bomb = malloc(blanks);
    unsigned char *z = malloc(1 + zlen);
    if (!bomb || !z)
        die("bomb.deflate");
    memset(bomb, ' ', blanks);
    z[0] = 'D';
    if (compress2(z + 1, &zlen, (const Bytef *)bomb, (uLong)blanks, 9) != Z_OK)
        die("bomb.deflate");
    file_write("codec", "bomb.deflate", z, 1 + zlen);
    free(z);
    free(bomb);
    float row[64];
    for (int i = 0; i < 64; i++)
        row[i] = (float)(i % 5) * 0.25f - 0.5f;
    request_raw("mlp_raw.bin", 'm', row, sizeof row);
    request_raw("pair_raw.bin", 'p', row, 12);
    request_binary("mlp_binary_in.bin",
                   "{\"model\":\"mlp\",\"inputs\":[{\"name\":\"input\",\"shape\":[1,64],"
                   "\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":256}}],"
                   "\"parameters\":{\"binary_data_output\":true}}",
                   row, sizeof row);

    /* Triton's system shared memory: an input in a region (parsed, not
     * run: the target registers none), and an output in one (run, its
     * parameters encoded). */
    request_json("mlp_shm_in.json",
                 "{\"model\":\"mlp\",\"inputs\":[{\"name\":\"input\",\"shape\":[1,64],"
                 "\"datatype\":\"FP32\",\"parameters\":{\"shared_memory_region\":\"in\","
                 "\"shared_memory_offset\":64,\"shared_memory_byte_size\":256}}]}");
    request_json("pair_shm_out.json",
                 "{\"model\":\"pair\",\"inputs\":[{\"name\":\"a\",\"shape\":[1,3],"
                 "\"datatype\":\"FP32\",\"data\":[1,2,3]},{\"name\":\"b\",\"shape\":[2],"
                 "\"datatype\":\"INT64\",\"data\":[7,8]}],\"outputs\":[{\"name\":\"sum\","
                 "\"parameters\":{\"shared_memory_region\":\"out\",\"shared_memory_byte_size\":"
                 "12}},{\"name\":\"ids\"}]}");

    /* pair: two inputs, one binary; requested outputs in both forms. */
    request_json("pair.json",
                 "{\"model\":\"pair\",\"id\":\"p\\\"1\",\"inputs\":[{\"name\":\"a\",\"shape\":"
                 "[2,3],\"datatype\":\"FP32\",\"data\":[1,2,3,4.5,-5e-3,6]},{\"name\":\"b\","
                 "\"shape\":[2],\"datatype\":\"INT64\",\"data\":[9007199254740991,-7]}],"
                 "\"outputs\":[{\"name\":\"ids\"},{\"name\":\"sum\",\"parameters\":"
                 "{\"binary_data\":false}}],\"parameters\":{\"binary_data_output\":true}}");
    const float a[3] = {1.0f, -2.0f, 0.5f};
    request_binary("pair_binary.bin",
                   "{\"model\":\"pair\",\"inputs\":[{\"name\":\"a\",\"shape\":[1,3],"
                   "\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":12}},"
                   "{\"name\":\"b\",\"shape\":[2],\"datatype\":\"INT64\",\"data\":[4,5]}],"
                   "\"outputs\":[{\"name\":\"sum\",\"parameters\":{\"binary_data\":true}}]}",
                   a, sizeof a);

    /* echo: every datatype, in JSON and in binary. */
    static const struct {
        const char *dt, *data;
        size_t size;
    } types[] = {
        {"BOOL", "[true,false,true]", 1},   {"UINT8", "[0,7,255]", 1},
        {"INT8", "[-128,0,127]", 1},        {"UINT16", "[0,1,65535]", 2},
        {"INT16", "[-32768,2,32767]", 2},   {"UINT32", "[0,3,4294967295]", 4},
        {"INT32", "[-2147483648,0,7]", 4},  {"UINT64", "[0,1,9007199254740991]", 8},
        {"INT64", "[-9007199254740991,0,5]", 8}, {"FP16", "[0.5,-2,65504]", 2},
        {"BF16", "[1.5,-0.25,3e38]", 2},    {"FP32", "[1e-45,-3.4e38,0.1]", 4},
        {"FP64", "[1e-300,2.5,-1e308]", 8},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char name[64];
        snprintf(json, sizeof json,
                 "{\"inputs\":[{\"name\":\"x\",\"shape\":[3],\"datatype\":\"%s\",\"data\":%s}]}",
                 types[i].dt, types[i].data);
        snprintf(name, sizeof name, "echo_%s.json", types[i].dt);
        request_json(name, json);
        uint8_t bin[24];
        for (size_t k = 0; k < sizeof bin; k++)
            bin[k] = strcmp(types[i].dt, "BOOL") == 0 ? (uint8_t)(k & 1) : (uint8_t)(k * 29 + i);
        snprintf(json, sizeof json,
                 "{\"inputs\":[{\"name\":\"x\",\"shape\":[3,1],\"datatype\":\"%s\","
                 "\"parameters\":{\"binary_data_size\":%zu}}],\"outputs\":[{\"name\":\"y\","
                 "\"parameters\":{\"binary_data\":true}}]}",
                 types[i].dt, 3 * types[i].size);
        snprintf(name, sizeof name, "echo_%s.bin", types[i].dt);
        request_binary(name, json, bin, 3 * types[i].size);
    }
    request_json("echo_scalar_nested.json",
                 "{\"id\":\"\\u00e9\\n\",\"inputs\":[{\"name\":\"x\",\"shape\":[],\"datatype\":"
                 "\"FP32\",\"data\":[2.5]}],\"parameters\":{\"binary_data_output\":false}}");
    request_json("echo_rank3.json",
                 "{\"inputs\":[{\"name\":\"x\",\"shape\":[2,2,1],\"datatype\":\"INT32\","
                 "\"data\":[[[1],[2]],[[3],[4]]]}]}");
    request_json("echo_empty.json",
                 "{\"inputs\":[{\"name\":\"x\",\"shape\":[0,4],\"datatype\":\"FP32\","
                 "\"data\":[]}]}");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_fuzz_seeds DIR   (writes DIR/onnx, DIR/run, DIR/codec)\n");
        return 2;
    }
    out_root = argv[1];
    dir_make(out_root);
    seeds_unary();
    seeds_binary();
    seeds_reduce();
    seeds_shape();
    seeds_nn();
    seeds_linalg();
    seeds_misc();
    seeds_control();
    seeds_codec();
    return 0;
}
