/* test_codec_fast.c -- tests of server/codec_fast.c: which request bodies
 * its reader takes and which it hands to the cJSON path, that what it takes
 * reads as the cJSON path reads it (fuzz_codec_readers_agree, the check the
 * codec fuzzer makes on every input), and that what it hands over is
 * answered, errors word for word, as before. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/tensor.h"
#include "server/codec.h"
#include "server/codec_impl.h"
#include "tests/fuzz/fuzz.h"

/* Whether the fast reader takes the body (header_len as for
 * srv_infer_request_parse); where it does, the cJSON path must read the
 * same request. */
static bool fast_takes_n(const void *body, size_t len, size_t header_len)
{
    bool accepted = false;
    int rc = fuzz_codec_readers_agree(body, len, header_len, &accepted);
    cr_expect_eq(rc, 0, "%.*s: %s", (int)len, (const char *)body, fs_errmsg());
    return accepted;
}

static bool fast_takes(const char *json)
{
    return fast_takes_n(json, strlen(json), 0);
}

/* A body the fast reader hands over: srv_infer_request_parse answers it as
 * the cJSON path alone does, with the same code and message. */
static void handed_over(const char *json)
{
    cr_expect(!fast_takes(json), "taken: %s", json);
    srv_infer_request_t *a = NULL, *b = NULL;
    int rc_a = srv_infer_request_parse(json, strlen(json), 0, &a);
    char msg_a[FS_ERRMSG_MAX];
    snprintf(msg_a, sizeof msg_a, "%s", rc_a ? fs_errmsg() : "");
    int rc_b = srv_infer_request_parse_tree(json, strlen(json), 0, &b);
    cr_expect_eq(rc_a, rc_b, "%s", json);
    if (rc_a && rc_b)
        cr_expect_str_eq(msg_a, fs_errmsg(), "%s", json);
    cr_expect_eq(a != NULL, rc_a == 0, "%s", json);
    srv_infer_request_free(a);
    srv_infer_request_free(b);
}

/* One input "x" of `datatype` and `shape` with "data": `data`. */
static const char *one_input(char *buf, size_t len, const char *datatype, const char *shape,
                             const char *data)
{
    snprintf(buf, len,
             "{\"inputs\":[{\"name\":\"x\",\"shape\":%s,\"datatype\":\"%s\",\"data\":%s}]}", shape,
             datatype, data);
    return buf;
}

Test(srv_codec_fast, takes_the_common_requests)
{
    /* bench/infer.lua's shape of body, and the same spread out. */
    cr_expect(fast_takes("{\"inputs\":[{\"name\":\"input\",\"shape\":[1,4],\"datatype\":\"FP32\","
                         "\"data\":[0.0000,0.3253,-0.6101,0.8123]}]}"));
    cr_expect(fast_takes(" {\n \"inputs\" : [ {\t\"name\" : \"input\" ,\r\n\"shape\" : [ 1 , 4 ] ,"
                         " \"datatype\" : \"FP32\" , \"data\" : [ 1 , 2.5 , -3e2 , 4E-1 ] } ] }\n"));
    /* Every member it knows, in any order; "data" before its shape and
     * dtype is read once they are known. */
    cr_expect(fast_takes("{\"outputs\":[{\"parameters\":{\"binary_data\":false},\"name\":\"y\"},"
                         "{\"name\":\"z\"}],\"id\":\"req-7\",\"model\":\"mlp\",\"version\":\"007\","
                         "\"parameters\":{\"binary_data_output\":true},\"inputs\":[{\"data\":"
                         "[1,2,3],\"datatype\":\"INT64\",\"shape\":[3],\"name\":\"a\"},{\"name\":"
                         "\"b\",\"shape\":[2],\"datatype\":\"FP16\",\"parameters\":{},\"data\":"
                         "[0.1,65504]}]}"));
    cr_expect(fast_takes("{\"id\":null,\"model\":null,\"version\":12,\"inputs\":[{\"name\":\"s\","
                         "\"shape\":[],\"datatype\":\"FP64\",\"data\":[0.30000000000000004]}],"
                         "\"outputs\":[]}"));
    /* String bytes as written: UTF-8, and bytes cJSON copies unchecked. */
    cr_expect(fast_takes("{\"id\":\"\xc3\xa9\xff\x7f\",\"inputs\":[{\"name\":\"caf\xc3\xa9\","
                         "\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}"));
    char buf[512];
    cr_expect(fast_takes(one_input(buf, sizeof buf, "FP32", "[0]", "[]")));
    cr_expect(fast_takes(one_input(buf, sizeof buf, "FP32", "[2,2]", "[1,2,3,4]")));
    cr_expect(fast_takes(one_input(buf, sizeof buf, "UINT8", "[2]", "[0,255]")));
    cr_expect(fast_takes(one_input(buf, sizeof buf, "INT32", "[2]", "[-2147483648,1e3]")));
    /* Numbers Clinger's fast path does not cover: from_chars reads them. */
    cr_expect(fast_takes(one_input(buf, sizeof buf, "FP64", "[4]",
                                   "[1e-320,123456789012345678901234567890,"
                                   "0.000000000000000000001,2.2250738585072011e-308]")));
    cr_expect(fast_takes(one_input(buf, sizeof buf, "FP32", "[1]",
                                   "[1.00000000000000000000000000000000000000000000000000000000"
                                   "00001]"))); /* 63 characters: cJSON reads it too */
}

Test(srv_codec_fast, takes_binary_inputs_in_order)
{
    /* Two binary inputs and one JSON one; the section consumed exactly. */
    const char *json = "{\"inputs\":[{\"name\":\"a\",\"shape\":[2],\"datatype\":\"FP32\","
                       "\"parameters\":{\"binary_data_size\":8}},{\"name\":\"b\",\"shape\":[1],"
                       "\"datatype\":\"INT64\",\"data\":[5]},{\"name\":\"c\",\"shape\":[3],"
                       "\"datatype\":\"BOOL\",\"parameters\":{\"binary_data_size\":3}}]}";
    size_t hl = strlen(json);
    /* Aligned and not: both readers view or copy the same bytes alike. */
    for (size_t shift = 0; shift < 2; shift++) {
        /* A size that is a multiple of the alignment, as C11 (and ASan) want. */
        size_t size = (3 * SRV_BINARY_VIEW_ALIGN + hl) / SRV_BINARY_VIEW_ALIGN * SRV_BINARY_VIEW_ALIGN;
        char *mem = aligned_alloc(SRV_BINARY_VIEW_ALIGN, size);
        cr_assert_not_null(mem);
        char *body = mem + SRV_BINARY_VIEW_ALIGN - hl % SRV_BINARY_VIEW_ALIGN + shift;
        memcpy(body, json, hl);
        const float a[2] = {1.5f, -2.0f};
        memcpy(body + hl, a, sizeof a);
        memcpy(body + hl + 8, "\1\0\1", 3);
        cr_expect(fast_takes_n(body, hl + 11, hl));
        cr_expect(!fast_takes_n(body, hl + 12, hl), "a byte left over goes to cJSON");
        body[hl + 9] = 2; /* not a BOOL */
        cr_expect(!fast_takes_n(body, hl + 11, hl));
        free(mem);
    }
}

Test(srv_codec_fast, hands_other_valid_requests_to_cjson)
{
    char buf[512];
    /* Keys it does not know (the protocol's others, extensions), repeated
     * keys (cJSON takes the first), escapes, other forms of values. */
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}],"
                "\"priority\":1}");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1],"
                "\"parameters\":{\"shared_memory_region\":\"r\"}}]}");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}],"
                "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"classification\":2}}]}");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1],"
                "\"data\":[2]}]}");
    handed_over("{\"id\":\"a\",\"id\":\"b\",\"inputs\":[{\"name\":\"x\",\"shape\":[1],"
                "\"datatype\":\"FP32\",\"data\":[1]}]}");
    handed_over("{\"inputs\":[{\"name\":\"x\\u0079\",\"shape\":[1],\"datatype\":\"FP32\","
                "\"data\":[1]}]}");
    handed_over("{\"id\":\"tab\\there\",\"inputs\":[{\"name\":\"x\",\"shape\":[1],"
                "\"datatype\":\"FP32\",\"data\":[1]}]}");
    handed_over(one_input(buf, sizeof buf, "FP32", "[2,2]", "[[1,2],[3,4]]"));
    handed_over(one_input(buf, sizeof buf, "FP32", "[2]", "[1,\"NaN\"]"));
    handed_over(one_input(buf, sizeof buf, "BOOL", "[2]", "[true,false]"));
    handed_over(one_input(buf, sizeof buf, "FP32", "[2.0]", "[1,2]"));
    handed_over(one_input(buf, sizeof buf, "FP32", "[1e0]", "[1]"));
    handed_over(one_input(buf, sizeof buf, "FP32", "[0001]", "[1]")); /* cJSON reads 1 */
    handed_over(one_input(buf, sizeof buf, "FP32", "[1]", "[01]"));
    handed_over(one_input(buf, sizeof buf, "FP32", "[1]", "[1.]"));
    handed_over("{\"version\":1.0,\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\","
                "\"data\":[1]}]}");
    /* Space cJSON skips and JSON does not have, a byte order mark. */
    handed_over("{\"inputs\":\f[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}");
    handed_over("\xef\xbb\xbf{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\","
                "\"data\":[1]}]}");
}

Test(srv_codec_fast, hands_what_cjson_refuses_to_cjson_which_words_it)
{
    char buf[512];
    /* Values out of range, or that overflow a double (the fast number
     * reader refuses those), counts against the shape, dtypes. */
    handed_over(one_input(buf, sizeof buf, "FP32", "[2]", "[1,3.5e38]"));
    handed_over(one_input(buf, sizeof buf, "FP32", "[1]", "[1e400]"));
    handed_over(one_input(buf, sizeof buf, "FP64", "[1]", "[-1e-400]"));
    handed_over(one_input(buf, sizeof buf, "INT8", "[2]", "[1,128]"));
    handed_over(one_input(buf, sizeof buf, "INT32", "[1]", "[1.5]"));
    handed_over(one_input(buf, sizeof buf, "INT64", "[1]", "[9007199254740993]"));
    handed_over(one_input(buf, sizeof buf, "BOOL", "[1]", "[1]"));
    handed_over(one_input(buf, sizeof buf, "FP32", "[3]", "[1,2]"));
    handed_over(one_input(buf, sizeof buf, "FP32", "[1]", "[1,2]"));
    handed_over(one_input(buf, sizeof buf, "BYTES", "[1]", "[1]"));
    handed_over(one_input(buf, sizeof buf, "FP8", "[1]", "[1]"));
    handed_over(one_input(buf, sizeof buf, "FP32", "[1,1,1,1,1,1,1,1,1]", "[1]"));
    handed_over(one_input(buf, sizeof buf, "FP32", "[9999999999999999]", "[1]"));
    /* A huge shape in a small body: refused before its memory is taken
     * (under ASan, taking it would stop the test). */
    handed_over(one_input(buf, sizeof buf, "FP32", "[100000000,64]", "[1]"));
    handed_over("{\"inputs\":[{\"name\":\"x\",\"data\":[1],\"shape\":[100000000,64],"
                "\"datatype\":\"FP64\"}]}");
    /* 64 characters: more than cJSON reads of one number. */
    handed_over(one_input(buf, sizeof buf, "FP32", "[1]",
                          "[1.000000000000000000000000000000000000000000000000000000000000001]"));
    /* The request's form. */
    handed_over("{}");
    handed_over("{\"inputs\":[]}");
    handed_over("{\"inputs\":{}}");
    handed_over("{\"inputs\":[{}]}");
    handed_over("{\"inputs\":[{\"name\":\"\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\"}]}");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1],"
                "\"parameters\":{\"binary_data_size\":4}}]}");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\","
                "\"parameters\":{\"binary_data_size\":4}}]}");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}],"
                "\"outputs\":[{\"name\":\"y\"},{\"name\":\"y\"}]}");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}],"
                "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":1}}]}");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}],"
                "\"parameters\":{\"binary_data_output\":\"yes\"}}");
    handed_over("{\"id\":7,\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\","
                "\"data\":[1]}]}");
    /* Not JSON, or not only JSON. */
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]} x");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1,]}]}");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]");
    handed_over("[{\"inputs\":[]}]");
    handed_over("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}],}");
}
