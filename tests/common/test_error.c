/* test_error.c -- tests for common/error.c: the code table and the per-thread message. */
#include <criterion/criterion.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

/* The table as the test sees it, expanded from the same X-macro. */
static const struct {
    const char *name;
    int value;
    const char *text;
} codes[] = {
#define TEST_CODE_(name, value, text) {#name, value, text},
    FS_ERRNO_MAP(TEST_CODE_)
#undef TEST_CODE_
};

#define N_CODES (sizeof codes / sizeof codes[0])

Test(common_error, strerror_and_errname_cover_every_code)
{
    for (size_t i = 0; i < N_CODES; i++) {
        cr_expect_str_eq(fs_strerror(codes[i].value), codes[i].text, "%s", codes[i].name);
        cr_expect_str_eq(fs_errname(codes[i].value), codes[i].name, "%d", codes[i].value);
        cr_expect_neq(strlen(codes[i].text), 0, "%s has no text", codes[i].name);
    }
}

Test(common_error, codes_are_zero_or_negative_and_distinct)
{
    cr_expect_eq(FS_OK, 0);
    for (size_t i = 0; i < N_CODES; i++) {
        cr_expect_leq(codes[i].value, 0, "%s is positive", codes[i].name);
        for (size_t j = i + 1; j < N_CODES; j++)
            cr_expect_neq(codes[i].value, codes[j].value, "%s and %s share a value",
                          codes[i].name, codes[j].name);
    }
}

Test(common_error, unknown_code_has_fallback_text_and_name)
{
    static const int unknown[] = {1, 42, -9999, INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        cr_expect_str_eq(fs_strerror(unknown[i]), "unknown error", "%d", unknown[i]);
        cr_expect_str_eq(fs_errname(unknown[i]), "FS_EUNKNOWN", "%d", unknown[i]);
    }
}

Test(common_error, err_returns_code_and_sets_formatted_message)
{
    int rc = fs_err(FS_EINVAL, "key \"%s\": expected %d, got %d", "batch.max", 8, 9);
    cr_expect_eq(rc, FS_EINVAL);
    cr_expect_str_eq(fs_errmsg(), "key \"batch.max\": expected 8, got 9");
    rc = fs_err(FS_ENOMEM, "second");
    cr_expect_eq(rc, FS_ENOMEM);
    cr_expect_str_eq(fs_errmsg(), "second");
}

Test(common_error, err_may_wrap_the_previous_message)
{
    fs_err(FS_EIO, "read \"model.onnx\": short read");
    fs_err(FS_EIO, "loading model \"resnet\": %s", fs_errmsg());
    cr_expect_str_eq(fs_errmsg(), "loading model \"resnet\": read \"model.onnx\": short read");
}

Test(common_error, clear_falls_back_to_success_text)
{
    fs_err(FS_EBUSY, "held by request 7");
    fs_err_clear();
    cr_expect_str_eq(fs_errmsg(), "success");
}

Test(common_error, message_before_any_error_is_success_text)
{
    cr_expect_str_eq(fs_errmsg(), "success");
}

Test(common_error, long_message_is_truncated_to_errmsg_max)
{
    char big[FS_ERRMSG_MAX * 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_expect_eq(fs_err(FS_ERANGE, "%s", big), FS_ERANGE);
    const char *msg = fs_errmsg();
    cr_expect_eq(strlen(msg), FS_ERRMSG_MAX - 1);
    cr_expect_eq(strncmp(msg, big, FS_ERRMSG_MAX - 1), 0);
}

/* What the second thread saw, and what it set. */
typedef struct thread_view {
    char before[FS_ERRMSG_MAX];
    char after[FS_ERRMSG_MAX];
} thread_view_t;

static void *thread_set_own_message(void *arg)
{
    thread_view_t *view = arg;
    snprintf(view->before, sizeof view->before, "%s", fs_errmsg());
    fs_err(FS_ENOENT, "model \"b\" not found");
    snprintf(view->after, sizeof view->after, "%s", fs_errmsg());
    return NULL;
}

Test(common_error, message_is_per_thread)
{
    fs_err(FS_EINVAL, "model \"a\": bad input");
    thread_view_t view;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, thread_set_own_message, &view), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_expect_str_eq(view.before, "success", "second thread saw the first's message");
    cr_expect_str_eq(view.after, "model \"b\" not found");
    cr_expect_str_eq(fs_errmsg(), "model \"a\": bad input", "second thread clobbered the first's");
}
