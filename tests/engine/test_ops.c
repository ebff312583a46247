/* test_ops.c -- tests of engine/ops.c and the tables engine/cpu/kernels.c
 * and engine/cuda/kernels.cu generate from engine/ops/list.h: every listed
 * op has its definition, its type string and each device's kernel (or
 * NULL) at its id. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/kernels.h"
#include "engine/op.h"

/* What list.h says of one op, with the names it implies, taken here
 * independently of the tables under test. */
typedef struct listed_op {
    eng_op_id_t id;
    const char *type;
    const eng_op_def_t *def;
    const eng_kernel_t *cpu;  /* eng_cpu_<OpType>, NULL when marked N */
    bool cpu_y;
    const eng_kernel_t *cuda; /* eng_cuda_<OpType> in a CUDA build, else NULL */
    bool cuda_y;
} listed_op_t;

#define MARK_Y true
#define MARK_N false
#if FS_HAVE_CUDA
#define CUDA_REF_(mark, op) ENG_KERNEL_REF_##mark(eng_cuda_##op)
#else
#define CUDA_REF_(mark, op) NULL
#endif
#define LISTED_(op, cpu, cuda)                                                                     \
    {ENG_OP_##op, #op, &eng_op_##op, ENG_KERNEL_REF_##cpu(eng_cpu_##op), MARK_##cpu,              \
     CUDA_REF_(cuda, op), MARK_##cuda},
static const listed_op_t listed[] = {ENG_OPS(LISTED_)};
#undef LISTED_

Test(engine_ops, every_listed_op_has_its_definition_at_its_id)
{
    cr_assert_eq(sizeof listed / sizeof listed[0], (size_t)ENG_OP_COUNT);
    for (int i = 0; i < ENG_OP_COUNT; i++) {
        const listed_op_t *o = &listed[i];
        cr_expect_eq((int)o->id, i, "%s: id %d at list position %d", o->type, (int)o->id, i);
        cr_expect_eq(o->def->id, o->id, "eng_op_%s.id is %d, not ENG_OP_%s (%d)", o->type,
                     (int)o->def->id, o->type, (int)o->id);
        cr_expect_eq(eng_op_defs[o->id], o->def, "eng_op_defs[ENG_OP_%s] is not eng_op_%s",
                     o->type, o->type);
        cr_expect(o->def->infer != NULL, "%s has no infer", o->type);
    }
}

Test(engine_ops, every_op_type_round_trips_through_eng_op_find)
{
    for (int i = 0; i < ENG_OP_COUNT; i++) {
        const listed_op_t *o = &listed[i];
        const char *type = eng_op_type(o->id);
        cr_assert(type != NULL);
        cr_expect_str_eq(type, o->type);
        if (eng_op_is_internal(o->id))
            cr_expect_null(eng_op_find(type), "a model may name the internal op %s", type);
        else
            cr_expect_eq(eng_op_find(type), o->def, "eng_op_find(\"%s\") is not eng_op_%s", type,
                         o->type);
    }
    cr_expect_null(eng_op_find("NoSuchOp"));
    cr_expect_null(eng_op_find(""));
    cr_expect_null(eng_backend_kernel_find(eng_backend_get(ENG_DEVICE_CPU), "NoSuchOp"));
}

Test(engine_ops, cpu_table_holds_a_kernel_exactly_where_the_list_says_y)
{
    for (int i = 0; i < ENG_OP_COUNT; i++) {
        const listed_op_t *o = &listed[i];
        const eng_kernel_t *k = eng_cpu_kernels[o->id];
        cr_expect_eq(k != NULL, o->cpu_y, "%s: CPU kernel %s, list says %s", o->type,
                     k ? "present" : "NULL", o->cpu_y ? "Y" : "N");
        cr_expect_eq(k, o->cpu, "eng_cpu_kernels[ENG_OP_%s] is not eng_cpu_%s", o->type, o->type);
        cr_expect(!k || k->run, "eng_cpu_%s has no run", o->type);
        const eng_backend_i *cpu = eng_backend_get(ENG_DEVICE_CPU);
        cr_expect_eq(eng_backend_kernel_find(cpu, o->type), eng_op_is_internal(o->id) ? NULL : k,
                     "eng_backend_kernel_find(cpu, \"%s\")", o->type);
        cr_expect_eq(eng_backend_kernel(cpu, o->def), k, "eng_backend_kernel(cpu, eng_op_%s)",
                     o->type);
    }
}

Test(engine_ops, cuda_table_holds_a_kernel_exactly_where_the_list_says_y)
{
    for (int i = 0; i < ENG_OP_COUNT; i++) {
        const listed_op_t *o = &listed[i];
        const eng_backend_i *cuda = eng_backend_get(ENG_DEVICE_CUDA);
        const eng_kernel_t *k = cuda ? eng_backend_kernel(cuda, o->def) : NULL;
#if FS_HAVE_CUDA
        cr_expect_eq(k, eng_cuda_kernels[o->id], "eng_backend_kernel(cuda, eng_op_%s)", o->type);
        cr_expect_eq(eng_backend_kernel_find(cuda, o->type), eng_op_is_internal(o->id) ? NULL : k,
                     "eng_backend_kernel_find(cuda, \"%s\")", o->type);
        cr_expect_eq(k != NULL, o->cuda_y, "%s: CUDA kernel %s, list says %s", o->type,
                     k ? "present" : "NULL", o->cuda_y ? "Y" : "N");
        cr_expect_eq(k, o->cuda, "eng_cuda_kernels[ENG_OP_%s] is not eng_cuda_%s", o->type,
                     o->type);
        cr_expect(!k || k->run, "eng_cuda_%s has no run", o->type);
#else
        cr_expect_null(k, "a build without CUDA finds a CUDA kernel for %s", o->type);
#endif
    }
}
