/* list.h -- every op flatserve runs, once: one X-macro per family.
 *
 * An entry is X(OpType, CPU, CUDA). OpType is the ONNX op type, written as
 * the ONNX docs spell it, and it names everything generated for the op
 * (mixed case, so that no name is a C++ alternative token such as `not`):
 *  - its id, ENG_OP_<OpType> (eng_op_id_t, below), and its type string,
 *    #OpType;
 *  - its definition, eng_op_<OpType> (an eng_op_def_t in engine/ops/<family>.c);
 *  - each device's kernel, eng_cpu_<OpType> (engine/cpu/) and
 *    eng_cuda_<OpType> (engine/cuda/).
 * CPU and CUDA say whether that device has a kernel: Y, or N when it lacks
 * one (the device's table then holds NULL there, and a plan that needs the
 * kernel is refused naming the node). Every op has a definition.
 *
 * Adding an op: its entry here, its definition, its kernels. The tables
 * (engine/ops.c, engine/cpu/kernels.c, engine/cuda/kernels.cu) are
 * generated from these lists and need no edit; the op's ONNX schema table
 * (engine/ops/schema.inc) is generated from them by
 * `python3 tools/gen_op_schema.py`, to be run again. */
#ifndef FS_ENGINE_OPS_LIST_H
#define FS_ENGINE_OPS_LIST_H

#define ENG_OPS_UNARY(X)                                                     \
    X(Abs, Y, Y)                                                              \
    X(Acos, Y, Y)                                                             \
    X(Acosh, Y, Y)                                                            \
    X(Asin, Y, Y)                                                             \
    X(Asinh, Y, Y)                                                            \
    X(Atan, Y, Y)                                                             \
    X(Atanh, Y, Y)                                                            \
    X(Ceil, Y, Y)                                                             \
    X(Celu, Y, Y)                                                             \
    X(Cos, Y, Y)                                                              \
    X(Cosh, Y, Y)                                                             \
    X(Elu, Y, Y)                                                              \
    X(Erf, Y, Y)                                                              \
    X(Exp, Y, Y)                                                              \
    X(Floor, Y, Y)                                                            \
    X(Gelu, Y, Y)                                                             \
    X(HardSigmoid, Y, Y)                                                      \
    X(HardSwish, Y, Y)                                                        \
    X(IsInf, Y, Y)                                                            \
    X(IsNaN, Y, Y)                                                            \
    X(LeakyRelu, Y, Y)                                                        \
    X(Log, Y, Y)                                                              \
    X(Mish, Y, Y)                                                             \
    X(Neg, Y, Y)                                                              \
    X(Not, Y, Y)                                                              \
    X(BitwiseNot, Y, Y)                                                       \
    X(Reciprocal, Y, Y)                                                       \
    X(Relu, Y, Y)                                                             \
    X(Round, Y, Y)                                                            \
    X(Selu, Y, Y)                                                             \
    X(Shrink, Y, Y)                                                           \
    X(Sigmoid, Y, Y)                                                          \
    X(Sign, Y, Y)                                                             \
    X(Sin, Y, Y)                                                              \
    X(Sinh, Y, Y)                                                             \
    X(Softplus, Y, Y)                                                         \
    X(Softsign, Y, Y)                                                         \
    X(Sqrt, Y, Y)                                                             \
    X(Swish, Y, Y)                                                            \
    X(Tan, Y, Y)                                                              \
    X(Tanh, Y, Y)                                                             \
    X(ThresholdedRelu, Y, Y)                                                  \
    X(Cast, Y, Y)                                                             \
    X(CastLike, Y, Y)                                                         \
    X(Clip, Y, Y)                                                             \
    X(Identity, Y, Y)                                                         \
    X(Dropout, Y, Y)

#define ENG_OPS_BINARY(X)                                                    \
    X(Add, Y, Y)                                                              \
    X(Sub, Y, Y)                                                              \
    X(Mul, Y, Y)                                                              \
    X(Div, Y, Y)                                                              \
    X(Pow, Y, Y)                                                              \
    X(Mod, Y, Y)                                                              \
    X(And, Y, Y)                                                              \
    X(Or, Y, Y)                                                               \
    X(Xor, Y, Y)                                                              \
    X(Equal, Y, Y)                                                            \
    X(Greater, Y, Y)                                                          \
    X(GreaterOrEqual, Y, Y)                                                   \
    X(Less, Y, Y)                                                             \
    X(LessOrEqual, Y, Y)                                                      \
    X(PRelu, Y, Y)                                                            \
    X(Where, Y, Y)                                                            \
    X(Max, Y, Y)                                                              \
    X(Min, Y, Y)                                                              \
    X(Mean, Y, Y)                                                             \
    X(Sum, Y, Y)                                                              \
    X(BitwiseAnd, Y, Y)                                                       \
    X(BitwiseOr, Y, Y)                                                        \
    X(BitwiseXor, Y, Y)                                                       \
    X(BitShift, Y, Y)

#define ENG_OPS_REDUCE(X)                                                    \
    X(ReduceL1, Y, Y)                                                         \
    X(ReduceL2, Y, Y)                                                         \
    X(ReduceLogSum, Y, Y)                                                     \
    X(ReduceLogSumExp, Y, Y)                                                  \
    X(ReduceMax, Y, Y)                                                        \
    X(ReduceMean, Y, Y)                                                       \
    X(ReduceMin, Y, Y)                                                        \
    X(ReduceProd, Y, Y)                                                       \
    X(ReduceSum, Y, Y)                                                        \
    X(ReduceSumSquare, Y, Y)                                                  \
    X(ArgMax, Y, Y)                                                           \
    X(ArgMin, Y, Y)                                                           \
    X(Softmax, Y, Y)                                                          \
    X(LogSoftmax, Y, Y)                                                       \
    X(Hardmax, Y, Y)                                                          \
    X(CumSum, Y, Y)                                                           \
    X(CumProd, Y, Y)

#define ENG_OPS_SHAPE(X)                                                     \
    X(Reshape, Y, Y)                                                          \
    X(Flatten, Y, Y)                                                          \
    X(Squeeze, Y, Y)                                                          \
    X(Unsqueeze, Y, Y)                                                        \
    X(Transpose, Y, Y)                                                        \
    X(Concat, Y, Y)                                                           \
    X(Split, Y, Y)                                                            \
    X(Slice, Y, Y)                                                            \
    X(Gather, Y, Y)                                                           \
    X(GatherElements, Y, Y)                                                   \
    X(GatherND, Y, Y)                                                         \
    X(Expand, Y, Y)                                                           \
    X(Tile, Y, Y)                                                             \
    X(Pad, Y, Y)                                                              \
    X(DepthToSpace, Y, Y)                                                     \
    X(SpaceToDepth, Y, Y)                                                     \
    X(Shape, Y, Y)                                                            \
    X(Size, Y, Y)                                                             \
    X(ConstantOfShape, Y, Y)                                                  \
    X(Range, Y, Y)                                                            \
    X(Constant, Y, Y)                                                         \
    X(BitCast, Y, Y)

#define ENG_OPS_NN(X)                                                        \
    X(Conv, Y, Y)                                                             \
    X(ConvTranspose, Y, Y)                                                    \
    X(AveragePool, Y, Y)                                                      \
    X(MaxPool, Y, Y)                                                          \
    X(GlobalAveragePool, Y, Y)                                                \
    X(GlobalMaxPool, Y, Y)                                                    \
    X(LpPool, Y, Y)                                                           \
    X(GlobalLpPool, Y, Y)                                                     \
    X(BatchNormalization, Y, Y)                                               \
    X(InstanceNormalization, Y, Y)                                            \
    X(LayerNormalization, Y, Y)                                               \
    X(RMSNormalization, Y, Y)                                                 \
    X(LRN, Y, Y)                                                              \
    X(LpNormalization, Y, Y)                                                  \
    X(MeanVarianceNormalization, Y, Y)                                        \
    X(GroupNormalization, Y, Y)                                               \
    X(NegativeLogLikelihoodLoss, Y, Y)                                        \
    X(SoftmaxCrossEntropyLoss, Y, Y)

#define ENG_OPS_RNN(X)                                                       \
    X(RNN, Y, Y)                                                              \
    X(GRU, Y, Y)                                                              \
    X(LSTM, Y, Y)

#define ENG_OPS_LINALG(X)                                                    \
    X(MatMul, Y, Y)                                                           \
    X(Gemm, Y, Y)                                                             \
    X(Einsum, Y, Y)                                                           \
    X(Det, Y, Y)

#define ENG_OPS_MISC(X)                                                      \
    X(TopK, Y, Y)                                                             \
    X(Trilu, Y, Y)                                                            \
    X(Resize, Y, Y)                                                           \
    X(Upsample, Y, Y)

#define ENG_OPS_STATEFUL(X)                                                  \
    X(CausalConvWithState, Y, Y)                                              \
    X(LinearAttention, Y, Y)

/* The transformer-block ops (engine/ops/attention.c). */
#define ENG_OPS_ATTENTION(X)                                                 \
    X(Attention, Y, Y)                                                        \
    X(RotaryEmbedding, Y, Y)                                                  \
    X(SwiGLU, Y, Y)

#define ENG_OPS_QUANT(X)                                                     \
    X(QuantizeLinear, Y, Y)                                                   \
    X(DequantizeLinear, Y, Y)                                                 \
    X(DynamicQuantizeLinear, Y, Y)                                            \
    X(MatMulInteger, Y, Y)                                                    \
    X(QLinearMatMul, Y, Y)                                                    \
    X(ConvInteger, Y, Y)                                                      \
    X(QLinearConv, Y, Y)

#define ENG_OPS_SPATIAL(X)                                                   \
    X(GridSample, Y, Y)                                                       \
    X(AffineGrid, Y, Y)                                                       \
    X(RoiAlign, Y, Y)                                                         \
    X(MaxRoiPool, Y, Y)                                                       \
    X(Col2Im, Y, Y)                                                           \
    X(MaxUnpool, Y, Y)                                                        \
    X(DeformConv, Y, Y)                                                       \
    X(NonMaxSuppression, Y, Y)

#define ENG_OPS_SIGNAL(X)                                                    \
    X(DFT, Y, Y)                                                              \
    X(STFT, Y, Y)                                                             \
    X(HannWindow, Y, Y)                                                       \
    X(HammingWindow, Y, Y)                                                    \
    X(BlackmanWindow, Y, Y)                                                   \
    X(MelWeightMatrix, Y, Y)

/* Scatters, one-hot and identity matrices, sequence reversal, center
 * crop/pad (engine/ops/index.c), and the ops whose output shapes depend on
 * their input values (engine/ops/select.c). */
#define ENG_OPS_INDEX(X)                                                     \
    X(ScatterND, Y, Y)                                                        \
    X(ScatterElements, Y, Y)                                                  \
    X(Scatter, Y, Y)                                                          \
    X(TensorScatter, Y, Y)                                                    \
    X(OneHot, Y, Y)                                                           \
    X(EyeLike, Y, Y)                                                          \
    X(ReverseSequence, Y, Y)                                                  \
    X(CenterCropPad, Y, Y)                                                    \
    X(Compress, Y, Y)                                                         \
    X(NonZero, Y, Y)                                                          \
    X(Unique, Y, Y)

/* Control flow: ops that run subgraphs (eng_op_is_control). No device has
 * a kernel for them (N): the dynamic executor runs their subgraphs through
 * the kernels of the ops inside (engine/exec_control.c). */
#define ENG_OPS_CONTROL(X)                                                   \
    X(If, N, N)                                                               \
    X(Loop, N, N)                                                             \
    X(Scan, N, N)

/* Engine-internal ops: written into the graph by load-time rewrites only,
 * never read from a model. They have no ONNX schema, eng_op_find does not
 * find them (a model node naming one is refused as an op the engine does
 * not run), and their ids come after every ONNX op's (eng_op_is_internal).
 * FusedElementwise runs a chain of element-wise ops as one program
 * (engine/fuse_chain.c, engine/ew_program.h). */
#define ENG_OPS_INTERNAL(X)                                                  \
    X(FusedElementwise, Y, Y)

/* The families, in id order: F(family, LIST). */
#define ENG_OP_FAMILIES(F)                                                        \
    F(unary, ENG_OPS_UNARY)                                                       \
    F(binary, ENG_OPS_BINARY)                                                     \
    F(reduce, ENG_OPS_REDUCE)                                                     \
    F(shape, ENG_OPS_SHAPE)                                                       \
    F(nn, ENG_OPS_NN)                                                             \
    F(rnn, ENG_OPS_RNN)                                                           \
    F(linalg, ENG_OPS_LINALG)                                                     \
    F(misc, ENG_OPS_MISC)                                                         \
    F(stateful, ENG_OPS_STATEFUL)                                                 \
    F(attention, ENG_OPS_ATTENTION)                                               \
    F(quant, ENG_OPS_QUANT)                                                       \
    F(spatial, ENG_OPS_SPATIAL)                                                   \
    F(signal, ENG_OPS_SIGNAL)                                                     \
    F(index, ENG_OPS_INDEX)                                                       \
    F(control, ENG_OPS_CONTROL)                                                   \
    F(internal, ENG_OPS_INTERNAL)

/* Every op, family after family (one family a line, as ENG_OP_FAMILIES). */
#define ENG_OPS(X)                                                                \
    ENG_OPS_UNARY(X)                                                              \
    ENG_OPS_BINARY(X)                                                             \
    ENG_OPS_REDUCE(X)                                                             \
    ENG_OPS_SHAPE(X)                                                              \
    ENG_OPS_NN(X)                                                                 \
    ENG_OPS_RNN(X)                                                                \
    ENG_OPS_LINALG(X)                                                             \
    ENG_OPS_MISC(X)                                                               \
    ENG_OPS_STATEFUL(X)                                                           \
    ENG_OPS_ATTENTION(X)                                                          \
    ENG_OPS_QUANT(X)                                                              \
    ENG_OPS_SPATIAL(X)                                                            \
    ENG_OPS_SIGNAL(X)                                                             \
    ENG_OPS_INDEX(X)                                                              \
    ENG_OPS_CONTROL(X)                                                            \
    ENG_OPS_INTERNAL(X)

/* An op's id: its index in ENG_OPS, and in every device's kernel table.
 * The internal ops' ids start at ENG_OP_INTERNAL_FIRST. */
#define ENG_OP_ID_(op, cpu, cuda) ENG_OP_##op,
typedef enum eng_op_id { ENG_OPS(ENG_OP_ID_) ENG_OP_COUNT } eng_op_id_t;
#define ENG_OP_INTERNAL_COUNT_(op, cpu, cuda) +1
#define ENG_OP_INTERNAL_FIRST ((int)ENG_OP_COUNT - (0 ENG_OPS_INTERNAL(ENG_OP_INTERNAL_COUNT_)))
#undef ENG_OP_ID_

#endif
