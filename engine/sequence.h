/* sequence.h -- Triton's sequence batching as a served version's options:
 * which model inputs the server fills with a sequence's control values
 * (START, END, READY, CORRID) and which input/output pairs carry its
 * implicit state from one request to the next. The batcher that honours
 * them is engine/sequence.c; a request names its sequence in
 * eng_request_t (registry.h).
 *
 * Plain data, no functions but the name of a kind: config/ fills it from a
 * config.pbtxt's sequence_batching, the registry checks it against the
 * model when a version loads.
 *
 * Threading: plain data. */
#ifndef FS_ENGINE_SEQUENCE_H
#define FS_ENGINE_SEQUENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ENG_SEQ_MAX_CONTROLS 4     /* control inputs (one per kind) */
#define ENG_SEQ_MAX_STATES 8       /* implicit state pairs */
#define ENG_SEQ_NAME_MAX 128       /* a control's or a state's tensor name */
#define ENG_SEQ_DEFAULT_MAX 1024   /* live sequences of one version when none is set */
#define ENG_SEQ_DEFAULT_IDLE_NS 1000000000ull /* Triton's default: 1 s */

/* Triton's ControlKind numbers. */
typedef enum eng_seq_control_kind {
    ENG_SEQ_START = 0,             /* the request starts its sequence */
    ENG_SEQ_READY = 1,             /* the request's inputs hold data (always true here) */
    ENG_SEQ_END = 2,               /* the request ends its sequence */
    ENG_SEQ_CORRID = 3,            /* the sequence's id, as an integer */
} eng_seq_control_kind_t;

/* "CONTROL_SEQUENCE_START", ...; "?" for another value. Cannot fail. */
const char *eng_seq_control_kind_name(eng_seq_control_kind_t k);

typedef struct eng_seq_control {
    char input[ENG_SEQ_NAME_MAX];  /* the model input it fills */
    eng_seq_control_kind_t kind;
    /* The input's dtype: INT32, FLOAT or BOOL for START/READY/END (written
     * false_true[0] or [1]); UINT64, INT64, UINT32 or INT32 for CORRID (the
     * id, truncated to 32 bits for the 32-bit ones, as Triton does). */
    eng_dtype_t dtype;
    double false_true[2];
} eng_seq_control_t;

typedef struct eng_seq_state {
    char input[ENG_SEQ_NAME_MAX];  /* fed the state */
    char output[ENG_SEQ_NAME_MAX]; /* becomes the state after each request; not answered */
    eng_dtype_t dtype;
    uint32_t rank;                 /* dims without the batch dim; each > 0 */
    int64_t dims[ENG_MAX_RANK];
} eng_seq_state_t;

typedef struct eng_seq_options {
    bool enabled;                  /* false: the version takes no sequence requests */
    bool oldest;                   /* Triton's oldest strategy was asked (else direct); both
                                    * batch where the model batches; said back by the config */
    uint64_t idle_ns;              /* a sequence idle this long is ended; 0: 1 s */
    uint32_t max_sequences;        /* live at once; 0: ENG_SEQ_DEFAULT_MAX */
    uint32_t n_controls;
    eng_seq_control_t controls[ENG_SEQ_MAX_CONTROLS];
    uint32_t n_states;
    eng_seq_state_t states[ENG_SEQ_MAX_STATES];  /* initial state: zeros */
} eng_seq_options_t;

#ifdef __cplusplus
}
#endif
#endif
