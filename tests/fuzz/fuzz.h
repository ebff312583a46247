/* fuzz.h -- the fuzz targets: one function per parser of outside input,
 * each taking the raw bytes a libFuzzer run (tests/fuzz/fuzz_main.c) or the
 * corpus replay suite (tests/fuzz/test_fuzz_replay.c) hands it.
 *
 * A target returns 0 when the product kept its contract on the input:
 * it accepted it and what came back holds the documented invariants, or it
 * refused it with one of the documented error codes and a message. Any
 * other outcome is FS_ESTATE with a message naming the broken contract
 * (and a crash, a leak or undefined behaviour is caught by the sanitizers
 * around it). Every target frees what it made and checks that the caches
 * it used are back to zero bytes. tests/fuzz/README.md describes each
 * input format.
 *
 * Threading: one input at a time per thread; no state survives a call. */
#ifndef FS_TESTS_FUZZ_FUZZ_H
#define FS_TESTS_FUZZ_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/cache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* server/codec.c: a JSON or binary-extension request body, bound to a
 * model, run and encoded (fuzz_codec.c). */
int fuzz_codec_one(const uint8_t *data, size_t size);
/* server/codec_fast.c against codec.c's cJSON path on one body, as
 * srv_infer_request_parse would be called with it (fuzz_codec_one checks
 * every input so; the codec_fast tests use it too): 0 when the fast reader
 * refuses the body, or accepts it and the cJSON path returns the same
 * request (id, model, version, every input's name, dtype, shape, bytes and
 * borrowing, every output's name and binary flag); else FS_ESTATE naming
 * the difference. *accepted (may be NULL) says whether the fast reader
 * took the body. */
int fuzz_codec_readers_agree(const void *body, size_t len, size_t header_len, bool *accepted);
/* engine/onnx_load.c: the bytes as an ONNX model, eng_graph_load
 * (fuzz_onnx.c). */
int fuzz_onnx_one(const uint8_t *data, size_t size);
/* The bytes loaded as a model on the CPU and, when small, run once
 * (fuzz_run.c). */
int fuzz_run_one(const uint8_t *data, size_t size);
/* config/: the bytes as flatserve.json (fuzz_config.c) ... */
int fuzz_config_one(const uint8_t *data, size_t size);
/* ... and as a model's config.json (fuzz_model_config.c). */
int fuzz_model_config_one(const uint8_t *data, size_t size);
/* ... and a model's config.pbtxt (fuzz_pbtxt.c). */
int fuzz_pbtxt_one(const uint8_t *data, size_t size);

/* Every target by name, for the replay suite and the docs: "codec",
 * "onnx", "run", "config", "model_config", "pbtxt" (the names of the corpus and
 * regression folders and of the build/fuzz/bin/fuzz-<name> binaries). */
typedef struct fuzz_target {
    const char *name;
    int (*one)(const uint8_t *data, size_t size);
} fuzz_target_t;
extern const fuzz_target_t fuzz_targets[];
extern const size_t fuzz_n_targets;

/* Checks a refusal: rc is one of the n `codes` and a message was set since
 * the caller's fs_err_clear(). 0, or FS_ESTATE naming `what`, the code and
 * the message. */
int fuzz_refusal_check(const char *what, int rc, const int *codes, size_t n);

/* Checks that `cache` holds no allocated bytes and that its invariants
 * hold (alloc_cache_check). 0, or FS_ESTATE naming `when` and the bytes
 * left. */
int fuzz_cache_check_zero(alloc_cache_t *cache, const char *when);

/* The documented ranges of a config's batching, engine and device values
 * (fuzz_config.c, shared with fuzz_model_config.c): 0, or FS_ESTATE naming
 * `where` and the values. A model's device may not be "auto" (auto_ok
 * false). */
struct cfg_batching;
struct cfg_engine;
struct cfg_device;
int fuzz_config_batching_check(const struct cfg_batching *b, const char *where);
int fuzz_config_engine_check(const struct cfg_engine *e, const char *where);
int fuzz_config_device_check(const struct cfg_device *d, bool auto_ok, const char *where);

/* The 64-bit FNV-1a hash of the bytes: the inputs' own source of
 * deterministic choices (same bytes, same choices). */
uint64_t fuzz_hash(const uint8_t *data, size_t size);

#ifdef __cplusplus
}
#endif
#endif
