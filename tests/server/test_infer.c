/* test_infer.c -- tests of server/infer.c's request wait: the table of
 * legal transitions, and the paths that never touch a connection (answered
 * in the submitting thread's own call, a completion from another thread
 * before the suspend, a refused hand-off). The suspend and resume paths
 * run against a real server in test_server.c and test_server_load.c. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "server/app_impl.h"

typedef struct legal {
    srv_req_state_t from;
    srv_req_event_t ev;
    srv_req_state_t to;
} legal_t;

static const legal_t legal[] = {
    {SRV_REQ_IDLE, SRV_EV_SUBMIT, SRV_REQ_SUBMITTING},
    {SRV_REQ_SUBMITTING, SRV_EV_REFUSE, SRV_REQ_IDLE},
    {SRV_REQ_SUBMITTING, SRV_EV_COMPLETE, SRV_REQ_DONE_EARLY},
    {SRV_REQ_SUBMITTING, SRV_EV_SUSPEND, SRV_REQ_SUSPENDED},
    {SRV_REQ_SUSPENDED, SRV_EV_COMPLETE, SRV_REQ_RESUMED},
    {SRV_REQ_DONE_EARLY, SRV_EV_SUSPEND, SRV_REQ_RESUMED},
    {SRV_REQ_DONE_EARLY, SRV_EV_FINISH, SRV_REQ_FINISHED},
    {SRV_REQ_RESUMED, SRV_EV_FINISH, SRV_REQ_FINISHED},
};
#define N_LEGAL (sizeof legal / sizeof legal[0])

Test(srv_infer, the_state_table_allows_exactly_the_documented_transitions)
{
    for (int from = 0; from < SRV_REQ_N_STATES; from++) {
        for (int ev = 0; ev < SRV_EV_N; ev++) {
            int want = -1;
            for (size_t i = 0; i < N_LEGAL; i++)
                if (legal[i].from == (srv_req_state_t)from && legal[i].ev == (srv_req_event_t)ev)
                    want = (int)legal[i].to;
            cr_expect_eq(srv_req_state_next((srv_req_state_t)from, (srv_req_event_t)ev), want,
                         "state %d, event %d", from, ev);
        }
    }
    cr_expect_eq(srv_req_state_next(SRV_REQ_N_STATES, SRV_EV_SUBMIT), -1);
    cr_expect_eq(srv_req_state_next(SRV_REQ_IDLE, SRV_EV_N), -1);
}

Test(srv_infer, a_completion_only_publishes_and_a_finished_request_takes_no_event)
{
    for (int ev = 0; ev < SRV_EV_N; ev++)
        cr_expect_eq(srv_req_state_next(SRV_REQ_FINISHED, (srv_req_event_t)ev), -1);
    /* A completion can neither finish nor suspend: it only publishes. */
    for (int from = 0; from < SRV_REQ_N_STATES; from++) {
        int to = srv_req_state_next((srv_req_state_t)from, SRV_EV_COMPLETE);
        cr_expect(to == -1 || to == SRV_REQ_DONE_EARLY || to == SRV_REQ_RESUMED);
    }
}

static int finished;

static void count_finish(srv_req_t *r)
{
    finished++;
}

static void req_init(srv_req_t *r)
{
    *r = (srv_req_t){0};
    atomic_init(&r->state, SRV_REQ_IDLE);
    finished = 0;
}

Test(srv_infer, a_completion_inside_the_submit_is_answered_without_suspending)
{
    srv_req_t r;
    req_init(&r); /* no connection: a suspend or a resume would crash */
    srv_req_submitting(&r, count_finish);
    cr_expect_eq(atomic_load(&r.state), SRV_REQ_SUBMITTING);
    srv_req_complete(&r); /* the batch ran on this thread */
    cr_expect_eq(atomic_load(&r.state), SRV_REQ_DONE_EARLY);
    cr_expect_eq(finished, 0, "the completion does not answer");
    srv_req_park(&r);
    cr_expect_eq(finished, 1);
    cr_expect_eq(atomic_load(&r.state), SRV_REQ_FINISHED);
    cr_expect_not(srv_req_wake(&r), "a finished request is not answered twice");
    cr_expect_eq(finished, 1);
}

static void *complete_main(void *arg)
{
    srv_req_complete(arg);
    return NULL;
}

Test(srv_infer, a_completion_from_another_thread_before_the_park_is_answered_at_once)
{
    srv_req_t r;
    req_init(&r);
    srv_req_submitting(&r, count_finish);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, complete_main, &r), 0);
    pthread_join(t, NULL);
    srv_req_park(&r);
    cr_expect_eq(finished, 1);
    cr_expect_eq(atomic_load(&r.state), SRV_REQ_FINISHED);
}

Test(srv_infer, a_refused_hand_off_goes_back_to_idle_and_the_machine_does_not_answer)
{
    srv_req_t r;
    req_init(&r);
    srv_req_submitting(&r, count_finish);
    srv_req_refused(&r);
    cr_expect_eq(atomic_load(&r.state), SRV_REQ_IDLE);
    cr_expect_not(srv_req_wake(&r));
    cr_expect_eq(finished, 0);
    /* Submitted again (its version was replaced meanwhile), then completed. */
    srv_req_submitting(&r, count_finish);
    srv_req_complete(&r);
    srv_req_park(&r);
    cr_expect_eq(finished, 1);
}

Test(srv_infer, wake_answers_nothing_before_a_hand_off)
{
    srv_req_t r;
    req_init(&r);
    cr_expect_not(srv_req_wake(&r));
    cr_expect_eq(finished, 0);
    srv_infer_release(&r); /* nothing held: a no-op */
}
