/* unary.c -- definitions (validation, dtype and shape inference) of the unary ops. */
#include "engine/op.h"

const eng_op_def_t *const eng_ops_unary[] = {NULL};
