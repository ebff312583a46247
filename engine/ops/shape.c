/* shape.c -- definitions (validation, dtype and shape inference) of the shape ops. */
#include "engine/op.h"

const eng_op_def_t *const eng_ops_shape[] = {NULL};
