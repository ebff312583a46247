/* test_config.c -- tests for config/: flatserve.json and the models'
 * config.json (config.c), the command line (config_args.c), and the
 * effective config as JSON and the SIGHUP diff (config_json.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "config/config.h"
#include "config/config_impl.h"

#define MiB (1ull << 20)
#define US 1000ull
#define MS (1000ull * US)
#define SEC (1000ull * MS)
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* --- helpers ------------------------------------------------------------------ */

/* The defaults with `json` applied; the test fails if it does not parse. */
static cfg_t parse_ok(const char *json)
{
    cfg_t cfg;
    cfg_defaults(&cfg);
    int rc = cfg_parse(json, strlen(json), "flatserve.json", &cfg);
    cr_assert_eq(rc, 0, "%s: rc %d: %s", json, rc, fs_errmsg());
    return cfg;
}

/* `json` fails with `want_rc`, the message holds every one of the
 * NULL-terminated substrings, and the config is untouched. */
static void parse_fails(const char *json, int want_rc, ...)
{
    cfg_t cfg, before;
    cfg_defaults(&cfg);
    memcpy(&before, &cfg, sizeof cfg);
    fs_err_clear();
    int rc = cfg_parse(json, strlen(json), "flatserve.json", &cfg);
    cr_expect_eq(rc, want_rc, "%s: rc %s, want %s (%s)", json, fs_errname(rc), fs_errname(want_rc),
                 fs_errmsg());
    va_list ap;
    va_start(ap, want_rc);
    for (const char *s; (s = va_arg(ap, const char *));)
        cr_expect(strstr(fs_errmsg(), s), "%s: message lacks [%s]: %s", json, s, fs_errmsg());
    va_end(ap);
    cr_expect(memcmp(&cfg, &before, sizeof cfg) == 0, "%s: the config changed on error", json);
}

#define FAILS(json, rc, ...) parse_fails(json, rc, __VA_ARGS__, (const char *)NULL)

/* A temporary directory for the files a test writes; every file goes
 * through tmp_write and is removed, with the directory, by tmp_remove. */
typedef struct tmp_dir {
    char dir[64];
    char paths[8][128];
    size_t n;
} tmp_dir_t;

static void tmp_make(tmp_dir_t *t)
{
    memset(t, 0, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "/tmp/fs-config-XXXXXX");
    cr_assert_not_null(mkdtemp(t->dir));
}

static const char *tmp_write(tmp_dir_t *t, const char *name, const char *text)
{
    cr_assert_lt(t->n, N_OF(t->paths));
    char *path = t->paths[t->n++];
    char joined[sizeof t->paths[0]];
    snprintf(joined, sizeof joined, "%s/%s", t->dir, name);
    memcpy(path, joined, sizeof joined);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

static void tmp_remove(tmp_dir_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        remove(t->paths[i]);
    cr_expect_eq(rmdir(t->dir), 0, "%s not empty", t->dir);
}

/* cfg_from_args over a NULL-terminated list (argv[0] is added). */
static int args_run(cfg_t *out, cfg_action_t *action, const char **config_path, ...)
{
    char *argv[32] = {"flatserve"};
    int argc = 1;
    va_list ap;
    va_start(ap, config_path);
    for (char *s; (s = va_arg(ap, char *)) && argc < 31;)
        argv[argc++] = s;
    va_end(ap);
    fs_err_clear();
    return cfg_from_args(argc, argv, out, action, config_path);
}

#define ARGS(out, action, path, ...) args_run(out, action, path, __VA_ARGS__, (char *)NULL)

/* --- defaults and the example ------------------------------------------------------ */

/* A config device as text ("auto", "" or its name), for comparisons. */
static const char *dev_text(const cfg_device_t *d)
{
    static char buf[64];
    return cfg_device_text(d, buf, sizeof buf);
}

Test(cfg, defaults_are_the_documented_values)
{
    cfg_t c;
    cfg_defaults(&c);
    cr_expect_str_eq(c.server.host, "0.0.0.0");
    cr_expect_eq(c.server.port, 8000);
    cr_expect_eq(c.server.threads, 4);
    cr_expect_eq(c.server.max_body_bytes, 64 * MiB);
    cr_expect_str_eq(c.server.admin_token, "");
    cr_expect_eq(c.server.connection_timeout_ns, 30 * SEC);
    cr_expect_eq(c.server.request_timeout_ns, 30 * SEC);
    cr_expect_eq(c.server.shutdown_timeout_ns, 30 * SEC);
    cr_expect_str_eq(dev_text(&c.device), "auto");
    cr_expect_str_eq(c.repository, "models");
    cr_expect(c.models_all);
    cr_expect_eq(c.n_models, 0);
    cr_expect_eq(c.batching.max_batch_size, 64);
    cr_expect_eq(c.batching.max_queue_delay_ns, 0);
    cr_expect_eq(c.batching.max_queue, 1024);
    cr_expect_eq(c.batching.instances, 0, "auto");
    cr_expect_str_eq(eng_precision_name(c.engine.precision), "fp32");
    cr_expect_eq(c.engine.threads, 0);
    cr_expect_eq(c.engine.max_plans, 16);
    cr_expect(c.engine.cuda_graphs);
    cr_expect_eq(c.memory.n_policies, 2);
    cr_expect_eq(c.memory.policies[0].kind, ALLOC_POLICY_ARENA);
    cr_expect_eq(c.memory.policies[0].params.arena.min_block_bytes, 0);
    cr_expect_eq(c.memory.policies[1].kind, ALLOC_POLICY_IDLE_TRIM);
    cr_expect_eq(c.memory.policies[1].params.idle_trim.after_ns, 30 * SEC);
    cr_expect_eq(c.memory.policies[1].params.idle_trim.keep_bytes, 0);
    cr_expect_eq(c.memory.limit_fraction, 0.0);
    cr_expect_eq(c.memory.limit_bytes, 0);
    cr_expect_eq(c.memory.max_split_bytes, 0);
    cr_expect_eq(c.memory.pinned_limit_bytes, 256 * MiB);
    cr_expect_eq(c.memory.tick_ns, 50 * MS);
    cr_expect_eq(c.log.level, FS_LOG_INFO);
    cr_expect_eq(c.log.format, FS_LOG_TEXT);
}

Test(cfg, empty_document_keeps_every_default)
{
    cfg_t want, got = parse_ok("{}");
    cfg_defaults(&want);
    cr_expect(memcmp(&want, &got, sizeof want) == 0);
    got = parse_ok("  {\n}\n  ");
    cr_expect(memcmp(&want, &got, sizeof want) == 0);
}

Test(cfg, example_file_parses)
{
    cfg_t c;
    cfg_defaults(&c);
    int rc = cfg_load_file("config/flatserve.example.json", &c);
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect(!c.models_all);
    cr_expect_eq(c.n_models, 3);
    cr_expect_str_eq(c.models[2], "transformer");
    cr_expect_eq(c.memory.n_policies, 2);
    cr_expect_eq(c.memory.policies[0].kind, ALLOC_POLICY_ARENA);
    cr_expect_eq(c.memory.policies[0].params.arena.min_block_bytes, MiB);
    cr_expect_eq(c.memory.policies[1].kind, ALLOC_POLICY_IDLE_TRIM);
    cr_expect_eq(c.memory.policies[1].params.idle_trim.after_ns, 30 * SEC);
    cr_expect_eq(c.memory.policies[1].params.idle_trim.keep_bytes, 256 * MiB);
    cr_expect_eq(c.memory.limit_fraction, 0.9);
    cr_expect_eq(c.memory.max_split_bytes, 64 * MiB);
}

/* --- every section ------------------------------------------------------------------- */

Test(cfg, server_keys_are_read)
{
    cfg_t c = parse_ok("{\"server\": {\"host\": \"127.0.0.1\", \"port\": 0, \"threads\": 16,"
                       " \"max_body\": \"1GiB\", \"admin_token\": \"abc-123\","
                       " \"connection_timeout\": \"5s\", \"request_timeout\": \"250ms\","
                       " \"shutdown_timeout\": \"2m\"}}");
    cr_expect_str_eq(c.server.host, "127.0.0.1");
    cr_expect_eq(c.server.port, 0);
    cr_expect_eq(c.server.threads, 16);
    cr_expect_eq(c.server.max_body_bytes, 1024 * MiB);
    cr_expect_str_eq(c.server.admin_token, "abc-123");
    cr_expect_eq(c.server.connection_timeout_ns, 5 * SEC);
    cr_expect_eq(c.server.request_timeout_ns, 250 * MS);
    cr_expect_eq(c.server.shutdown_timeout_ns, 120 * SEC);
}

Test(cfg, keys_present_replace_and_others_stay)
{
    cfg_t c = parse_ok("{\"server\": {\"port\": 9000}}");
    cr_expect_eq(c.server.port, 9000);
    cr_expect_str_eq(c.server.host, "0.0.0.0");
    cr_expect_eq(c.server.threads, 4);
    /* A second document over the first keeps what it does not name. */
    int rc = cfg_parse("{\"device\": \"cpu\"}", 17, "second.json", &c);
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect_eq(c.server.port, 9000);
    cr_expect_str_eq(dev_text(&c.device), "cpu");
}

Test(cfg, batching_and_engine_keys_are_read)
{
    cfg_t c = parse_ok("{\"batching\": {\"max_batch_size\": 0, \"max_queue_delay\": \"2ms\","
                       " \"max_queue\": 10, \"instances\": 4},"
                       " \"engine\": {\"precision\": \"bf16\", \"threads\": 8, \"max_plans\": 1,"
                       " \"cuda_graphs\": false}}");
    cr_expect_eq(c.batching.max_batch_size, 0);
    cr_expect_eq(c.batching.max_queue_delay_ns, 2 * MS);
    cr_expect_eq(c.batching.max_queue, 10);
    cr_expect_eq(c.batching.instances, 4);
    cr_expect_str_eq(eng_precision_name(c.engine.precision), "bf16");
    cr_expect_eq(c.engine.threads, 8);
    cr_expect_eq(c.engine.max_plans, 1);
    cr_expect(!c.engine.cuda_graphs);
}

Test(cfg, memory_keys_are_read)
{
    cfg_t c = parse_ok("{\"memory\": {\"policies\": [\"periodic\"], \"limit_fraction\": 0.5,"
                       " \"limit_bytes\": \"8GiB\", \"max_split\": \"2MiB\","
                       " \"pinned_limit\": 1048576, \"tick\": \"10ms\"}}");
    cr_expect_eq(c.memory.n_policies, 1);
    cr_expect_eq(c.memory.policies[0].kind, ALLOC_POLICY_PERIODIC);
    cr_expect_eq(c.memory.limit_fraction, 0.5);
    cr_expect_eq(c.memory.limit_bytes, 8192 * MiB);
    cr_expect_eq(c.memory.max_split_bytes, 2 * MiB);
    cr_expect_eq(c.memory.pinned_limit_bytes, MiB);
    cr_expect_eq(c.memory.tick_ns, 10 * MS);
}

Test(cfg, log_keys_are_read_and_level_ignores_case)
{
    cfg_t c = parse_ok("{\"log\": {\"level\": \"DEBUG\", \"format\": \"json\"}}");
    cr_expect_eq(c.log.level, FS_LOG_DEBUG);
    cr_expect_eq(c.log.format, FS_LOG_JSON);
    FAILS("{\"log\": {\"level\": \"loud\"}}", FS_EINVAL, "\"log.level\"", "\"loud\"", "trace");
    FAILS("{\"log\": {\"format\": \"xml\"}}", FS_EINVAL, "\"log.format\"", "\"text\", \"json\"",
          "\"xml\"");
}

Test(cfg, sizes_accept_byte_counts_and_unit_strings)
{
    cfg_t c = parse_ok("{\"server\": {\"max_body\": 1000}}");
    cr_expect_eq(c.server.max_body_bytes, 1000);
    c = parse_ok("{\"server\": {\"max_body\": \"1.5MiB\"}}");
    cr_expect_eq(c.server.max_body_bytes, 3 * MiB / 2);
    c = parse_ok("{\"server\": {\"max_body\": \"64KB\"}}");
    cr_expect_eq(c.server.max_body_bytes, 64000);
}

Test(cfg, device_accepts_auto_cpu_cuda_and_cuda_index)
{
    static const char *const good[] = {"auto", "cpu", "cuda", "cuda:0", "cuda:7", "cuda:1023"};
    static const char *const held[] = {"auto", "cpu", "cuda:0", "cuda:0", "cuda:7", "cuda:1023"};
    for (size_t i = 0; i < N_OF(good); i++) {
        char json[64];
        snprintf(json, sizeof json, "{\"device\": \"%s\"}", good[i]);
        cfg_t c = parse_ok(json);
        cr_expect_str_eq(dev_text(&c.device), held[i]);
        cr_expect(c.device.set);
        cr_expect_eq(c.device.is_auto, i == 0);
    }
}

Test(cfg, device_rejects_malformed_strings)
{
    static const char *const bad[] = {"\"gpu\"",     "\"cuda:\"", "\"cuda:x\"", "\"cuda:1024\"",
                                      "\"cuda:-1\"", "\"CPU\"",   "\"cuda0\"",  "\"\"",
                                      "\"cuda:1 \"", "0",         "null"};
    for (size_t i = 0; i < N_OF(bad); i++) {
        char json[64];
        snprintf(json, sizeof json, "{\"device\": %s}", bad[i]);
        FAILS(json, FS_EINVAL, "flatserve.json: \"device\": expected \"auto\", \"cuda:all\", \"cpu\"",
              bad[i]);
    }
}

/* Lists of GPUs: "cuda:0,1" or "cuda:0,cuda:1", each once, the CPU alone;
 * "cuda:all" for the server only. */
Test(cfg, device_lists_and_cuda_all)
{
    cfg_t c = parse_ok("{\"device\": \"cuda:0,1\"}");
    cr_expect_eq(c.device.dev.index, 0);
    cr_expect_eq(c.device.n_more, 1);
    cr_expect_eq(c.device.more[0].index, 1);
    cr_expect_str_eq(dev_text(&c.device), "cuda:0,1");
    c = parse_ok("{\"device\": \"cuda:2,cuda:0,3\"}");
    cr_expect_str_eq(dev_text(&c.device), "cuda:2,0,3");
    c = parse_ok("{\"device\": \"cuda:all\"}");
    cr_expect(c.device.all_gpus);
    cr_expect_str_eq(dev_text(&c.device), "cuda:all");
    FAILS("{\"device\": \"cuda:0,0\"}", FS_EINVAL, "cuda:0 is listed twice");
    FAILS("{\"device\": \"cuda:0,cpu\"}", FS_EINVAL, "only GPUs make a list");
    FAILS("{\"device\": \"cpu,1\"}", FS_EINVAL, "only GPUs make a list");
    FAILS("{\"device\": \"cuda:0,\"}", FS_EINVAL, "item 2 is empty");
    FAILS("{\"device\": \"cuda:0,1,2,3,4,5,6,7,8\"}", FS_EINVAL, "more than 8 devices");
    FAILS("{\"device\": \"cuda:0,x\"}", FS_EINVAL, "'x' is not a device");
    cfg_model_t m;
    const char *json = "{\"device\": \"cuda:all\"}";
    cr_expect_eq(cfg_model_parse(json, strlen(json), "models/m/config.json", &m), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "leave the key out"), "%s", fs_errmsg());
    json = "{\"device\": \"cuda:1,0\"}";
    cr_expect_eq(cfg_model_parse(json, strlen(json), "models/m/config.json", &m), 0, "%s",
                 fs_errmsg());
    cr_expect_eq(m.device.dev.index, 1);
    cr_expect_eq(m.device.more[0].index, 0);
}

Test(cfg, models_star_means_all_and_a_list_names_them)
{
    cfg_t c = parse_ok("{\"models\": [\"mlp\", \"cnn-2\", \"a.b_C\"]}");
    cr_expect(!c.models_all);
    cr_expect_eq(c.n_models, 3);
    cr_expect_str_eq(c.models[0], "mlp");
    cr_expect_str_eq(c.models[1], "cnn-2");
    cr_expect_str_eq(c.models[2], "a.b_C");
    c = parse_ok("{\"models\": []}");
    cr_expect(!c.models_all);
    cr_expect_eq(c.n_models, 0);
    c = parse_ok("{\"models\": \"*\"}");
    cr_expect(c.models_all);
}

Test(cfg, model_names_are_validated)
{
    FAILS("{\"models\": [\"ok\", \".hidden\"]}", FS_EINVAL, "\"models[1]\"", "\".hidden\"",
          "model name", "starts with '.'");
    FAILS("{\"models\": [\"a/b\"]}", FS_EINVAL, "\"models[0]\"", "\"a/b\"",
          "has a character other than");
    FAILS("{\"models\": [\"\"]}", FS_EINVAL, "\"models[0]\"", "is empty");
    FAILS("{\"models\": [\"a b\"]}", FS_EINVAL, "\"models[0]\"");
    FAILS("{\"models\": [\"..\"]}", FS_EINVAL, "\"models[0]\"");
    FAILS("{\"models\": [3]}", FS_EINVAL, "\"models[0]\"", "got 3", "is not a string");
    FAILS("{\"models\": [\"m\", \"n\", \"m\"]}", FS_EINVAL, "\"models[2]\"", "listed twice");
    FAILS("{\"models\": \"all\"}", FS_EINVAL, "\"models\"", "\"*\"", "got \"all\"");

    char json[512];
    char name[129];
    memset(name, 'x', 128);
    name[128] = '\0';
    snprintf(json, sizeof json, "{\"models\": [\"%s\"]}", name);
    FAILS(json, FS_EINVAL, "\"models[0]\"", "longer than 127 bytes");
    name[127] = '\0';
    snprintf(json, sizeof json, "{\"models\": [\"%s\"]}", name);
    cfg_t c = parse_ok(json);
    cr_expect_eq(strlen(c.models[0]), 127);
}

Test(cfg, more_models_than_the_limit_are_refused)
{
    char json[2048] = "{\"models\": [";
    for (int i = 0; i <= CFG_MAX_MODELS; i++)
        snprintf(json + strlen(json), sizeof json - strlen(json), "%s\"m%d\"", i ? ", " : "", i);
    strcat(json, "]}");
    FAILS(json, FS_EINVAL, "\"models\"", "at most 64");
}

/* --- unknown and duplicate keys ------------------------------------------------------- */

Test(cfg, unknown_top_level_key_is_named_with_the_known_ones)
{
    FAILS("{\"sever\": {}}", FS_EINVAL, "flatserve.json: unknown key \"sever\"",
          "known keys: server, device, repository, models, model_control_mode, repository_poll_secs, batching, engine, memory, log");
}

Test(cfg, unknown_nested_key_names_its_path)
{
    FAILS("{\"memory\": {\"polices\": []}}", FS_EINVAL, "unknown key \"memory.polices\"",
          "known keys of \"memory\": policies, limit_fraction, limit_bytes, max_split, "
          "pinned_limit, tick");
    FAILS("{\"server\": {\"port\": 80, \"prot\": 81}}", FS_EINVAL, "unknown key \"server.prot\"",
          "known keys of \"server\": host, port");
    FAILS("{\"engine\": {\"fp16\": true}}", FS_EINVAL, "unknown key \"engine.fp16\"");
}

Test(cfg, unknown_key_inside_a_policy_names_its_index)
{
    FAILS("{\"memory\": {\"policies\": [\"cache\", {\"kind\": \"idle_trim\", \"aftr\": \"1s\"}]}}",
          FS_EINVAL, "unknown key \"memory.policies[1].aftr\"",
          "known keys of \"memory.policies[1]\" (kind \"idle_trim\"): kind, after, keep");
}

Test(cfg, key_of_another_policy_kind_is_refused)
{
    FAILS("{\"memory\": {\"policies\": [{\"kind\": \"arena\", \"after\": \"30s\"}]}}", FS_EINVAL,
          "unknown key \"memory.policies[0].after\"", "(kind \"arena\"): kind, min_block");
    FAILS("{\"memory\": {\"policies\": [{\"kind\": \"watermark\", \"every\": \"1s\"}]}}", FS_EINVAL,
          "unknown key \"memory.policies[0].every\"");
}

Test(cfg, duplicate_key_is_refused)
{
    FAILS("{\"server\": {\"port\": 1, \"port\": 2}}", FS_EINVAL, "duplicate key \"server.port\"");
    FAILS("{\"log\": {}, \"log\": {}}", FS_EINVAL, "duplicate key \"log\"");
}

Test(cfg, long_unknown_key_is_quoted_cut)
{
    char json[512], key[201];
    memset(key, 'k', 200);
    key[200] = '\0';
    snprintf(json, sizeof json, "{\"server\": {\"%s\": 1}}", key);
    FAILS(json, FS_EINVAL, "unknown key \"server.kkkk", "...\"");
}

/* --- wrong types and bad values --------------------------------------------------------- */

Test(cfg, wrong_types_are_refused_with_the_key_path)
{
    FAILS("{\"server\": {\"port\": \"80x\"}}", FS_EINVAL,
          "flatserve.json: \"server.port\": expected an integer 0..65535, got \"80x\"");
    FAILS("{\"server\": {\"port\": \"8000\"}}", FS_EINVAL, "got \"8000\"");
    FAILS("{\"server\": {\"threads\": true}}", FS_EINVAL, "\"server.threads\"", "got true");
    FAILS("{\"server\": {\"host\": 5}}", FS_EINVAL, "\"server.host\"", "got 5");
    FAILS("{\"server\": []}", FS_EINVAL, "\"server\": expected an object, got an array");
    FAILS("{\"batching\": 3}", FS_EINVAL, "\"batching\": expected an object, got 3");
    FAILS("{\"engine\": {\"cuda_graphs\": \"yes\"}}", FS_EINVAL,
          "\"engine.cuda_graphs\": expected true or false, got \"yes\"");
    FAILS("{\"engine\": {\"precision\": \"fp64\"}}", FS_EINVAL, "\"engine.precision\"",
          "\"fp32\", \"tf32\", \"fp16\", \"bf16\"", "got \"fp64\"");
    FAILS("{\"memory\": {\"limit_fraction\": \"0.5\"}}", FS_EINVAL, "\"memory.limit_fraction\"",
          "got \"0.5\"");
    FAILS("{\"memory\": {\"policies\": \"cache\"}}", FS_EINVAL, "\"memory.policies\"",
          "expected an array");
    FAILS("{\"repository\": null}", FS_EINVAL, "\"repository\"", "got null");
    FAILS("{\"repository\": \"\"}", FS_EINVAL, "\"repository\"", "got \"\"");
    FAILS("{\"server\": {\"admin_token\": \"has space\"}}", FS_EINVAL, "\"server.admin_token\"",
          "byte 3");
    FAILS("{\"server\": {\"host\": \"\"}}", FS_EINVAL, "\"server.host\"");
}

Test(cfg, out_of_range_integers_are_refused)
{
    FAILS("{\"server\": {\"port\": 65536}}", FS_EINVAL, "0..65535, got 65536");
    FAILS("{\"server\": {\"port\": -1}}", FS_EINVAL, "0..65535, got -1");
    FAILS("{\"server\": {\"port\": 80.5}}", FS_EINVAL, "got 80.5");
    FAILS("{\"server\": {\"threads\": 0}}", FS_EINVAL,
          "\"server.threads\": expected an integer "
          "1..1024, got 0");
    FAILS("{\"server\": {\"threads\": 1025}}", FS_EINVAL, "1..1024");
    FAILS("{\"batching\": {\"instances\": -1}}", FS_EINVAL, "\"batching.instances\"", "0..64");
    FAILS("{\"batching\": {\"instances\": 65}}", FS_EINVAL, "0..64, got 65");
    FAILS("{\"batching\": {\"max_queue\": 0}}", FS_EINVAL, "\"batching.max_queue\"");
    FAILS("{\"batching\": {\"max_batch_size\": 65537}}", FS_EINVAL, "0..65536");
    FAILS("{\"engine\": {\"max_plans\": 0}}", FS_EINVAL, "\"engine.max_plans\"");
    FAILS("{\"engine\": {\"threads\": 1e30}}", FS_EINVAL, "\"engine.threads\"", "got 1e+30");
    cfg_t c = parse_ok("{\"server\": {\"port\": 65535, \"threads\": 1e3}}");
    cr_expect_eq(c.server.port, 65535);
    cr_expect_eq(c.server.threads, 1000);
}

Test(cfg, bad_sizes_are_refused)
{
    FAILS("{\"server\": {\"max_body\": \"64mb\"}}", FS_EINVAL,
          "flatserve.json: \"server.max_body\": size \"64mb\": unknown unit \"mb\"");
    FAILS("{\"server\": {\"max_body\": 0}}", FS_EINVAL, "\"server.max_body\"", "at least 1");
    FAILS("{\"server\": {\"max_body\": -1}}", FS_EINVAL, "\"server.max_body\"",
          "expected a size such as \"64MiB\" or a byte count, got -1");
    FAILS("{\"server\": {\"max_body\": 1.5}}", FS_EINVAL, "got 1.5");
    FAILS("{\"memory\": {\"limit_bytes\": true}}", FS_EINVAL, "\"memory.limit_bytes\"");
    FAILS("{\"memory\": {\"limit_bytes\": \"99999999999TiB\"}}", FS_EINVAL,
          "\"memory.limit_bytes\"", "too large");
    FAILS("{\"memory\": {\"max_split\": \"1MiB\"}}", FS_EINVAL, "\"memory.max_split\"",
          "above 1MiB");
    FAILS("{\"memory\": {\"policies\": [{\"kind\": \"idle_trim\", \"keep\": \"lots\"}]}}",
          FS_EINVAL, "\"memory.policies[0].keep\"", "\"lots\"");
    cfg_t c = parse_ok("{\"memory\": {\"max_split\": \"1025KiB\"}}");
    cr_expect_eq(c.memory.max_split_bytes, 1025 * 1024);
    c = parse_ok("{\"memory\": {\"max_split\": 0}}");
    cr_expect_eq(c.memory.max_split_bytes, 0);
}

Test(cfg, bad_durations_are_refused)
{
    FAILS("{\"server\": {\"request_timeout\": 30}}", FS_EINVAL,
          "\"server.request_timeout\": expected a duration such as \"30s\", got 30");
    FAILS("{\"server\": {\"request_timeout\": \"30\"}}", FS_EINVAL, "\"server.request_timeout\"",
          "missing unit");
    FAILS("{\"memory\": {\"tick\": \"0s\"}}", FS_EINVAL, "\"memory.tick\": must be more than 0");
    FAILS("{\"batching\": {\"max_queue_delay\": \"-1ms\"}}", FS_EINVAL,
          "\"batching.max_queue_delay\"", "negative");
    FAILS("{\"memory\": {\"policies\": [\"cache\", {\"kind\": \"idle_trim\", \"after\": 12}]}}",
          FS_EINVAL, "\"memory.policies[1].after\": expected a duration such as \"30s\", got 12");
    cfg_t c = parse_ok("{\"batching\": {\"max_queue_delay\": \"0us\"}}");
    cr_expect_eq(c.batching.max_queue_delay_ns, 0);
}

Test(cfg, fractions_are_checked)
{
    cfg_t c = parse_ok("{\"memory\": {\"limit_fraction\": 1}}");
    cr_expect_eq(c.memory.limit_fraction, 1.0);
    c = parse_ok("{\"memory\": {\"limit_fraction\": 0}}");
    cr_expect_eq(c.memory.limit_fraction, 0.0);
    FAILS("{\"memory\": {\"limit_fraction\": 1.5}}", FS_EINVAL, "\"memory.limit_fraction\"",
          "(0, 1] or 0 (unset), got 1.5");
    FAILS("{\"memory\": {\"limit_fraction\": -0.1}}", FS_EINVAL, "got -0.1");
    FAILS("{\"memory\": {\"policies\": [{\"kind\": \"watermark\", \"fraction\": 0}]}}", FS_EINVAL,
          "\"memory.policies[0].fraction\": expected a number in (0, 1], got 0");
}

/* --- policies ------------------------------------------------------------------------- */

Test(cfg, policies_as_names_get_default_parameters)
{
    cfg_t c = parse_ok("{\"memory\": {\"policies\": [\"periodic\", \"arena\", \"idle_trim\","
                       " \"watermark\", \"cache\"]}}");
    alloc_policy_params_t def;
    alloc_policy_params_default(&def);
    cr_assert_eq(c.memory.n_policies, 5);
    static const alloc_policy_kind_t kinds[] = {ALLOC_POLICY_PERIODIC, ALLOC_POLICY_ARENA,
                                                ALLOC_POLICY_IDLE_TRIM, ALLOC_POLICY_WATERMARK,
                                                ALLOC_POLICY_CACHE};
    for (size_t i = 0; i < 5; i++) {
        cr_expect_eq(c.memory.policies[i].kind, kinds[i]);
        cr_expect(memcmp(&c.memory.policies[i].params, &def, sizeof def) == 0);
    }
    c = parse_ok("{\"memory\": {\"policies\": []}}");
    cr_expect_eq(c.memory.n_policies, 0);
}

Test(cfg, policies_as_objects_set_their_parameters)
{
    cfg_t c = parse_ok("{\"memory\": {\"policies\": ["
                       "{\"kind\": \"periodic\", \"every_n_requests\": 10, \"every\": \"5s\"},"
                       "{\"kind\": \"arena\", \"min_block\": \"2MiB\"},"
                       "{\"kind\": \"idle_trim\", \"after\": \"1s\", \"keep\": \"1MiB\"},"
                       "{\"kind\": \"watermark\", \"fraction\": 0.5},"
                       "{\"kind\": \"cache\"}]}}");
    cr_assert_eq(c.memory.n_policies, 5);
    const cfg_policy_t *p = c.memory.policies;
    cr_expect_eq(p[0].kind, ALLOC_POLICY_PERIODIC);
    cr_expect_eq(p[0].params.periodic.every_n_requests, 10);
    cr_expect_eq(p[0].params.periodic.every_ns, 5 * SEC);
    cr_expect_eq(p[1].kind, ALLOC_POLICY_ARENA);
    cr_expect_eq(p[1].params.arena.min_block_bytes, 2 * MiB);
    cr_expect_eq(p[2].kind, ALLOC_POLICY_IDLE_TRIM);
    cr_expect_eq(p[2].params.idle_trim.after_ns, SEC);
    cr_expect_eq(p[2].params.idle_trim.keep_bytes, MiB);
    cr_expect_eq(p[3].kind, ALLOC_POLICY_WATERMARK);
    cr_expect_eq(p[3].params.watermark.fraction, 0.5);
    cr_expect_eq(p[4].kind, ALLOC_POLICY_CACHE);
    /* Keys left out keep the kind's defaults. */
    c = parse_ok("{\"memory\": {\"policies\": [{\"kind\": \"periodic\", \"every\": \"0s\"}]}}");
    cr_expect_eq(c.memory.policies[0].params.periodic.every_n_requests, 1000);
    cr_expect_eq(c.memory.policies[0].params.periodic.every_ns, 0);
}

Test(cfg, a_second_arena_is_refused)
{
    FAILS("{\"memory\": {\"policies\": [\"arena\", \"cache\", {\"kind\": \"arena\"}]}}", FS_EINVAL,
          "\"memory.policies[2]\": a second \"arena\" policy (the first is item 0)");
    cfg_t c = parse_ok("{\"memory\": {\"policies\": [\"idle_trim\", \"idle_trim\"]}}");
    cr_expect_eq(c.memory.n_policies, 2);
}

Test(cfg, bad_policies_are_refused)
{
    FAILS("{\"memory\": {\"policies\": [\"lru\"]}}", FS_EINVAL, "\"memory.policies[0]\"",
          "expected a policy kind", "got \"lru\"");
    FAILS("{\"memory\": {\"policies\": [{\"after\": \"1s\"}]}}", FS_EINVAL,
          "\"memory.policies[0]\": missing \"kind\"");
    FAILS("{\"memory\": {\"policies\": [{\"kind\": 1}]}}", FS_EINVAL, "\"memory.policies[0].kind\"",
          "got 1");
    FAILS("{\"memory\": {\"policies\": [7]}}", FS_EINVAL, "\"memory.policies[0]\"", "got 7");
    FAILS("{\"memory\": {\"policies\": [{\"kind\": \"periodic\", \"every_n_requests\": 0,"
          " \"every\": \"0s\"}]}}",
          FS_EINVAL, "\"memory.policies[0]\"", "both are 0");
    FAILS("{\"memory\": {\"policies\": [{\"kind\": \"idle_trim\", \"after\": \"0ms\"}]}}",
          FS_EINVAL, "\"memory.policies[0].after\": must be more than 0");
    FAILS("{\"memory\": {\"policies\": [\"cache\", \"cache\", \"cache\", \"cache\", \"cache\","
          " \"cache\", \"cache\", \"cache\", \"cache\"]}}",
          FS_EINVAL, "\"memory.policies\": at most 8 policies, got 9");
}

/* --- syntax and the top level --------------------------------------------------------------- */

Test(cfg, syntax_error_names_the_place)
{
    FAILS("{\n  \"server\": {\n    \"port\": 80,,\n  }\n}", FS_EPARSE,
          "flatserve.json: not valid JSON: parsing stopped at line 3, column 17 (byte 32), "
          "near '\"port\": 80,,'");
    FAILS("{} trailing", FS_EPARSE, "not valid JSON",
          "line 1, column 4 (byte 3), "
          "near '{} trailing'");
    FAILS("{\"server\": ", FS_EPARSE, "not valid JSON", "at the end of the text");
    FAILS("", FS_EPARSE, "flatserve.json: not valid JSON: the document is empty");
}

Test(cfg, top_level_must_be_an_object)
{
    FAILS("[1, 2]", FS_EINVAL,
          "flatserve.json: expected a JSON object at the top level, got an "
          "array");
    FAILS("\"server\"", FS_EINVAL, "got \"server\"");
}

Test(cfg, text_is_bounded_by_its_length)
{
    cfg_t c;
    cfg_defaults(&c);
    /* Only the first 14 bytes are the document. */
    const char *text = "{\"device\": 1}{\"device\": \"cpu\"}";
    cr_expect_eq(cfg_parse(text, 13, "x.json", &c), FS_EINVAL);
    const char *text2 = "{\"device\": \"cpu\"}garbage";
    cr_expect_eq(cfg_parse(text2, 17, "x.json", &c), 0, "%s", fs_errmsg());
    cr_expect_str_eq(dev_text(&c.device), "cpu");
    cr_expect_eq(cfg_parse("{}\0{}", 5, "x.json", &c), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "NUL byte at byte 2"), "%s", fs_errmsg());
}

Test(cfg, config_is_unchanged_on_a_late_error)
{
    cfg_t c = parse_ok("{\"server\": {\"port\": 1234}, \"models\": [\"a\"]}");
    cfg_t before;
    memcpy(&before, &c, sizeof c);
    const char *json = "{\"server\": {\"port\": 9, \"host\": \"h\"}, \"device\": \"cpu\","
                       " \"models\": [\"x\", \"y\"], \"memory\": {\"policies\": [\"arena\"],"
                       " \"tick\": \"1s\"}, \"log\": {\"level\": \"nope\"}}";
    cr_expect_eq(cfg_parse(json, strlen(json), "f.json", &c), FS_EINVAL);
    cr_expect(memcmp(&c, &before, sizeof c) == 0);
    cr_expect_eq(c.server.port, 1234);
}

/* --- files -------------------------------------------------------------------------------- */

Test(cfg, load_file_names_the_path_on_error)
{
    tmp_dir_t t;
    tmp_make(&t);
    cfg_t c;
    cfg_defaults(&c);
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none.json", t.dir);
    cr_expect_eq(cfg_load_file(missing, &c), FS_ENOENT);
    cr_expect(strstr(fs_errmsg(), missing), "%s", fs_errmsg());
    cr_expect_eq(cfg_load_file(t.dir, &c), FS_EIO);
    cr_expect(strstr(fs_errmsg(), t.dir), "%s", fs_errmsg());
    const char *bad = tmp_write(&t, "bad.json", "{\"server\": {\"port\": \"x\"}}");
    cr_expect_eq(cfg_load_file(bad, &c), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), bad) && strstr(fs_errmsg(), "\"server.port\""), "%s",
              fs_errmsg());
    const char *broken = tmp_write(&t, "broken.json", "{\n\"a\"\n");
    cr_expect_eq(cfg_load_file(broken, &c), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), broken) && strstr(fs_errmsg(), "line 3"), "%s", fs_errmsg());
    const char *good = tmp_write(&t, "good.json", "{\"server\": {\"port\": 7}}");
    cr_expect_eq(cfg_load_file(good, &c), 0);
    cr_expect_eq(c.server.port, 7);
    tmp_remove(&t);
}

/* --- cfg_to_json -------------------------------------------------------------------------- */

/* cfg_to_json(c), parsed back over the defaults, is byte-identical to c. */
static void expect_round_trip(const cfg_t *c)
{
    char *json = cfg_to_json(c);
    cr_assert_not_null(json);
    cfg_t back;
    cfg_defaults(&back);
    int rc = cfg_parse(json, strlen(json), "to_json", &back);
    cr_assert_eq(rc, 0, "%s\n%s", fs_errmsg(), json);
    cr_expect(memcmp(c, &back, sizeof back) == 0, "round trip differs:\n%s", json);
    free(json);
}

Test(cfg, to_json_round_trips_the_defaults)
{
    cfg_t c;
    cfg_defaults(&c);
    expect_round_trip(&c);
}

Test(cfg, to_json_round_trips_every_field)
{
    cfg_t c = parse_ok(
        "{\"server\": {\"host\": \"::1\", \"port\": 0, \"threads\": 3, \"max_body\": 1000,"
        " \"connection_timeout\": \"1500ns\", \"request_timeout\": \"2500ms\","
        " \"shutdown_timeout\": \"1h\"},"
        " \"device\": \"cuda:3\", \"repository\": \"/srv/models dir\", \"models\": [\"b\", \"a\"],"
        " \"batching\": {\"max_batch_size\": 1, \"max_queue_delay\": \"0s\", \"max_queue\": 7,"
        " \"instances\": 64},"
        " \"engine\": {\"precision\": \"tf32\", \"threads\": 1024, \"max_plans\": 3,"
        " \"cuda_graphs\": false},"
        " \"memory\": {\"policies\": [{\"kind\": \"periodic\", \"every_n_requests\": "
        "9007199254740992,"
        " \"every\": \"0s\"}, {\"kind\": \"arena\", \"min_block\": \"1536KiB\"},"
        " {\"kind\": \"idle_trim\", \"after\": \"1.5s\", \"keep\": 12345},"
        " {\"kind\": \"watermark\", \"fraction\": 0.3}, \"cache\"],"
        " \"limit_fraction\": 0.1, \"limit_bytes\": \"3TiB\", \"max_split\": \"20MiB\","
        " \"pinned_limit\": 0, \"tick\": \"7us\"},"
        " \"log\": {\"level\": \"trace\", \"format\": \"json\"}}");
    expect_round_trip(&c);
    c = parse_ok("{\"models\": []}");
    expect_round_trip(&c);
}

Test(cfg, to_json_writes_sizes_and_durations_with_units)
{
    cfg_t c;
    cfg_defaults(&c);
    c.batching.max_queue_delay_ns = 500 * US;
    char *json = cfg_to_json(&c);
    cr_assert_not_null(json);
    cr_expect(strstr(json, "\"max_body\":\t\"64MiB\""), "%s", json);
    cr_expect(strstr(json, "\"max_queue_delay\":\t\"500us\""), "%s", json);
    cr_expect(strstr(json, "\"request_timeout\":\t\"30s\""), "%s", json);
    cr_expect(strstr(json, "\"tick\":\t\"50ms\""), "%s", json);
    cr_expect(strstr(json, "\"models\":\t\"*\""), "%s", json);
    cr_expect(strstr(json, "\"kind\":\t\"idle_trim\",\n\t\t\t\t\"after\":\t\"30s\""), "%s", json);
    free(json);
}

Test(cfg, to_json_masks_the_admin_token)
{
    cfg_t c = parse_ok("{\"server\": {\"admin_token\": \"s3cret\"}}");
    char *json = cfg_to_json(&c);
    cr_assert_not_null(json);
    cr_expect(!strstr(json, "s3cret"), "%s", json);
    cr_expect(strstr(json, "\"admin_token\":\t\"***\""), "%s", json);
    free(json);
}

/* --- the command line --------------------------------------------------------------------- */

Test(cfg, flags_override_the_defaults)
{
    cfg_t c;
    cfg_action_t action;
    const char *path = "unset";
    int rc = ARGS(&c, &action, &path, "--host", "127.0.0.1", "--port", "9000", "--threads", "2",
                  "--device", "cpu", "--repository", "/r", "--precision", "fp16",
                  "--max-batch-size", "8", "--max-queue-delay", "2ms", "--admin-token", "tok",
                  "--log-level", "warn", "--log-format", "json");
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect_eq(action, CFG_ACTION_SERVE);
    cr_expect_null(path);
    cr_expect_str_eq(c.server.host, "127.0.0.1");
    cr_expect_eq(c.server.port, 9000);
    cr_expect_eq(c.server.threads, 2);
    cr_expect_str_eq(dev_text(&c.device), "cpu");
    cr_expect_str_eq(c.repository, "/r");
    cr_expect_str_eq(eng_precision_name(c.engine.precision), "fp16");
    cr_expect_eq(c.batching.max_batch_size, 8);
    cr_expect_eq(c.batching.max_queue_delay_ns, 2 * MS);
    cr_expect_str_eq(c.server.admin_token, "tok");
    cr_expect_eq(c.log.level, FS_LOG_WARN);
    cr_expect_eq(c.log.format, FS_LOG_JSON);
}

Test(cfg, exit_on_error_is_on_by_default_and_a_flag_or_key_turns_it_off)
{
    cfg_t c;
    cfg_action_t action;
    const char *path;
    cfg_defaults(&c);
    cr_expect(c.server.exit_on_error);
    cr_assert_eq(ARGS(&c, &action, &path, "--exit-on-error=false"), 0, "%s", fs_errmsg());
    cr_expect_not(c.server.exit_on_error);
    cr_assert_eq(ARGS(&c, &action, &path, "--exit-on-error", "true"), 0, "%s", fs_errmsg());
    cr_expect(c.server.exit_on_error);
    cr_expect_neq(ARGS(&c, &action, &path, "--exit-on-error=no"), 0);
    cr_expect(strstr(fs_errmsg(), "--exit-on-error: expected true or false"), "%s", fs_errmsg());
    cfg_t f = parse_ok("{\"server\": {\"exit_on_error\": false}}");
    cr_expect_not(f.server.exit_on_error);
    char *json = cfg_to_json(&f);
    cr_assert_not_null(json);
    cr_expect(strstr(json, "\"exit_on_error\":\tfalse"), "%s", json);
    free(json);
}

Test(cfg, shared_memory_is_on_by_default_and_the_key_turns_it_off)
{
    cfg_t c;
    cfg_defaults(&c);
    cr_expect(c.server.shared_memory);
    cfg_t f = parse_ok("{\"server\": {\"shared_memory\": false}}");
    cr_expect_not(f.server.shared_memory);
    char *json = cfg_to_json(&f);
    cr_assert_not_null(json);
    cr_expect(strstr(json, "\"shared_memory\":\tfalse"), "%s", json);
    free(json);
}

Test(cfg, no_flags_give_the_defaults)
{
    cfg_t c, want;
    cfg_action_t action;
    const char *path;
    char *argv[] = {"flatserve", NULL};
    cr_assert_eq(cfg_from_args(1, argv, &c, &action, &path), 0);
    cfg_defaults(&want);
    cr_expect(memcmp(&c, &want, sizeof c) == 0);
    cr_expect_eq(action, CFG_ACTION_SERVE);
    cr_expect_null(path);
}

Test(cfg, flag_equals_value_form_works)
{
    cfg_t c;
    cfg_action_t action;
    const char *path;
    int rc = ARGS(&c, &action, &path, "--port=9001", "--model-repository=/m", "--admin-token=--x",
                  "--port", "9002", "--device=cuda:1");
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect_eq(c.server.port, 9002, "later flags win");
    cr_expect_str_eq(c.repository, "/m");
    cr_expect_str_eq(c.server.admin_token, "--x");
    cr_expect_str_eq(dev_text(&c.device), "cuda:1");
}

Test(cfg, config_file_is_read_first_wherever_it_stands)
{
    tmp_dir_t t;
    tmp_make(&t);
    const char *file = tmp_write(&t, "f.json",
                                 "{\"server\": {\"port\": 1234, \"threads\": 9},"
                                 " \"device\": \"cpu\"}");
    cfg_t c;
    cfg_action_t action;
    const char *path = NULL;
    int rc = ARGS(&c, &action, &path, "--port", "9000", "--config", file);
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect_eq(c.server.port, 9000, "the flag overrides the file");
    cr_expect_eq(c.server.threads, 9);
    cr_expect_str_eq(dev_text(&c.device), "cpu");
    cr_expect_str_eq(path, file);

    char arg[160];
    snprintf(arg, sizeof arg, "--config=%s", file);
    rc = ARGS(&c, &action, &path, arg);
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect_eq(c.server.port, 1234);
    tmp_remove(&t);
}

Test(cfg, config_file_errors_come_through)
{
    tmp_dir_t t;
    tmp_make(&t);
    const char *file = tmp_write(&t, "f.json", "{\"server\": {\"prot\": 1}}");
    cfg_t c;
    cfg_defaults(&c);
    c.server.port = 4321;
    cfg_action_t action = CFG_ACTION_VERSION;
    const char *path = "unset";
    cr_expect_eq(ARGS(&c, &action, &path, "--config", file), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), file) && strstr(fs_errmsg(), "unknown key \"server.prot\""), "%s",
              fs_errmsg());
    cr_expect_eq(c.server.port, 4321, "out untouched on error");
    cr_expect_eq(action, CFG_ACTION_VERSION);
    cr_expect_str_eq(path, "unset");
    cr_expect_eq(ARGS(&c, &action, &path, "--config", "/nonexistent/flatserve.json"), FS_ENOENT);
    cr_expect(strstr(fs_errmsg(), "/nonexistent/flatserve.json"), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--config", file, "--config", file), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "'--config' given twice"), "%s", fs_errmsg());
    tmp_remove(&t);
}

Test(cfg, unknown_flag_is_refused)
{
    cfg_t c;
    cfg_action_t action;
    const char *path;
    cr_expect_eq(ARGS(&c, &action, &path, "--port", "1", "--foo"), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "unknown flag '--foo' (see --help)");
    cr_expect_eq(ARGS(&c, &action, &path, "--foo=bar"), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "unknown flag '--foo' (see --help)");
    cr_expect_eq(ARGS(&c, &action, &path, "serve"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "unexpected argument 'serve'"), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "-p"), FS_EINVAL);
}

Test(cfg, missing_value_names_the_flag)
{
    cfg_t c;
    cfg_action_t action;
    const char *path;
    cr_expect_eq(ARGS(&c, &action, &path, "--port"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "flag '--port' needs a value (--port N)"), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--host", "--port", "1"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "'--host' needs a value"), "%s", fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "--port"), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--config"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "'--config' needs a value"), "%s", fs_errmsg());
}

Test(cfg, flag_values_are_validated_like_file_keys)
{
    cfg_t c;
    cfg_action_t action;
    const char *path;
    cr_expect_eq(ARGS(&c, &action, &path, "--port", "80x"), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "--port: expected an integer 0..65535, got \"80x\"");
    cr_expect_eq(ARGS(&c, &action, &path, "--port", "65536"), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "--port: expected an integer 0..65535, got 65536");
    cr_expect_eq(ARGS(&c, &action, &path, "--port="), FS_EINVAL);
    cr_expect_eq(ARGS(&c, &action, &path, "--threads", "99999999999999999999"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--threads: expected an integer 1..1024"), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--device", "gpu"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--device: expected \"auto\", \"cuda:all\""), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--max-queue-delay", "5"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--max-queue-delay: duration \"5\": missing unit"), "%s",
              fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--precision", "int8"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--precision: expected one of"), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--log-level", "loud"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--log-level:"), "%s", fs_errmsg());
}

Test(cfg, model_flag_repeats_and_replaces_all)
{
    cfg_t c;
    cfg_action_t action;
    const char *path;
    int rc = ARGS(&c, &action, &path, "--model", "a", "--port", "1", "--model=b,c");
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect(!c.models_all);
    cr_assert_eq(c.n_models, 3);
    cr_expect_str_eq(c.models[0], "a");
    cr_expect_str_eq(c.models[1], "b");
    cr_expect_str_eq(c.models[2], "c");
    cr_expect_eq(ARGS(&c, &action, &path, "--model", "a", "--model", "../etc"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--model: expected a model name"), "%s", fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "\"../etc\""), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--model", "a", "--model", "a"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "listed twice"), "%s", fs_errmsg());
}

Test(cfg, model_control_flags_and_keys)
{
    cfg_t c;
    cfg_action_t action;
    const char *path;
    cr_assert_eq(ARGS(&c, &action, &path, "--port", "1"), 0, "%s", fs_errmsg());
    cr_expect_eq(c.model_control_mode, CFG_CONTROL_EXPLICIT, "the default keeps the startup list");
    cr_expect_eq(c.repository_poll_secs, 15);
    int rc = ARGS(&c, &action, &path, "--model-control-mode", "poll", "--repository-poll-secs",
                  "3", "--load-model", "a", "--load-model=b");
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect_eq(c.model_control_mode, CFG_CONTROL_POLL);
    cr_expect_eq(c.repository_poll_secs, 3);
    cr_expect(!c.models_all);
    cr_expect_eq(c.n_models, 2);
    expect_round_trip(&c);
    cr_assert_eq(ARGS(&c, &action, &path, "--load-model", "*", "--model-control-mode=none"), 0,
                 "%s", fs_errmsg());
    cr_expect(c.models_all, "--load-model '*': every model");
    cr_expect_eq(c.model_control_mode, CFG_CONTROL_NONE);
    cr_expect_eq(ARGS(&c, &action, &path, "--model-control-mode", "manual"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--model-control-mode: expected one of \"explicit\", \"none\", "
                                  "\"poll\", got \"manual\""), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--repository-poll-secs", "0"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--repository-poll-secs: expected an integer 1..86400"), "%s",
              fs_errmsg());
    c = parse_ok("{\"model_control_mode\": \"explicit\", \"repository_poll_secs\": 60}");
    cr_expect_eq(c.model_control_mode, CFG_CONTROL_EXPLICIT);
    cr_expect_eq(c.repository_poll_secs, 60);
    FAILS("{\"model_control_mode\": 1}", FS_EINVAL, "\"model_control_mode\": expected one of");
}

Test(cfg, policy_flag_takes_a_comma_list)
{
    cfg_t c;
    cfg_action_t action;
    const char *path;
    int rc = ARGS(&c, &action, &path, "--policy", "arena,idle_trim");
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_assert_eq(c.memory.n_policies, 2);
    cr_expect_eq(c.memory.policies[0].kind, ALLOC_POLICY_ARENA);
    cr_expect_eq(c.memory.policies[1].kind, ALLOC_POLICY_IDLE_TRIM);
    cr_expect_eq(c.memory.policies[1].params.idle_trim.after_ns, 30 * SEC);
    cr_expect_eq(ARGS(&c, &action, &path, "--policy", "arena,arena"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--policy: a second \"arena\" policy"), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--policy", "cache,lru"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "--policy: expected a policy kind"), "%s", fs_errmsg());
    cr_expect(strstr(fs_errmsg(), "\"lru\""), "%s", fs_errmsg());
    cr_expect_eq(ARGS(&c, &action, &path, "--policy", "cache,,arena"), FS_EINVAL);
}

Test(cfg, action_flags_set_the_action)
{
    cfg_t c;
    cfg_action_t action;
    const char *path;
    cr_assert_eq(ARGS(&c, &action, &path, "--help"), 0);
    cr_expect_eq(action, CFG_ACTION_HELP);
    cr_assert_eq(ARGS(&c, &action, &path, "-h"), 0);
    cr_expect_eq(action, CFG_ACTION_HELP);
    cr_assert_eq(ARGS(&c, &action, &path, "--version"), 0);
    cr_expect_eq(action, CFG_ACTION_VERSION);
    cr_assert_eq(ARGS(&c, &action, &path, "--check-config", "--port", "5"), 0);
    cr_expect_eq(action, CFG_ACTION_CHECK);
    cr_expect_eq(c.server.port, 5, "--check-config applies the other flags");
    cr_assert_eq(ARGS(&c, &action, &path, "--check-config", "--help", "--version"), 0);
    cr_expect_eq(action, CFG_ACTION_HELP);
    /* Help needs no configuration: a missing file does not stop it. */
    cr_assert_eq(ARGS(&c, &action, &path, "--config", "/nonexistent.json", "--help"), 0);
    cr_expect_eq(action, CFG_ACTION_HELP);
    cr_expect_eq(ARGS(&c, &action, &path, "--help=yes"), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "'--help' takes no value"), "%s", fs_errmsg());
    /* Still refused: an unknown flag beside --help. */
    cr_expect_eq(ARGS(&c, &action, &path, "--help", "--nope"), FS_EINVAL);
}

Test(cfg, usage_lists_every_flag)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    cfg_usage(f);
    fclose(f);
    static const char *const names[] = {
        "--config FILE", "--host",       "--port N",           "--threads",
        "--device",      "--repository", "--model-repository", "--model NAME",
        "--policy LIST", "--precision",  "--max-batch-size",   "--max-queue-delay",
        "--admin-token", "--log-level",  "--log-format",       "--check-config",
        "--help",        "--version",    "--exit-on-error BOOL"};
    for (size_t i = 0; i < N_OF(names); i++)
        cr_expect(strstr(buf, names[i]), "usage lacks %s:\n%s", names[i], buf);
    free(buf);
}

/* --- a model's config.json ------------------------------------------------------------- */

Test(cfg, model_defaults_come_from_the_server_config)
{
    cfg_t c = parse_ok("{\"batching\": {\"max_batch_size\": 5}, \"engine\": {\"precision\":"
                       " \"fp16\"}, \"device\": \"cpu\"}");
    cfg_model_t m;
    cfg_model_defaults(&c, &m);
    cr_expect_str_eq(dev_text(&m.device), "");
    cr_expect_eq(m.batching.max_batch_size, 5);
    cr_expect_eq(m.batching.max_queue, 1024);
    cr_expect_str_eq(eng_precision_name(m.engine.precision), "fp16");
    cr_expect_eq(m.engine.max_plans, 16);
}

Test(cfg, model_config_keys_are_read)
{
    cfg_t c;
    cfg_defaults(&c);
    cfg_model_t m;
    cfg_model_defaults(&c, &m);
    const char *json = "{\"device\": \"cuda:1\", \"max_batch_size\": 32, \"max_queue_delay\":"
                       " \"1ms\", \"max_queue\": 8, \"instances\": 2, \"precision\": \"tf32\","
                       " \"threads\": 4, \"max_plans\": 2, \"cuda_graphs\": false}";
    int rc = cfg_model_parse(json, strlen(json), "models/m/config.json", &m);
    cr_assert_eq(rc, 0, "%s", fs_errmsg());
    cr_expect_str_eq(dev_text(&m.device), "cuda:1");
    cr_expect_eq(m.batching.max_batch_size, 32);
    cr_expect_eq(m.batching.max_queue_delay_ns, MS);
    cr_expect_eq(m.batching.max_queue, 8);
    cr_expect_eq(m.batching.instances, 2);
    cr_expect_str_eq(eng_precision_name(m.engine.precision), "tf32");
    cr_expect_eq(m.engine.threads, 4);
    cr_expect_eq(m.engine.max_plans, 2);
    cr_expect(!m.engine.cuda_graphs);
}

Test(cfg, model_config_errors_name_the_file_and_key)
{
    cfg_t c;
    cfg_defaults(&c);
    cfg_model_t m, before;
    cfg_model_defaults(&c, &m);
    memcpy(&before, &m, sizeof m);
    const char *json = "{\"max_batch_size\": 4, \"batching\": {}}";
    cr_expect_eq(cfg_model_parse(json, strlen(json), "models/m/config.json", &m), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "models/m/config.json: unknown key \"batching\" (known keys: "
                                  "device, max_batch_size, max_queue_delay"),
              "%s", fs_errmsg());
    cr_expect(memcmp(&m, &before, sizeof m) == 0);
    json = "{\"instances\": 65}";
    cr_expect_eq(cfg_model_parse(json, strlen(json), "models/m/config.json", &m), FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(),
                     "models/m/config.json: \"instances\": expected an integer 0..64, got 65");
    json = "{\"device\": \"auto\"}";
    cr_expect_eq(cfg_model_parse(json, strlen(json), "models/m/config.json", &m), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "\"device\": expected \"cpu\", \"cuda\", \"cuda:N\""), "%s",
              fs_errmsg());
    json = "{\"max_queue_delay\": 5}";
    cr_expect_eq(cfg_model_parse(json, strlen(json), "models/m/config.json", &m), FS_EINVAL);
    cr_expect(strstr(fs_errmsg(), "\"max_queue_delay\": expected a duration"), "%s", fs_errmsg());
    cr_expect(memcmp(&m, &before, sizeof m) == 0);
}

Test(cfg, model_load_file_without_a_file_gives_the_defaults)
{
    tmp_dir_t t;
    tmp_make(&t);
    cfg_t c;
    cfg_defaults(&c);
    cfg_model_t m, want;
    cfg_model_defaults(&c, &want);
    char missing[128];
    snprintf(missing, sizeof missing, "%s/config.json", t.dir);
    memset(&m, 0x5a, sizeof m);
    cr_expect_eq(cfg_model_load_file(missing, &c, &m), 0, "%s", fs_errmsg());
    cr_expect(memcmp(&m, &want, sizeof m) == 0);

    const char *file = tmp_write(&t, "config.json", "{\"max_batch_size\": 2}");
    cr_expect_eq(cfg_model_load_file(file, &c, &m), 0, "%s", fs_errmsg());
    cr_expect_eq(m.batching.max_batch_size, 2);
    tmp_remove(&t);
}

Test(cfg, model_load_file_errors_name_the_file)
{
    tmp_dir_t t;
    tmp_make(&t);
    cfg_t c;
    cfg_defaults(&c);
    cfg_model_t m;
    const char *file = tmp_write(&t, "config.json", "{\"max_batch\": 2}");
    cr_expect_eq(cfg_model_load_file(file, &c, &m), FS_EINVAL);
    char want[256];
    snprintf(want, sizeof want, "%s: unknown key \"max_batch\"", file);
    cr_expect(strstr(fs_errmsg(), want), "%s", fs_errmsg());
    const char *broken = tmp_write(&t, "broken.json", "{\"max_batch_size\": }");
    cr_expect_eq(cfg_model_load_file(broken, &c, &m), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), broken) && strstr(fs_errmsg(), "column 20"), "%s", fs_errmsg());
    tmp_remove(&t);
}

/* --- cfg_diff ---------------------------------------------------------------------------- */

Test(cfg, diff_of_equal_configs_is_empty)
{
    cfg_t a, b;
    cfg_defaults(&a);
    cfg_defaults(&b);
    bool live = true;
    char restart[256] = "junk";
    cfg_diff(&a, &b, &live, restart, sizeof restart);
    cr_expect(!live);
    cr_expect_str_eq(restart, "");
}

Test(cfg, negative_zero_fraction_is_unset_and_no_change)
{
    cfg_t a = parse_ok("{\"memory\": {\"limit_fraction\": -0}}"), b;
    cr_expect_eq(a.memory.limit_fraction, 0.0);
    cr_expect(!signbit(a.memory.limit_fraction), "-0 is stored as 0");
    cfg_defaults(&b);
    bool live = true;
    char restart[256] = "junk";
    cfg_diff(&b, &a, &live, restart, sizeof restart);
    cr_expect(!live);
    cr_expect_str_eq(restart, "", "-0 differs from the default 0: %s", restart);
}

Test(cfg, diff_sees_live_changes)
{
    static const char *const live_docs[] = {
        "{\"memory\": {\"policies\": [\"arena\"]}}",
        "{\"memory\": {\"policies\": [\"cache\", \"cache\"]}}",
        "{\"memory\": {\"policies\": [{\"kind\": \"cache\"}, \"idle_trim\"]}}",
        "{\"memory\": {\"tick\": \"1s\"}}",
        "{\"batching\": {\"max_queue_delay\": \"1ms\"}}",
        "{\"batching\": {\"instances\": 2}}",
        "{\"log\": {\"level\": \"debug\"}}",
        "{\"log\": {\"format\": \"json\"}}",
    };
    cfg_t a;
    cfg_defaults(&a);
    for (size_t i = 0; i < N_OF(live_docs); i++) {
        cfg_t b = parse_ok(live_docs[i]);
        bool live = false;
        char restart[256];
        cfg_diff(&a, &b, &live, restart, sizeof restart);
        cr_expect(live, "%s: not live", live_docs[i]);
        cr_expect_str_eq(restart, "", "%s", live_docs[i]);
    }
    /* Another kind's parameters do not matter to a policy. */
    cfg_t b;
    cfg_defaults(&b);
    b.memory.policies[0].params.idle_trim.after_ns = 1;
    bool live = true;
    char restart[64];
    cfg_diff(&a, &b, &live, restart, sizeof restart);
    cr_expect(!live);
}

Test(cfg, diff_lists_what_needs_a_restart)
{
    cfg_t a;
    cfg_defaults(&a);
    cfg_t b = parse_ok("{\"server\": {\"port\": 1, \"admin_token\": \"t\"}, \"device\": \"cpu\","
                       " \"models\": [\"m\"], \"engine\": {\"precision\": \"fp16\"},"
                       " \"memory\": {\"limit_bytes\": \"1GiB\", \"pinned_limit\": 0,"
                       " \"tick\": \"1s\"}}");
    bool live = false;
    char restart[256];
    cfg_diff(&a, &b, &live, restart, sizeof restart);
    cr_expect(live, "memory.tick changed");
    cr_expect_str_eq(restart, "server.port, server.admin_token, device, models, engine.precision,"
                              " memory.limit_bytes, memory.pinned_limit");
    /* A short buffer keeps whole names and says more follow. */
    char small[24];
    cfg_diff(&a, &b, &live, small, sizeof small);
    cr_expect_str_eq(small, "server.port, ...");
    cfg_diff(&a, &b, &live, small, 1);
    cr_expect_str_eq(small, "");
}

Test(cfg, doubles_out_of_int64_range_are_written_without_an_integer_cast)
{
    char buf[40];
    cr_expect_str_eq(cfg_double_text(0.5, buf, sizeof buf), "0.5");
    cr_expect_str_eq(cfg_double_text(3.0, buf, sizeof buf), "3");
    /* Beyond int64 (and NaN) the integer form is never tried: a cast there
     * would be undefined (clang's float-cast-overflow). */
    cr_expect_str_eq(cfg_double_text(1e300, buf, sizeof buf), "1e+300");
    cr_expect_str_eq(cfg_double_text(-1e19, buf, sizeof buf), "-1e+19");
    cr_expect_str_eq(cfg_double_text(NAN, buf, sizeof buf), "nan");
}
