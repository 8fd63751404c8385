/*
 * libkspec (include/kspec.h) against a real kspecd: pipelined gets matched
 * by id, the cpu loader, explain and the generic call.
 */
#include <criterion/criterion.h>

#include "../include/kspec.h"
#include "e2e.h"
#include "../ref/ref.h"

static e2e_daemon_t D;
static kspec_client_t *C;

static void up(void)
{
	memset(&D, 0, sizeof D);
	cr_assert_eq(e2e_start(&D, NULL), 0, "kspecd did not start");
	cr_assert_eq(kspec_connect(D.sock, &C), 0);
}

static void down(void)
{
	kspec_close(C);
	e2e_cleanup(&D);
}

TestSuite(client, .init = up, .fini = down, .timeout = 120);

static kspec_get_spec_t gemm_spec(const char *dtype, kspec_dim_t *dims,
    int64_t m, int64_t n, int64_t k)
{
	kspec_get_spec_t s = { 0 };

	dims[0] = (kspec_dim_t){ "M", m };
	dims[1] = (kspec_dim_t){ "N", n };
	dims[2] = (kspec_dim_t){ "K", k };
	s.kernel = "gemm";
	s.backend = "cpu";
	s.dtype = dtype;
	s.shape = dims;
	s.nshape = 3;
	return s;
}

/*
 * A slow cold compile first, then hits and a bad spec behind it on one
 * connection: every result lands in its own slot, and the invalid one
 * carries the daemon's code.
 */
Test(client, get_many_matches_out_of_order_replies_by_id)
{
	kspec_dim_t dims[6][3];
	kspec_get_spec_t specs[6];
	kspec_artifact_t *out[6], *warmup;
	int errors[6], i, rc;
	const char *code;

	specs[1] = gemm_spec("f32", dims[1], 1, 64, 64);
	cr_assert_eq(kspec_get(C, &specs[1], &warmup), 0);
	kspec_artifact_free(warmup);
	specs[0] = gemm_spec("bf16", dims[0], 1, 2048, 2048);  /* cold */
	for (i = 2; i < 5; i++)
		specs[i] = gemm_spec("f32", dims[i], 1, 64, 64);  /* hot */
	specs[5] = gemm_spec("f32", dims[5], 0, 64, 64);          /* bad */
	rc = kspec_get_many(C, specs, 6, out, errors);
	cr_assert_eq(rc, KSPEC_E_BAD_SHAPE);
	cr_assert_str_eq(kspec_last_error(C, &code), "M must be >= 1 (got 0)");
	cr_assert_str_eq(code, "E_BAD_SHAPE");
	cr_assert_null(out[5]);
	cr_assert_eq(errors[5], KSPEC_E_BAD_SHAPE);
	for (i = 0; i < 5; i++) {
		cr_assert_not_null(out[i], "item %d: %d", i, errors[i]);
		cr_assert_eq(errors[i], 0);
	}
	cr_assert_str_eq(out[0]->source, "compiled");
	cr_assert_str_eq(out[0]->variant, "gemv_m1");
	for (i = 2; i < 5; i++) {
		cr_assert_str_eq(out[i]->source, "memory");
		cr_assert_eq(out[i]->len, out[1]->len);
		cr_assert_eq(memcmp(out[i]->bytes, out[1]->bytes, out[1]->len),
		    0);
	}
	/* The connection is still in step afterwards. */
	cr_assert_eq(kspec_ping(C), 0);
	for (i = 0; i < 6; i++)
		kspec_artifact_free(out[i]);
}

/*
 * A get_many whose request frames pass one send batch (64 KB): every
 * request reaches the daemon and every reply lands in its slot.
 */
Test(client, get_many_larger_than_one_send_batch)
{
	enum { N = 1000 };
	static kspec_dim_t dims[N][3];
	static kspec_get_spec_t specs[N];
	static kspec_artifact_t *out[N];
	kspec_artifact_t *warm;
	size_t frames = 0;
	int i;

	specs[0] = gemm_spec("f32", dims[0], 1, 72, 72);
	cr_assert_eq(kspec_get(C, &specs[0], &warm), 0);
	for (i = 0; i < N; i++) {
		specs[i] = gemm_spec("f32", dims[i], 1, 72, 72);
		frames += 8 + 100;      /* at least: prefix and a get's JSON */
	}
	cr_assert_gt(frames, 65536, "too few requests to pass one batch");
	cr_assert_eq(kspec_get_many(C, specs, N, out, NULL), 0, "%s",
	    kspec_last_error(C, NULL));
	for (i = 0; i < N; i++) {
		cr_assert_not_null(out[i], "item %d", i);
		cr_assert_eq(out[i]->len, warm->len);
		cr_assert_eq(memcmp(out[i]->bytes, warm->bytes, warm->len), 0);
		kspec_artifact_free(out[i]);
	}
	kspec_artifact_free(warm);
	cr_assert_eq(kspec_ping(C), 0);
}

Test(client, cpu_loader_runs_a_served_kernel_bitwise)
{
	kspec_dim_t dims[3];
	kspec_get_spec_t s = gemm_spec("bf16", dims, 1, 100, 300);
	kspec_artifact_t *a;
	kspec_cpu_kernel_t *k;
	kspec_cpu_entry_t fn;
	uint16_t x[300], w[100 * 300], y[100], ref[100];
	void *px = x, *pw = w, *py = y, *params[3] = { &px, &pw, &py };
	char err[256];
	cJSON *meta;
	double groups;

	cr_assert_eq(kspec_get(C, &s, &a), 0);
	cr_assert_eq(kspec_cpu_load(a, &k, &fn, err, sizeof err), 0, "%s",
	    err);
	meta = cJSON_ParseWithLength(a->meta, a->meta_len);
	groups = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(meta, "launch"), "groups"));
	cJSON_Delete(meta);
	cr_assert(groups >= 1 && groups <= 100, "launch.groups %g", groups);
	kspec_artifact_free(a);         /* the kernel stays loaded */
	ref_fill(x, 2, 300, 11);
	ref_fill(w, 2, 100 * 300, 12);
	ref_gemm(x, w, ref, 2, 1, 100, 300);
	fn(params, 0, (uint64_t)groups);
	cr_assert_eq(memcmp(y, ref, sizeof y), 0);
	kspec_cpu_unload(k);
}

Test(client, cpu_loader_refuses_metadata_only_artifacts)
{
	kspec_dim_t dims[3];
	kspec_get_spec_t s = gemm_spec("f32", dims, 1, 8, 8);
	kspec_artifact_t *a;
	kspec_cpu_kernel_t *k;
	kspec_cpu_entry_t fn;
	char err[256];

	s.meta_only = 1;
	cr_assert_eq(kspec_get(C, &s, &a), 0);
	cr_assert_eq(kspec_cpu_load(a, &k, &fn, err, sizeof err),
	    KSPEC_E_INVAL);
	cr_assert_null(k);
	kspec_artifact_free(a);
}

Test(client, explain_and_call_return_the_daemon_reply)
{
	kspec_dim_t dims[3];
	kspec_get_spec_t s = gemm_spec("f16", dims, 1, 8, 8);
	char *json;
	cJSON *r;

	cr_assert_eq(kspec_explain(C, &s, &json), 0);
	r = cJSON_Parse(json);
	cr_assert_str_eq(cJSON_GetObjectItem(r, "variant")->valuestring,
	    "gemv_m1");
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r, "cached")));
	cJSON_Delete(r);
	kspec_free(json);
	cr_assert_eq(kspec_call(C, "kernels", NULL, &json), 0);
	cr_assert(strstr(json, "\"gemm\""));
	kspec_free(json);
	cr_assert_eq(kspec_call(C, "list", "\"limit\":0", &json),
	    KSPEC_E_BAD_REQUEST);
	cr_assert_null(json);
}

static void on_alarm(int sig)
{
	(void)sig;
}

/*
 * The client reads replies through a buffer, so one read can bring several:
 * a reply already read into it is returned at once, even with no wait
 * allowed, and the socket is not asked for it.
 */
Test(client, a_reply_already_read_is_returned_without_waiting)
{
	uint64_t sent[3], id;
	char *text;
	int i;

	for (i = 0; i < 3; i++)
		cr_assert_eq(kspec_send(C, "ping", NULL, &sent[i]), 0, "%s",
		    kspec_last_error(C, NULL));
	/* A ping is answered in microseconds: after a second all three
	 * replies are in the socket, and the first read takes them all. */
	sleep(1);
	for (i = 0; i < 3; i++) {
		cr_assert_eq(kspec_recv(C, i ? 0 : 10000, &id, &text), 0,
		    "reply %d: %s", i + 1, kspec_last_error(C, NULL));
		cr_assert_eq(id, sent[i]);
		cr_assert(strstr(text, "\"ok\":true"), "%s", text);
		kspec_free(text);
	}
	cr_assert_eq(kspec_recv(C, 20, &id, &text), KSPEC_E_TIMEOUT);
	cr_assert_eq(kspec_ping(C), 0, "%s", kspec_last_error(C, NULL));
}

/*
 * kspec_send and kspec_recv: a wait that times out or is interrupted by a
 * signal reads nothing and leaves the connection usable; a warm with
 * progress is read frame by frame, then its reply; a daemon error reply
 * carries its request's id.
 */
Test(client, send_and_recv_read_a_warm_frame_by_frame)
{
	static const char items[] = "\"progress\":true,\"items\":["
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"shape\":{\"M\":1,\"N\":48,\"K\":48}},"
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"shape\":{\"M\":0,\"N\":48,\"K\":48}}]";
	struct sigaction sa;
	uint64_t id, warm, cancel;
	const char *code;
	char *text;
	int frames = 0;

	cr_assert_eq(kspec_recv(C, 20, &id, &text), KSPEC_E_TIMEOUT);
	cr_assert_null(text);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;   /* no SA_RESTART */
	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGALRM, &sa, NULL), 0);
	alarm(1);
	cr_assert_eq(kspec_recv(C, -1, &id, &text), KSPEC_E_TIMEOUT);
	cr_assert_eq(kspec_ping(C), 0, "%s", kspec_last_error(C, NULL));

	cr_assert_eq(kspec_send(C, "warm", items, &warm), 0);
	for (;;) {
		cr_assert_eq(kspec_recv(C, 10000, &id, &text), 0, "%s",
		    kspec_last_error(C, NULL));
		cr_assert_eq(id, warm);
		if (!strstr(text, "\"progress\":")) {
			cr_assert(strstr(text, "\"failed\":1"), "%s", text);
			kspec_free(text);
			break;
		}
		frames++;
		kspec_free(text);
	}
	cr_assert_eq(frames, 2);
	cr_assert_eq(kspec_send(C, "cancel", "\"request\":12345", &cancel), 0);
	cr_assert_eq(kspec_recv(C, 10000, &id, &text), KSPEC_E_NOT_FOUND);
	cr_assert_eq(id, cancel);
	kspec_last_error(C, &code);
	cr_assert_str_eq(code, "E_NOT_FOUND");
	cr_assert_eq(kspec_ping(C), 0);
}
