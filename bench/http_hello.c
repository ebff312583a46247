/* http_hello.c -- the baseline of bench/http_bench.sh: libmicrohttpd with
 * exactly the daemon flags and options of server/http.c, answering every
 * request with 200 and a fixed JSON body the size of flatserve's answer to
 * the demo MLP (batch 1, ten probabilities).
 *
 * flatserve's requests per second divided by this server's is the share of
 * the HTTP layer's ceiling that routing, the codec, batching and the model
 * leave; any change to the MHD setup in server/http.c must be made here too,
 * or the ratio measures the difference in setup instead.
 *
 *   http_hello [--port N] [--threads N]
 *
 * Listens on 127.0.0.1 only (a benchmark target, never a service); --port 0
 * (the default) takes an ephemeral port. When ready it prints "listening on
 * http://127.0.0.1:PORT" on stderr. SIGTERM and SIGINT stop it (exit 0). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

/* The shape and length (~250 bytes) of flatserve's MLP answer, so both
 * servers write about as many bytes a response. */
static const char hello_body[] =
    "{\"model_name\":\"mlp\",\"model_version\":\"1\",\"outputs\":[{\"name\":\"probabilities\","
    "\"datatype\":\"FP32\",\"shape\":[1,10],\"data\":[0.0912345678,0.101234567,0.0987654321,"
    "0.112345678,0.0923456789,0.105678901,0.0898765432,0.0956789012,0.117890123,"
    "0.0954321098]}]}";

/* Any non-NULL value: marks a connection's request as seen once. */
static int hello_request_mark;

/* Answers every method and URL the same way. The first call for a request
 * only marks it (MHD then reads the body); body pieces are dropped; the call
 * with no body left queues the answer. A response is made per request, as
 * server/http.c does, so both servers take the same MHD path. Returning
 * MHD_NO (no memory for the response) makes MHD close the connection. */
static enum MHD_Result hello_on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                       const char *method, const char *version,
                                       const char *upload_data, size_t *upload_data_size,
                                       void **con_cls)
{
    if (*con_cls == NULL) {
        *con_cls = &hello_request_mark;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        sizeof hello_body - 1, (void *)hello_body, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* Parses a decimal flag value in [min, max] into *out. 0 or -1 after saying
 * which flag was wrong on stderr; *out is unchanged on error. */
static int hello_parse_uint(const char *flag, const char *text, unsigned long min,
                            unsigned long max, unsigned long *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long v = text ? strtoul(text, &end, 10) : 0;
    if (!text || errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < min ||
        v > max) {
        fprintf(stderr, "http_hello: %s expects an integer in %lu..%lu, got \"%s\"\n", flag, min,
                max, text ? text : "");
        return -1;
    }
    *out = v;
    return 0;
}

static void hello_usage(FILE *out)
{
    fprintf(out, "usage: http_hello [--port N] [--threads N]\n"
                 "  --port N     port on 127.0.0.1; 0 (default): an ephemeral port\n"
                 "  --threads N  MHD thread pool size, as flatserve's --threads (default 4)\n");
}

int main(int argc, char **argv)
{
    unsigned long port = 0, threads = 4;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            hello_usage(stdout);
            return 0;
        }
        if (strcmp(a, "--port") == 0) {
            if (hello_parse_uint(a, i + 1 < argc ? argv[++i] : NULL, 0, 65535, &port) != 0)
                return 2;
        } else if (strcmp(a, "--threads") == 0) {
            if (hello_parse_uint(a, i + 1 < argc ? argv[++i] : NULL, 1, 1024, &threads) != 0)
                return 2;
        } else {
            fprintf(stderr, "http_hello: unknown argument \"%s\"\n", a);
            hello_usage(stderr);
            return 2;
        }
    }

    /* Blocked before MHD starts its threads, which inherit the mask, so only
     * main's sigwait takes them; a client gone mid-answer must not kill us. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    /* server/http.c's flags and options, with its defaults (connection
     * timeout 30 s); the completion callback and logger there only do
     * flatserve's bookkeeping, so MHD's own stderr log stands in. */
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, hello_on_access, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads,
        MHD_OPTION_CONNECTION_TIMEOUT, 30u,
        MHD_OPTION_CONNECTION_LIMIT, 16384u,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "http_hello: cannot listen on 127.0.0.1:%lu (in use?)\n", port);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "listening on http://127.0.0.1:%u\n", info ? info->port : (unsigned)port);

    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    MHD_stop_daemon(d);
    return 0;
}
