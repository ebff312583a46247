/* onnx_attr.c -- a node's ONNX attributes to eng_attr_t: every type the
 * engine holds, copied into the graph's pool, a slot for each subgraph of
 * a control-flow node (the loader fills it), and a note of the ones it
 * does not hold (other subgraphs, sparse tensors, type protos, tensor
 * lists).
 *
 * Types are copied as the model gives them. For a default-domain op of
 * engine/ops/list.h the loader has checked them against the op's ONNX
 * schema first (engine/onnx_schema.c), so every attribute copied for such
 * a node has its schema's type, and the typed getters of engine/graph.c
 * never meet one of another type there. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "engine/onnx_impl.h"

eng_attr_type_t onnx_attr_type(const Onnx__AttributeProto *ap)
{
    if (ap->has_type)
        return (eng_attr_type_t)ap->type;
    /* Before IR 2 the type was implied by the field in use: the first
     * field of this table that is set. */
    const struct {
        bool used;
        eng_attr_type_t type;
    } implied[] = {
        {ap->t != NULL, ENG_ATTR_TENSOR},      {ap->g != NULL, ENG_ATTR_GRAPH},
        {ap->n_floats > 0, ENG_ATTR_FLOATS},   {ap->n_ints > 0, ENG_ATTR_INTS},
        {ap->n_strings > 0, ENG_ATTR_STRINGS}, {ap->has_f, ENG_ATTR_FLOAT},
        {ap->has_i, ENG_ATTR_INT},             {ap->has_s, ENG_ATTR_STRING},
    };
    for (size_t k = 0; k < sizeof implied / sizeof *implied; k++)
        if (implied[k].used)
            return implied[k].type;
    return ENG_ATTR_UNDEFINED;
}

/* A copy in the pool of the n elements of `size` bytes at src (which may be
 * NULL when n is 0), never NULL for n == 0; NULL when out of memory. */
static void *pool_memdup(onnx_pool_t *p, const void *src, size_t n, size_t size)
{
    void *v = onnx_pool_alloc(p, n * size);
    if (v && n)
        memcpy(v, src, n * size);
    return v;
}

/* Fills a with the value of ap (a->type set, one the engine holds); lists
 * and tensors are copied into the pool, lists never left NULL. 0, FS_ENOMEM
 * (no message), FS_ENOTSUP (a tensor the engine cannot hold, such as
 * strings: the message names the attribute), or the error of a corrupt
 * tensor or its external file. */
static int attr_fill(onnx_pool_t *p, const char *dir, eng_attr_t *a, const Onnx__AttributeProto *ap)
{
    switch (a->type) {
    case ENG_ATTR_FLOAT:
        a->f = ap->f;
        return 0;
    case ENG_ATTR_INT:
        a->i = ap->i;
        return 0;
    case ENG_ATTR_STRING:
        a->s_len = ap->s.len;
        return (a->s = onnx_pool_strndup(p, (const char *)ap->s.data, ap->s.len)) ? 0 : FS_ENOMEM;
    case ENG_ATTR_FLOATS:
        a->n = ap->n_floats;
        a->floats = pool_memdup(p, ap->floats, ap->n_floats, sizeof *a->floats);
        return a->floats ? 0 : FS_ENOMEM;
    case ENG_ATTR_INTS:
        a->n = ap->n_ints;
        a->ints = pool_memdup(p, ap->ints, ap->n_ints, sizeof *a->ints);
        return a->ints ? 0 : FS_ENOMEM;
    case ENG_ATTR_STRINGS: {
        char **ss = onnx_pool_alloc(p, ap->n_strings * sizeof *ss);
        if (!ss)
            return FS_ENOMEM;
        for (size_t k = 0; k < ap->n_strings; k++)
            if (!(ss[k] = onnx_pool_strndup(p, (const char *)ap->strings[k].data,
                                            ap->strings[k].len)))
                return FS_ENOMEM;
        a->n = ap->n_strings;
        a->strings = (const char *const *)ss;
        return 0;
    }
    case ENG_ATTR_TENSOR: {
        char label[96];
        snprintf(label, sizeof label, "attribute '%.64s'", a->name);
        if (!ap->t)
            return fs_err(FS_EPARSE, "%s is of type TENSOR but holds no tensor", label);
        onnx_tensor_info_t info;
        int rc = onnx_tensor_info(ap->t, label, &info);
        if (rc != 0)
            return rc;
        a->t.dtype = info.dtype;
        a->t.shape = info.shape;
        if (!(a->t.data = onnx_pool_alloc(p, info.bytes)))
            return FS_ENOMEM;
        return onnx_tensor_read(ap->t, &info, label, dir, a->t.data);
    }
    case ENG_ATTR_GRAPH:
        return 0; /* a slot: the loader loads the subgraph into a->g */
    default:
        return 0; /* the caller never passes the types it does not hold */
    }
}

/* Notes the first thing about the node the engine cannot hold. */
static int note_problem(onnx_pool_t *p, onnx_attrs_t *out, const char *why, const char *nl)
{
    if (!out->problem && !(out->problem = onnx_pool_strdup(p, why)))
        return fs_err(FS_ENOMEM, "out of memory loading %s", nl);
    return 0;
}

int onnx_attrs_load(onnx_pool_t *p, const Onnx__NodeProto *np, const char *nl, const char *dir,
                    bool graphs, onnx_attrs_t *out)
{
    onnx_attrs_t r = {.attrs = onnx_pool_alloc(p, (np->n_attribute + 1) * sizeof *r.attrs)};
    if (!r.attrs)
        return fs_err(FS_ENOMEM, "out of memory for the attributes of %s", nl);
    const char *op = np->op_type;
    char why[ONNX_REASON_MAX];
    int rc = 0;
    for (size_t i = 0; i < np->n_attribute && rc == 0; i++) {
        const Onnx__AttributeProto *ap = np->attribute[i];
        if (!ap->name || !ap->name[0])
            return fs_err(FS_EINVAL, "%s (%s) has an attribute without a name", nl, op);
        eng_attr_type_t t = onnx_attr_type(ap);
        if ((t == ENG_ATTR_GRAPH && !graphs) || t == ENG_ATTR_GRAPHS) {
            if (!r.subgraph && !(r.subgraph = onnx_pool_strdup(p, ap->name)))
                return fs_err(FS_ENOMEM, "out of memory loading %s", nl);
            continue;
        }
        if (ap->ref_attr_name && ap->ref_attr_name[0]) {
            snprintf(why, sizeof why, "attribute '%.64s' refers to function attribute '%.48s' "
                     "(valid only inside functions)", ap->name, ap->ref_attr_name);
            rc = note_problem(p, &r, why, nl);
            continue;
        }
        if ((t < ENG_ATTR_FLOAT || t > ENG_ATTR_STRINGS) && t != ENG_ATTR_GRAPH) {
            snprintf(why, sizeof why, "attribute '%.64s' has type %s, which is not supported",
                     ap->name, eng_attr_type_name(t));
            rc = note_problem(p, &r, why, nl);
            continue;
        }
        /* A slot a rejected tensor half filled is reused: start clean. */
        eng_attr_t *a = memset(&r.attrs[r.n_attrs], 0, sizeof *r.attrs);
        a->type = t;
        if (!(a->name = onnx_pool_strdup(p, ap->name)))
            return fs_err(FS_ENOMEM, "out of memory loading %s", nl);
        rc = attr_fill(p, dir, a, ap);
        if (rc == FS_ENOTSUP)
            rc = note_problem(p, &r, fs_errmsg(), nl);
        else if (rc == FS_ENOMEM)
            return fs_err(FS_ENOMEM, "out of memory for attribute '%.64s' of %s", ap->name, nl);
        else if (rc != 0)
            return fs_err(rc, "%s (%s): %s", nl, op, fs_errmsg());
        else
            r.n_attrs++;
    }
    if (rc == 0)
        *out = r;
    return rc;
}
