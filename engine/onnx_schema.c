/* onnx_schema.c -- a node of a list.h op against the op's ONNX schema, at
 * load: what ONNX's checker (OpSchema::Verify) checks, and one thing more.
 *
 * Checked, in this order, the first problem failing the node (an op that
 * ONNX defines only from an opset after the model's is read as that first
 * version, with a warning): the input count is within [min, max]; no
 * required input slot (a Single parameter, or one of a variadic's first
 * min_arity slots) is named ""; the same for outputs; each attribute is
 * named once, is one the schema defines, and has the schema's type; each
 * required attribute is there. One thing more than ONNX's checker, which
 * lets a variadic's required slots be "": no op can run without them.
 * The messages name the schema version that applied ("Gemm-13").
 *
 * As in ONNX's checker, an attribute whose name starts with "__" is the
 * producer's implementation detail (ONNX's schema.cc: "should be ignored
 * for the purpose of schema checking") and not checked, not even for being
 * given twice; no op reads one. */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "engine/onnx_impl.h"
#include "engine/op_schema.h"

/* "exactly 2", "1 to 3", "at least 1". */
static const char *arity_text(char *buf, size_t len, int lo, int hi)
{
    if (hi == ENG_OP_ARITY_MAX)
        snprintf(buf, len, "at least %d", lo);
    else if (lo == hi)
        snprintf(buf, len, "exactly %d", lo);
    else
        snprintf(buf, len, "%d to %d", lo, hi);
    return buf;
}

/* The note that ends a message when the model's opset is newer than the
 * table knows: the check then used the newest version the table has. */
static const char *newer_note(char *buf, size_t len, int opset)
{
    buf[0] = '\0';
    if (opset > eng_op_schema_opset_known())
        snprintf(buf, len, " (flatserve's schema table comes from onnx %s, which knows opsets up "
                 "to %d)", eng_op_schema_onnx_version(), eng_op_schema_opset_known());
    return buf;
}

/* Inputs or outputs: count, then required slots named "". */
static int check_values(const char *nl, const char *op, const char *what, char *const *names,
                        size_t n, int lo, int hi, const eng_op_schema_t *s,
                        const eng_op_param_t *(*slot)(const eng_op_schema_t *, int, bool *),
                        const char *note)
{
    char range[48];
    if (n < (size_t)lo || n > (size_t)hi)
        return fs_err(FS_EINVAL, "%s (%s): has %zu %s%s, but %s-%d takes %s%s", nl, op, n, what,
                      n == 1 ? "" : "s", op, s->since_version,
                      arity_text(range, sizeof range, lo, hi), note);
    for (size_t i = 0; i < n; i++) {
        bool required;
        const eng_op_param_t *p = slot(s, (int)i, &required);
        if (required && !names[i][0])
            return fs_err(FS_EINVAL, "%s (%s): %s %zu (%s) is required but has an empty name", nl,
                          op, what, i, p->name);
    }
    return 0;
}

/* The unknown attribute's message, with the names the schema defines (for
 * a misspelling). When the schema has an input of that name, the attribute
 * has become an input at this version (ReduceSum's axes from 13, Split's
 * split, Pad's pads, ...), and the message says so. */
static int unknown_attr(const char *nl, const char *op, const eng_op_schema_t *s,
                        const char *name, const char *note)
{
    for (int k = 0; k < s->n_in_params; k++)
        if (strcmp(s->in_params[k].name, name) == 0)
            return fs_err(FS_EINVAL, "%s (%s): attribute '%.64s' is not defined by %s-%d, which "
                          "takes %s as input %d%s", nl, op, name, op, s->since_version, name, k,
                          note);
    char known[256] = "none";
    size_t len = 0;
    for (int k = 0; k < s->n_attrs && len < sizeof known; k++) {
        int n = snprintf(known + len, sizeof known - len, "%s%s", k ? ", " : "", s->attrs[k].name);
        len += n > 0 ? (size_t)n : 0;
    }
    return fs_err(FS_EINVAL, "%s (%s): attribute '%.64s' is not defined by %s-%d (it defines: "
                  "%s)%s", nl, op, name, op, s->since_version, known, note);
}

/* Attributes. Each named one is looked up in the schema (a dozen at most),
 * and `seen` marks the schema's entries met, so a node with very many
 * attributes costs linear time: past the schema's own, one is unknown or
 * given twice. */
static int check_attrs(const Onnx__NodeProto *np, const char *nl, const eng_op_schema_t *s,
                       const char *note)
{
    const char *op = np->op_type;
    bool seen[256] = {false};
    for (size_t i = 0; i < np->n_attribute; i++) {
        const Onnx__AttributeProto *ap = np->attribute[i];
        if (!ap->name || !ap->name[0])
            return fs_err(FS_EINVAL, "%s (%s) has an attribute without a name", nl, op);
        if (strncmp(ap->name, "__", 2) == 0)
            continue;
        const eng_op_attr_spec_t *a = eng_op_schema_attr(s, ap->name);
        if (!a)
            return unknown_attr(nl, op, s, ap->name, note);
        if (seen[a - s->attrs])
            return fs_err(FS_EINVAL, "%s (%s): attribute '%.64s' is given twice", nl, op,
                          ap->name);
        seen[a - s->attrs] = true;
        eng_attr_type_t t = onnx_attr_type(ap);
        if (t != (eng_attr_type_t)a->type)
            return fs_err(FS_EINVAL, "%s (%s): attribute '%.64s' has type %s, but %s-%d defines "
                          "it as %s", nl, op, ap->name, eng_attr_type_name(t), op,
                          s->since_version, eng_attr_type_name((eng_attr_type_t)a->type));
    }
    for (int k = 0; k < s->n_attrs; k++)
        if (s->attrs[k].required && !seen[k])
            return fs_err(FS_EINVAL, "%s (%s): attribute '%s' is required by %s-%d but missing%s",
                          nl, op, s->attrs[k].name, op, s->since_version, note);
    return 0;
}

int onnx_schema_check(const Onnx__NodeProto *np, eng_op_id_t id, int opset, const char *nl)
{
    const char *op = np->op_type;
    const eng_op_schema_t *s = eng_op_schema_find(id, opset);
    const eng_op_schema_t *first = eng_op_schema_first(id);
    if (!first)
        return fs_err(FS_ENOTSUP, "%s (%s): flatserve's schema table has no entry for %s "
                      "(engine/ops/schema.inc predates the op: run tools/gen_op_schema.py)", nl,
                      op, op);
    /* An op newer than the model's opset: ONNX Runtime's transformer
     * optimizer writes LayerNormalization into opset 11..16 models, and ONNX
     * Runtime (so Triton) loads them, reading the op as its first standard
     * version defines it. So does flatserve, saying so. */
    if (!s) {
        s = first;
        FS_LOG_W("load", "%s (%s): ONNX defines %s from opset %d and the model imports opset %d: "
                 "read as %s-%d", nl, op, op, first->since_version, opset, op,
                 first->since_version);
    }
    char note[160];
    newer_note(note, sizeof note, opset);
    int rc = check_values(nl, op, "input", np->input, np->n_input, s->min_inputs, s->max_inputs,
                          s, eng_op_schema_input, note);
    if (rc == 0)
        rc = check_values(nl, op, "output", np->output, np->n_output, s->min_outputs,
                          s->max_outputs, s, eng_op_schema_output, note);
    if (rc == 0)
        rc = check_attrs(np, nl, s, note);
    return rc;
}
