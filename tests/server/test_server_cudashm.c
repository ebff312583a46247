/* test_server_cudashm.c -- Triton's CUDA shared memory extension over
 * HTTP: a register body's refusals name what is wrong (in every build; a
 * build without CUDA then refuses saying it has no GPU support), and on a
 * GPU a region another process allocated serves an inference's input and
 * output, answering what the JSON path answers. The GPU test forks its
 * client before any CUDA call in this process (an IPC handle cannot be
 * opened in the process that made it) and skips without a CUDA device. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/shm.h"
#include "tests/server/server_fixture.h"
#include "tests/server/shm_mlp.h"
#include "tests/server/shm_test.h"

#if FS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define IN_BYTES (ROWS * MLP_IN * 4)
#define OUT_BYTES (ROWS * MLP_OUT * 4)
#define REGION_BYTES 4096
#define OUT_OFF 1024 /* the output's range in the region; 8 bytes past it stay 0xee */

/* Padded standard base64 of n bytes into out (4 * ceil(n / 3) + 1 bytes). */
static void b64_encode(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        out[o++] = digits[v >> 18 & 63];
        out[o++] = digits[v >> 12 & 63];
        out[o++] = i + 1 < n ? digits[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? digits[v & 63] : '=';
    }
    out[o] = '\0';
}

static void cuda_register(srv_fixture_t *f, const char *name, const char *b64, int device,
                          uint64_t size, long want, const char *needle)
{
    char path[128], body[512];
    snprintf(path, sizeof path, "/v2/cudasharedmemory/region/%s/register", name);
    snprintf(body, sizeof body, "{\"raw_handle\":{\"b64\":\"%s\"},\"device_id\":%d,"
                                "\"byte_size\":%llu}", b64, device, (unsigned long long)size);
    http_resp_t r = http_post(f->port, path, body);
    if (want == 200) {
        cr_expect_eq(r.status, 200, "register %s: %ld %s", name, r.status, r.body);
        free(r.body);
    } else {
        http_expect_error(&r, want, needle);
    }
}

Test(srv_cudashm_http, register_refuses_a_wrong_body_naming_what_is_wrong, .timeout = 60)
{
    srv_fixture_t f;
    fixture_init(&f);
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    cr_expect_eq(has_extension(&f, "cuda_shared_memory"), FS_HAVE_CUDA != 0,
                 "the extension is listed exactly in the CUDA build");
    const char *reg = "/v2/cudasharedmemory/region/g/register";
    static const struct {
        const char *body, *want;
    } bad[] = {
        {"not json", "the body must be a JSON object {\"raw_handle\": {\"b64\"}, \"device_id\", "
                     "\"byte_size\"}"},
        {"{\"device_id\":0,\"byte_size\":64}", "\"raw_handle\" is missing"},
        {"{\"raw_handle\":\"AAAA\",\"device_id\":0,\"byte_size\":64}",
         "\"raw_handle\" must be an object {\"b64\": <the base64 of the cudaIpcMemHandle_t>}"},
        {"{\"raw_handle\":{\"b64\":7},\"device_id\":0,\"byte_size\":64}",
         "\"raw_handle\" must be an object {\"b64\""},
        {"{\"raw_handle\":{\"b64\":\"AA!A\"},\"device_id\":0,\"byte_size\":64}",
         "\"raw_handle\".\"b64\" is not padded standard base64"},
        {"{\"raw_handle\":{\"b64\":\"AAA\"},\"device_id\":0,\"byte_size\":64}",
         "\"raw_handle\".\"b64\" is not padded standard base64"},
        {"{\"raw_handle\":{\"b64\":\"A=AA\"},\"device_id\":0,\"byte_size\":64}",
         "\"raw_handle\".\"b64\" is not padded standard base64"},
        {"{\"raw_handle\":{\"b64\":\"AA==\"},\"device_id\":0,\"byte_size\":64}",
         "\"raw_handle\".\"b64\" decodes to 1 bytes, but a cudaIpcMemHandle_t has 64"},
        {"{\"raw_handle\":{\"b64\":\"\"},\"device_id\":0,\"byte_size\":64}",
         "decodes to 0 bytes, but a cudaIpcMemHandle_t has 64"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http_resp_t r = http_post(f.port, reg, bad[i].body);
        http_expect_error(&r, 400, bad[i].want);
    }
    /* 66 zero bytes (88 characters, one more group than 64 take). */
    char b64[128];
    uint8_t zeros[66] = {0};
    b64_encode(zeros, 66, b64);
    cuda_register(&f, "g", b64, 0, 64, 400, "decodes to 66 bytes, but a cudaIpcMemHandle_t has 64");
    b64_encode(zeros, SRV_SHM_CUDA_HANDLE_BYTES, b64);
    cr_expect_eq(strlen(b64), 88);
    char body[512];
    snprintf(body, sizeof body, "{\"raw_handle\":{\"b64\":\"%s\"},\"byte_size\":64}", b64);
    http_resp_t r = http_post(f.port, reg, body);
    http_expect_error(&r, 400, "CUDA shared memory register of '/v2/cudasharedmemory/region/g/"
                               "register': \"device_id\" is missing");
    snprintf(body, sizeof body, "{\"raw_handle\":{\"b64\":\"%s\"},\"device_id\":-1,"
                                "\"byte_size\":64}", b64);
    r = http_post(f.port, reg, body);
    http_expect_error(&r, 400, "\"device_id\" must be a non-negative integer");
    snprintf(body, sizeof body, "{\"raw_handle\":{\"b64\":\"%s\"},\"device_id\":0}", b64);
    r = http_post(f.port, reg, body);
    http_expect_error(&r, 400, "\"byte_size\" is missing");
    cuda_register(&f, "g", b64, 0, 0, 400, "CUDA shared memory region 'g': byte_size must be at "
                                           "least 1");
    cuda_register(&f, "a:b", b64, 0, 64, 400, "CUDA shared memory region name 'a:b' must be");
#if FS_HAVE_CUDA
    cuda_register(&f, "g", b64, 9999, 64, 400, "device_id 9999 is not a CUDA device of this "
                                               "server");
#else
    cuda_register(&f, "g", b64, 9999, 64, 400, "cannot register CUDA shared memory region 'g': "
                                               "this server was built without GPU support");
    cuda_register(&f, "g", b64, 0, 64, 400, "this server was built without GPU support");
#endif
    /* One name space: a system region's name is taken for CUDA. */
    char key[64], sys[256];
    void *obj;
    shm_test_make("cuda", 4096, key, &obj);
    snprintf(sys, sizeof sys, "{\"key\":\"%s\",\"byte_size\":64}", key);
    cr_expect_eq(status_of(http_post(f.port, "/v2/systemsharedmemory/region/s/register", sys)),
                 200);
    cuda_register(&f, "s", b64, 0, 64, 400, "cannot register CUDA shared memory region 's': the "
                                            "name is registered as system shared memory");
    r = http_get(f.port, "/v2/cudasharedmemory/status");
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(r.body, "[]", "nothing was registered");
    free(r.body);
    r = http_get(f.port, "/v2/cudasharedmemory/region/g/status");
    http_expect_error(&r, 400, "CUDA shared memory region 'g' is not registered");
    r = http_post(f.port, "/v2/models/mlp/infer",
                  "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\","
                  "\"parameters\":{\"shared_memory_region\":\"g\",\"shared_memory_byte_size\":256}}]}");
    http_expect_error(&r, 400, "input 'input': shared memory region 'g' is not registered");
    cr_expect_eq(status_of(http_post(f.port, "/v2/cudasharedmemory/region/s/unregister", "")), 200);
    cr_expect_eq(status_of(http_get(f.port, "/v2/systemsharedmemory/region/s/status")), 200,
                 "a CUDA unregister leaves the system region of that name");
    fixture_stop(&f);
    shm_test_drop(key, obj, 4096);
}

#if FS_HAVE_CUDA

/* What the client process says first: rc 0 and its handle; 1: no CUDA
 * device (skip); 2: a CUDA error, in `error`. */
typedef struct hello {
    int rc;
    int n_devices;
    char error[200];
    uint8_t handle[SRV_SHM_CUDA_HANDLE_BYTES];
} hello_t;

static int read_all(int fd, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, (char *)p + got, n - got);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
    for (size_t put = 0; put < n;) {
        ssize_t k = write(fd, (const char *)p + put, n - put);
        if (k <= 0)
            return -1;
        put += (size_t)k;
    }
    return 0;
}

/* The client process: allocates REGION_BYTES on device 0 (the input at 0,
 * 0xee elsewhere), sends a hello_t with its IPC handle, then answers 'R'
 * with the bytes [OUT_OFF, OUT_OFF + OUT_BYTES + 8) and ends at 'Q' or
 * when the pipe closes. Never returns. */
static void client_main(int in, int out)
{
    hello_t h = {0};
    void *d = NULL;
    cudaError_t err = cudaGetDeviceCount(&h.n_devices);
    if (err != cudaSuccess || h.n_devices == 0) {
        h.rc = 1;
        snprintf(h.error, sizeof h.error, "%s", err != cudaSuccess ? cudaGetErrorString(err)
                                                                   : "no device");
        write_all(out, &h, sizeof h);
        _exit(0);
    }
    static uint8_t host[REGION_BYTES];
    memset(host, 0xee, sizeof host);
    float x[ROWS * MLP_IN];
    input_values(x);
    memcpy(host, x, sizeof x);
    cudaIpcMemHandle_t ipc;
    if ((err = cudaSetDevice(0)) != cudaSuccess || (err = cudaMalloc(&d, REGION_BYTES)) ||
        (err = cudaMemcpy(d, host, REGION_BYTES, cudaMemcpyHostToDevice)) ||
        (err = cudaIpcGetMemHandle(&ipc, d))) {
        h.rc = 2;
        snprintf(h.error, sizeof h.error, "%s", cudaGetErrorString(err));
        write_all(out, &h, sizeof h);
        _exit(1);
    }
    memcpy(h.handle, &ipc, sizeof h.handle);
    write_all(out, &h, sizeof h);
    char cmd;
    while (read_all(in, &cmd, 1) == 0 && cmd == 'R') {
        uint8_t back[OUT_BYTES + 8];
        if (cudaMemcpy(back, (char *)d + OUT_OFF, sizeof back, cudaMemcpyDeviceToHost))
            memset(back, 0, sizeof back);
        if (write_all(out, back, sizeof back))
            break;
    }
    cudaFree(d);
    _exit(0);
}

/* The client's bytes [OUT_OFF, OUT_OFF + OUT_BYTES + 8) now. */
static void client_read(int to, int from, uint8_t *back)
{
    cr_assert_eq(write_all(to, "R", 1), 0);
    cr_assert_eq(read_all(from, back, OUT_BYTES + 8), 0, "the client process ended");
}

static const char *shm_body(char *buf, size_t len, unsigned out_size)
{
    char outs[256] = "";
    if (out_size)
        snprintf(outs, sizeof outs, ",\"outputs\":[{\"name\":\"probabilities\",\"parameters\":{"
                                    "\"shared_memory_region\":\"gpu\",\"shared_memory_offset\":%d,"
                                    "\"shared_memory_byte_size\":%u}}]", OUT_OFF, out_size);
    snprintf(buf, len,
             "{\"inputs\":[{\"name\":\"input\",\"shape\":[%d,%d],\"datatype\":\"FP32\","
             "\"parameters\":{\"shared_memory_region\":\"gpu\",\"shared_memory_offset\":0,"
             "\"shared_memory_byte_size\":%d}}]%s}", ROWS, MLP_IN, IN_BYTES, outs);
    return buf;
}

static void expect_close(const float *got, const float *want, const char *what)
{
    for (int i = 0; i < ROWS * MLP_OUT; i++)
        cr_expect(fabsf(got[i] - want[i]) <= 1e-5f + 1e-4f * fabsf(want[i]),
                  "%s [%d]: %.9g, the JSON path %.9g", what, i, got[i], want[i]);
}

Test(srv_cudashm_http, a_region_of_another_process_serves_input_and_output, .timeout = 120)
{
    int to_client[2], from_client[2];
    cr_assert_eq(pipe(to_client), 0);
    cr_assert_eq(pipe(from_client), 0);
    pid_t pid = fork(); /* before any CUDA call in this process */
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(to_client[1]);
        close(from_client[0]);
        client_main(to_client[0], from_client[1]);
    }
    close(to_client[0]);
    close(from_client[1]);
    int to = to_client[1], from = from_client[0];
    hello_t h;
    cr_assert_eq(read_all(from, &h, sizeof h), 0, "the client process said nothing");
    if (h.rc == 1) {
        close(to);
        close(from);
        waitpid(pid, NULL, 0);
        cr_skip_test("needs a CUDA device (%s)", h.error);
    }
    cr_assert_eq(h.rc, 0, "the client process: %s", h.error);
    char b64[128];
    b64_encode(h.handle, sizeof h.handle, b64);

    srv_fixture_t f;
    fixture_init(&f);
    f.cfg.device = (cfg_device_t){.set = true, .dev = {ENG_DEVICE_CUDA, 0}};
    fixture_add_model(&f, "mlp", "mlp", 1);
    fixture_start(&f);
    cr_expect(has_extension(&f, "cuda_shared_memory"));
    float want[ROWS * MLP_OUT];
    json_path_result(&f, want);

    /* 1 GiB: past the allocation however the driver rounds its size. */
    cuda_register(&f, "big", b64, 0, 1ull << 30, 400, "byte_size 1073741824 is past the end of "
                                                     "the allocation its raw_handle opens");
    cuda_register(&f, "gpu", b64, h.n_devices, REGION_BYTES, 400, "is not a CUDA device of this "
                                                                  "server");
    cuda_register(&f, "gpu", b64, 0, REGION_BYTES, 200, NULL);
    cuda_register(&f, "gpu", b64, 0, REGION_BYTES, 400, "CUDA shared memory region 'gpu' is "
                                                        "already registered");
    http_resp_t r = http_get(f.port, "/v2/cudasharedmemory/status");
    cr_expect_str_eq(r.body, "[{\"name\":\"gpu\",\"device_id\":0,\"byte_size\":4096}]");
    free(r.body);
    r = http_get(f.port, "/v2/cudasharedmemory/region/gpu/status");
    cr_expect_str_eq(r.body, "[{\"name\":\"gpu\",\"device_id\":0,\"byte_size\":4096}]");
    free(r.body);
    r = http_get(f.port, "/v2/systemsharedmemory/status");
    cr_expect_str_eq(r.body, "[]", "a CUDA region is not listed as system shared memory");
    free(r.body);

    /* An output larger than its range: refused, the region untouched. */
    char body[1024];
    uint8_t back[OUT_BYTES + 8];
    r = http_post(f.port, "/v2/models/mlp/infer", shm_body(body, sizeof body, 40));
    http_expect_error(&r, 400, "output 'probabilities': shared_memory_byte_size is 40 but the "
                               "output has 80 bytes");
    client_read(to, from, back);
    for (size_t i = 0; i < sizeof back; i++)
        cr_expect_eq(back[i], 0xee, "byte %zu of the output range was written", i);

    /* Input and output in the region. */
    cJSON *doc = infer_ok(&f, shm_body(body, sizeof body, OUT_BYTES + 8));
    cJSON *o = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "outputs"), 0);
    cr_expect_null(cJSON_GetObjectItem(o, "data"), "no data for an output in shared memory");
    cJSON *p = cJSON_GetObjectItem(o, "parameters");
    cr_expect_str_eq(cJSON_GetObjectItem(p, "shared_memory_region")->valuestring, "gpu");
    cr_expect_eq(cJSON_GetObjectItem(p, "shared_memory_byte_size")->valuedouble, OUT_BYTES);
    cJSON_Delete(doc);
    client_read(to, from, back);
    float got[ROWS * MLP_OUT];
    memcpy(got, back, sizeof got);
    expect_close(got, want, "the region's output");
    for (size_t i = OUT_BYTES; i < sizeof back; i++)
        cr_expect_eq(back[i], 0xee, "byte %zu past the output was written", i);

    /* The input in the region, the output in JSON. */
    infer_ok_probabilities(&f, shm_body(body, sizeof body, 0), got);
    expect_close(got, want, "the JSON output of the region's input");

    /* A system unregister of its name leaves it; its own unregister closes it. */
    cr_expect_eq(status_of(http_post(f.port, "/v2/systemsharedmemory/unregister", "")), 200);
    cr_expect_eq(status_of(http_get(f.port, "/v2/cudasharedmemory/region/gpu/status")), 200);
    cr_expect_eq(status_of(http_post(f.port, "/v2/cudasharedmemory/region/gpu/unregister", "")),
                 200);
    r = http_get(f.port, "/v2/cudasharedmemory/status");
    cr_expect_str_eq(r.body, "[]");
    free(r.body);
    r = http_post(f.port, "/v2/models/mlp/infer", shm_body(body, sizeof body, 0));
    http_expect_error(&r, 400, "input 'input': shared memory region 'gpu' is not registered");
    /* Registered at stop: closed by it, before the client frees it. */
    cuda_register(&f, "late", b64, 0, REGION_BYTES, 200, NULL);
    fixture_stop(&f);
    cr_expect_eq(write_all(to, "Q", 1), 0);
    close(to);
    close(from);
    int status = 0;
    cr_expect_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the client process failed");
}

#else

Test(srv_cudashm_http, a_region_of_another_process_serves_input_and_output)
{
    cr_skip_test("this build has no CUDA (make CUDA=1 on a GPU host runs it)");
}

#endif
