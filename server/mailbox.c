/*
 * The mailbox (mailbox.h): a mutex-protected list and a uv_async_t.
 * uv_async_send coalesces wake-ups, so the loop side takes the whole list
 * each time it runs.
 */
#include "mailbox.h"

static void on_async(uv_async_t *a)
{
	ks_mailbox_run(a->data);
}

int ks_mailbox_init(ks_mailbox_t *mb, uv_loop_t *loop)
{
	mb->head = mb->tail = NULL;
	pthread_mutex_init(&mb->lock, NULL);
	if (uv_async_init(loop, &mb->async, on_async) != 0)
		return -1;
	mb->async.data = mb;
	uv_unref((uv_handle_t *)&mb->async);
	return 0;
}

void ks_mailbox_post(ks_mailbox_t *mb, ks_mail_t *m)
{
	m->next = NULL;
	pthread_mutex_lock(&mb->lock);
	if (mb->tail)
		mb->tail->next = m;
	else
		mb->head = m;
	mb->tail = m;
	pthread_mutex_unlock(&mb->lock);
	uv_async_send(&mb->async);
}

void ks_mailbox_run(ks_mailbox_t *mb)
{
	ks_mail_t *m, *next;

	pthread_mutex_lock(&mb->lock);
	m = mb->head;
	mb->head = mb->tail = NULL;
	pthread_mutex_unlock(&mb->lock);
	for (; m; m = next) {
		next = m->next;
		m->fn(m);
	}
}

void ks_mailbox_close(ks_mailbox_t *mb)
{
	if (!uv_is_closing((uv_handle_t *)&mb->async))
		uv_close((uv_handle_t *)&mb->async, NULL);
}
