/* test_codec_lift.c -- tests of server/codec_lift.c: which "data" arrays
 * are read off the text, and that a request parses to the same tensors and
 * the same errors whether its numbers were lifted or read by cJSON. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/tensor.h"
#include "server/codec.h"
#include "server/codec_lift.h"

/* ---- which arrays are lifted ---------------------------------------------- */

/* The lift of `json`: which of its first n inputs were lifted, as a string
 * of '1' and '0' ("" when nothing was). */
static const char *lifted_pattern(const char *json, char *buf, size_t n)
{
    srv_lift_t l;
    size_t len = strlen(json);
    srv_lift_data(json, len, &l);
    buf[0] = '\0';
    if (l.text) {
        cr_expect_eq(strlen(json), len, "the text is borrowed, not changed");
        for (size_t k = 0; k < n; k++)
            buf[k] = srv_lift_input(&l, k) ? '1' : '0';
        buf[n] = '\0';
    }
    srv_lift_free(&l);
    return buf;
}

Test(srv_codec_lift, a_flat_array_of_numbers_is_read_and_blanked_in_place)
{
    const char *json = "{\"id\":\"a\",\"inputs\":[{\"name\":\"x\",\"shape\":[4],\"datatype\":\"FP32\","
                       "\"data\": [ 0.1 ,-0,1e-7,\n12345678901234567890 ] }]}";
    srv_lift_t l;
    srv_lift_data(json, strlen(json), &l);
    cr_assert_not_null(l.text);
    const srv_lifted_t *in = srv_lift_input(&l, 0);
    cr_assert_not_null(in);
    cr_assert_eq(in->n, 4);
    const double want[4] = {0.1, -0.0, 1e-7, 12345678901234567890.0};
    cr_expect_eq(memcmp(in->values, want, sizeof want), 0, "the doubles strtod reads, -0 kept");
    char blanked[256];
    snprintf(blanked, sizeof blanked, "%s", json);
    char *open = strstr(blanked, "\"data\": [") + 8, *close = strchr(open, ']');
    memset(open + 1, ' ', (size_t)(close - open - 1));
    cr_expect_eq(memcmp(l.text, blanked, strlen(json)), 0, "%.*s", (int)strlen(json), l.text);
    cr_expect_null(srv_lift_input(&l, 1));
    srv_lift_free(&l);
    cr_expect_null(l.text);
    srv_lift_free(&l); /* twice: a no-op */
    srv_lift_free(NULL);
}

Test(srv_codec_lift, only_flat_valid_numbers_of_the_first_inputs_data_are_lifted)
{
    char buf[16];
#define IN(data) "{\"name\":\"x\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":" data "}"
    /* Each input alone decides: the first two are lifted, the others not. */
    cr_expect_str_eq(lifted_pattern("{\"inputs\":[" IN("[1,2]") "," IN("[3e2,-4.5E-3]") ","
                                    IN("[1,\"NaN\"]") "," IN("[[1],[2]]") "," IN("[true,1]") ","
                                    IN("[01,2]") "," IN("[1.,2]") "," IN("[.5,2]") ","
                                    IN("[+1,2]") "," IN("[1,2,]") "," IN("[]") "]}",
                                    buf, 11),
                     "11000000000");
    /* Overflow and underflow to zero are cJSON's (inf and 0 through strtod). */
    cr_expect_str_eq(lifted_pattern("{\"inputs\":[" IN("[1e400,1]") "," IN("[1e-400,1]") ","
                                    IN("[5e-324,1]") "]}", buf, 3),
                     "001");
    /* A number longer than cJSON's 63 characters fails its parse: left to it. */
    cr_expect_str_eq(lifted_pattern("{\"inputs\":[" IN("[0.1234567890123456789012345678901234567"
                                    "8901234567890123456789012345,1]") "," IN("[1,2]") "]}",
                                    buf, 2),
                     "01");
    /* A key with an escape keeps its input object's data with cJSON, or the
     * whole request when it is a root key. */
    cr_expect_str_eq(lifted_pattern("{\"inputs\":[{\"d\\u0061ta\":[9],\"data\":[1,2]}," IN("[1,2]")
                                    "]}", buf, 2),
                     "01");
    cr_expect_str_eq(lifted_pattern("{\"x\\u0041\":0,\"inputs\":[" IN("[1,2]") "]}", buf, 1), "");
    /* The first "data" of an input, the first "inputs" of the root. */
    cr_expect_str_eq(lifted_pattern("{\"inputs\":[{\"data\":[\"a\"],\"data\":[1,2]}]}", buf, 1), "");
    cr_expect_str_eq(lifted_pattern("{\"inputs\":[{\"data\":[1,2],\"data\":[\"a\"]}]}", buf, 1),
                     "1");
    cr_expect_str_eq(lifted_pattern("{\"inputs\":5,\"inputs\":[" IN("[1,2]") "]}", buf, 1), "");
    /* "data" elsewhere is not a tensor's. */
    cr_expect_str_eq(lifted_pattern("{\"parameters\":{\"data\":[1,2]},\"outputs\":[{\"data\":[1]}],"
                                    "\"inputs\":[{\"x\":{\"data\":[1]}}]}", buf, 1),
                     "");
    /* Text the pass does not expect: nothing is lifted, cJSON reports it. */
    cr_expect_str_eq(lifted_pattern("{\"inputs\":[" IN("[1,2]") "]", buf, 1), "");
    cr_expect_str_eq(lifted_pattern("[{\"inputs\":[" IN("[1,2]") "]}]", buf, 1), "");
    cr_expect_str_eq(lifted_pattern("{\"inputs\":[" IN("[1,2]") " 7]}", buf, 1), "");
    cr_expect_str_eq(lifted_pattern("{\"inputs\":[{\"name\":\"x\\", buf, 1), "");
#undef IN
}

/* ---- the same tensors and errors either way ------------------------------- */

/* Parses `json` as it is and with a first root key holding an escape
 * ("x\u0041", which the protocol ignores), which keeps every number with
 * cJSON; expects the same result: both fail with one code and message, or
 * both give tensors of the same bytes. */
static void parse_same_either_way(const char *json)
{
    char plain[4096];
    cr_assert_eq(json[0], '{');
    snprintf(plain, sizeof plain, "{\"x\\u0041\":0,%s", json + 1);
    srv_infer_request_t *a = NULL, *b = NULL;
    int rc_a = srv_infer_request_parse(json, strlen(json), 0, &a);
    char msg_a[FS_ERRMSG_MAX];
    snprintf(msg_a, sizeof msg_a, "%s", fs_errmsg());
    int rc_b = srv_infer_request_parse(plain, strlen(plain), 0, &b);
    cr_expect_eq(rc_a, rc_b, "%s: %d (%s) lifted, %d (%s) not", json, rc_a, msg_a, rc_b,
                 fs_errmsg());
    if (rc_a != 0 || rc_b != 0) {
        if (rc_a != FS_EPARSE) /* a parse error's offsets differ by the key */
            cr_expect_str_eq(msg_a, fs_errmsg(), "%s", json);
    } else {
        cr_assert_eq(a->n_inputs, b->n_inputs, "%s", json);
        for (size_t k = 0; k < a->n_inputs; k++) {
            const eng_tensor_t *ta = &a->inputs[k].tensor, *tb = &b->inputs[k].tensor;
            cr_assert_eq(ta->dtype, tb->dtype);
            size_t bytes = eng_tensor_bytes(ta);
            cr_assert_eq(bytes, eng_tensor_bytes(tb));
            cr_expect_eq(memcmp(ta->data, tb->data, bytes), 0, "%s: input %zu differs", json, k);
        }
    }
    srv_infer_request_free(a);
    srv_infer_request_free(b);
}

static void same_for(const char *datatype, const char *shape, const char *data)
{
    char json[4096];
    snprintf(json, sizeof json,
             "{\"inputs\":[{\"name\":\"x\",\"shape\":%s,\"datatype\":\"%s\",\"data\":%s}]}", shape,
             datatype, data);
    parse_same_either_way(json);
}

Test(srv_codec_lift, values_are_those_cjson_reads)
{
    same_for("FP32", "[12]", "[0.1,-0,1e-46,1.401298464324817e-45,1.1754942e-38,3.4028235e38,"
                             "3.4028235677973362e38,16777217,0.333333343267,-2.5e-3,1E5,7]");
    same_for("FP64", "[8]", "[0.1,-0,4.9e-324,2.2250738585072011e-308,1.7976931348623157e308,"
                            "9007199254740993,0.30000000000000004,123456789012345678901234567890]");
    same_for("FP16", "[5]", "[65504,65519.99,0.1,-6e-8,1e-9]");
    same_for("BF16", "[3]", "[0.1,3.3895313892515355e38,-1.5]");
    same_for("INT64", "[3]", "[-9007199254740991,9007199254740991,0]");
    same_for("UINT64", "[2]", "[0,9007199254740991]");
    same_for("INT8", "[3]", "[-128,127,-0]");
    same_for("UINT8", "[2]", "[0,255]");
    same_for("INT16", "[2]", "[-32768,32767]");
    same_for("UINT16", "[1]", "[65535]");
    same_for("INT32", "[3]", "[-2147483648,2147483647,1e3]");
    same_for("UINT32", "[1]", "[4294967295]");
    same_for("FP32", "[2,2]", "[1,2,3,4]"); /* flat for a rank-2 shape */
}

Test(srv_codec_lift, errors_are_those_of_cjson_numbers)
{
    same_for("FP32", "[2]", "[1,3.5e38]");                    /* out of range for FP32 */
    same_for("FP32", "[2]", "[1,3.4028235677973366e38]");     /* rounds to infinity */
    same_for("FP16", "[1]", "[65520]");
    same_for("BF16", "[1]", "[3.3961e38]");
    same_for("INT8", "[2]", "[1,128]");
    same_for("UINT8", "[1]", "[-1]");
    same_for("INT32", "[1]", "[1.5]");                        /* not an integer */
    same_for("INT64", "[1]", "[9007199254740993]");           /* beyond 2^53 - 1 */
    same_for("UINT64", "[1]", "[1e20]");
    same_for("BOOL", "[2]", "[1,0]");                         /* not true or false */
    same_for("FP32", "[3]", "[1,2]");                         /* count against the shape */
    same_for("FP32", "[1]", "[1,2]");
    same_for("FP32", "[0]", "[1]");
    same_for("BYTES", "[1]", "[1]");
}

Test(srv_codec_lift, requests_around_the_lifted_arrays_read_the_same)
{
    /* Two inputs, one lifted; outputs, parameters and id around them. */
    parse_same_either_way("{\"id\":\"r\",\"inputs\":[{\"name\":\"a\",\"shape\":[2],\"datatype\":"
                          "\"FP32\",\"data\":[1.5,\"NaN\"]},{\"data\":[ 2 , 3 ],\"name\":\"b\","
                          "\"datatype\":\"INT32\",\"shape\":[2]}],\"outputs\":[{\"name\":\"y\"}],"
                          "\"parameters\":{\"binary_data_output\":false}}");
    /* "data" before its "datatype", nested and flat inputs side by side. */
    parse_same_either_way("{\"inputs\":[{\"data\":[[1,2],[3,4]],\"name\":\"a\",\"shape\":[2,2],"
                          "\"datatype\":\"FP64\"},{\"name\":\"b\",\"data\":[5,6,7,8],\"shape\":"
                          "[2,2],\"datatype\":\"FP64\"}]}");
    /* Both "data" and binary_data_size: refused as before. */
    parse_same_either_way("{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"FP32\","
                          "\"data\":[1],\"parameters\":{\"binary_data_size\":4}}]}");
    /* A second "data" is ignored, as cJSON ignores it. */
    parse_same_either_way("{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"FP32\","
                          "\"data\":[1],\"data\":[2,3]}]}");
    /* An input that is not an object, after a lifted one. */
    parse_same_either_way("{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":\"FP32\","
                          "\"data\":[1]},7]}");
}

Test(srv_codec_lift, text_that_is_not_json_is_reported_from_the_original)
{
    /* Valid up to the lifted array, broken after it: the lift reached the
     * root's end, cJSON stops where it stops in the original. */
    const char *json = "{\"inputs\":[{\"name\":\"a\",\"shape\":[2],\"datatype\":\"FP32\","
                       "\"data\":[1,2],\"x\":tru}]}";
    srv_infer_request_t *r = NULL;
    cr_expect_eq(srv_infer_request_parse(json, strlen(json), 0, &r), FS_EPARSE);
    cr_expect_null(r);
    char want[160];
    size_t at = (size_t)(strstr(json, "tru}") - json);
    snprintf(want, sizeof want, "the request is not valid JSON: stopped at byte %zu of %zu near "
             "'tru}]}'", at, strlen(json));
    cr_expect_str_eq(fs_errmsg(), want);
    /* Trailing text after the object, past the lifted array. */
    json = "{\"inputs\":[{\"name\":\"a\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[1,2]}]} x";
    cr_expect_eq(srv_infer_request_parse(json, strlen(json), 0, &r), FS_EPARSE);
    cr_expect(strstr(fs_errmsg(), "unexpected text after the object"), "%s", fs_errmsg());
}
