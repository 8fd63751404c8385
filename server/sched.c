/*
 * The fair queue (sched.h).  Active users and clients are kept in short
 * lists (a user or client leaves as soon as it has nothing queued), and a
 * pop scans them for the smallest virtual time: at most one entry per
 * connection, on the path of a compile, never on the hit path.
 */
#include <stdlib.h>

#include "../base/base.h"
#include "sched.h"

void ks_sched_init(ks_sched_t *s)
{
	s->users = NULL;
	s->vtime = 0;
	s->count = 0;
}

void ks_sched_close(ks_sched_t *s)
{
	ks_sched_user_t *u, *un;
	ks_sched_client_t *c, *cn;

	for (u = s->users; u; u = un) {
		un = u->next;
		for (c = u->clients; c; c = cn) {
			cn = c->next;
			free(c);
		}
		free(u);
	}
	ks_sched_init(s);
}

/* Appends X to the doubly linked list at *HEAD (arrival order). */
#define LIST_APPEND(head, x) do {                                      \
		__typeof__(x) last_ = *(head);                         \
		(x)->next = NULL;                                      \
		if (!last_) {                                          \
			(x)->prev = NULL;                              \
			*(head) = (x);                                 \
			break;                                         \
		}                                                      \
		while (last_->next)                                    \
			last_ = last_->next;                           \
		last_->next = (x);                                     \
		(x)->prev = last_;                                     \
	} while (0)

#define LIST_UNLINK(head, x) do {                                      \
		if ((x)->prev)                                         \
			(x)->prev->next = (x)->next;                   \
		else                                                   \
			*(head) = (x)->next;                           \
		if ((x)->next)                                         \
			(x)->next->prev = (x)->prev;                   \
	} while (0)

int ks_sched_push(ks_sched_t *s, ks_sched_item_t *it, uint32_t uid,
    uint64_t client)
{
	ks_sched_user_t *u;
	ks_sched_client_t *c;

	for (u = s->users; u && u->uid != uid; u = u->next)
		;
	if (!u) {
		u = calloc(1, sizeof *u);
		if (!u)
			return KS_E_NOMEM;
		u->uid = uid;
		u->vtime = s->vtime;
		LIST_APPEND(&s->users, u);
	}
	for (c = u->clients; c && c->id != client; c = c->next)
		;
	if (!c) {
		c = calloc(1, sizeof *c);
		if (!c) {
			if (!u->clients) {
				LIST_UNLINK(&s->users, u);
				free(u);
			}
			return KS_E_NOMEM;
		}
		c->id = client;
		c->user = u;
		c->vtime = u->clock;
		LIST_APPEND(&u->clients, c);
	}
	it->client = c;
	it->running = 0;
	it->next = NULL;
	it->prev = c->tail;
	if (c->tail)
		c->tail->next = it;
	else
		c->head = it;
	c->tail = it;
	s->count++;
	return KS_OK;
}

/* Drops C (and its user) once nothing of it is queued or running. */
static void settle(ks_sched_t *s, ks_sched_client_t *c)
{
	ks_sched_user_t *u = c->user;

	if (c->head || c->running)
		return;
	LIST_UNLINK(&u->clients, c);
	free(c);
	if (u->clients)
		return;
	LIST_UNLINK(&s->users, u);
	free(u);
}

static void unlink_item(ks_sched_t *s, ks_sched_item_t *it)
{
	ks_sched_client_t *c = it->client;

	if (it->prev)
		it->prev->next = it->next;
	else
		c->head = it->next;
	if (it->next)
		it->next->prev = it->prev;
	else
		c->tail = it->prev;
	it->prev = it->next = NULL;
	s->count--;
}

void ks_sched_remove(ks_sched_t *s, ks_sched_item_t *it)
{
	ks_sched_client_t *c = it->client;

	if (!c || it->running)
		return;
	unlink_item(s, it);
	it->client = NULL;
	settle(s, c);
}

void ks_sched_finish(ks_sched_t *s, ks_sched_item_t *it)
{
	ks_sched_client_t *c = it->client;

	if (!c || !it->running)
		return;
	it->running = 0;
	it->client = NULL;
	c->running--;
	settle(s, c);
}

/* 1 when C may go next: it has an item queued and, for a pop of a lone
 * client only, nothing running. */
static int eligible(const ks_sched_client_t *c, int lone)
{
	return c->head && (!lone || c->running == 0);
}

/* 1 when some client of U is eligible. */
static int user_waiting(const ks_sched_user_t *u, int lone)
{
	const ks_sched_client_t *c;

	for (c = u->clients; c; c = c->next)
		if (eligible(c, lone))
			return 1;
	return 0;
}

static ks_sched_item_t *pop(ks_sched_t *s, int lone)
{
	ks_sched_user_t *u, *best_u = NULL;
	ks_sched_client_t *c, *best_c = NULL;
	ks_sched_item_t *it;

	for (u = s->users; u; u = u->next)
		if ((!best_u || u->vtime < best_u->vtime) &&
		    user_waiting(u, lone))
			best_u = u;
	if (!best_u)
		return NULL;
	for (c = best_u->clients; c; c = c->next)
		if (eligible(c, lone) && (!best_c || c->vtime < best_c->vtime))
			best_c = c;
	it = best_c->head;
	s->vtime = best_u->vtime;
	best_u->vtime++;
	best_u->clock = best_c->vtime;
	best_c->vtime++;
	unlink_item(s, it);
	it->running = 1;
	best_c->running++;
	return it;
}

ks_sched_item_t *ks_sched_pop(ks_sched_t *s)
{
	return pop(s, 0);
}

ks_sched_item_t *ks_sched_pop_lone(ks_sched_t *s)
{
	return pop(s, 1);
}
