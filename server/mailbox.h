/*
 * Private to server/: hands work from other threads (the store writer) to
 * the loop thread.  A message is embedded in its sender's record, so
 * posting never allocates and cannot fail.
 */
#ifndef KS_SERVER_MAILBOX_H
#define KS_SERVER_MAILBOX_H

#include <pthread.h>
#include <uv.h>

typedef struct ks_mail {
	void (*fn)(struct ks_mail *m);   /* runs on the loop thread */
	struct ks_mail *next;
} ks_mail_t;

typedef struct {
	uv_async_t async;
	pthread_mutex_t lock;
	ks_mail_t *head, *tail;
} ks_mailbox_t;

/* The async handle does not keep the loop alive (uv_unref). */
int ks_mailbox_init(ks_mailbox_t *mb, uv_loop_t *loop);
/* Any thread.  M->fn must be set. */
void ks_mailbox_post(ks_mailbox_t *mb, ks_mail_t *m);
/* Runs what was posted, on the loop thread (also used at shutdown, after
 * the loop ended). */
void ks_mailbox_run(ks_mailbox_t *mb);
/* Closes the handle; run the loop once more for its close callback. */
void ks_mailbox_close(ks_mailbox_t *mb);

#endif
