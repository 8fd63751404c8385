/*
 * Calls to the daemon: connecting, one call and its reply, and the one
 * line a failure prints (cli.h gives the exit statuses); the readers of
 * reply members and the writer of request fields the commands share.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* Prints S on stderr with line breaks and other controls as spaces, so a
 * message is always one line. */
static void put_line(const char *s)
{
	for (; *s; s++)
		fputc((unsigned char)*s < 0x20 ? ' ' : *s, stderr);
}

int fail(kspec_client_t *c, int rc)
{
	return fail_in(c, rc, NULL);
}

int fail_in(kspec_client_t *c, int rc, const char *what)
{
	const char *code = "", *msg = kspec_last_error(c, &code);

	fputs("kspec: ", stderr);
	if (what) {
		put_line(what);
		fputs(": ", stderr);
	}
	if (rc == KSPEC_E_CONNECT) {
		put_line(msg);
		fputs("\n", stderr);
		return EXIT_CONNECT;
	}
	put_line(*code ? code : kspec_err_name(rc));
	fputs(": ", stderr);
	put_line(*msg ? msg : kspec_strerror(rc));
	fputs("\n", stderr);
	return EXIT_FAIL;
}

int open_client(const char *socket, kspec_client_t **c)
{
	int rc = kspec_connect(socket, c);
	const char *code = "", *msg;

	if (!rc)
		return EXIT_OK;
	msg = kspec_last_error(*c, &code);
	fputs("kspec: ", stderr);
	if (rc == KSPEC_E_CONNECT) {
		put_line(msg);
		fputs(" \xe2\x80\x94 is kspecd running?\n", stderr);
	} else if (rc == KSPEC_E_DENIED) {
		fputs("E_DENIED: ", stderr);
		put_line(msg);
		fputs("\n", stderr);
	} else {
		fprintf(stderr, "%s: ", kspec_err_name(rc));
		put_line(msg);
		fputs("\n", stderr);
	}
	kspec_close(*c);
	*c = NULL;
	return EXIT_CONNECT;
}

int show_reply(kspec_client_t *c, int rc, char *text, int as_json,
    int (*print)(const cJSON *reply))
{
	cJSON *json;

	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	kspec_close(c);
	if (as_json) {
		printf("%s\n", text);
		kspec_free(text);
		return EXIT_OK;
	}
	json = cJSON_Parse(text);
	kspec_free(text);
	rc = print(json);
	cJSON_Delete(json);
	return rc;
}

int run_op(const char *socket, const char *op, const char *fields,
    int as_json, int (*print)(const cJSON *reply))
{
	kspec_client_t *c = NULL;
	char *text = NULL;
	int rc;

	rc = open_client(socket, &c);
	if (rc)
		return rc;
	rc = kspec_call(c, op, fields, &text);
	return show_reply(c, rc, text, as_json, print);
}

int call_parsed(const char *socket, const char *op, const char *fields,
    cJSON **reply)
{
	kspec_client_t *c = NULL;
	char *text = NULL;
	int rc = open_client(socket, &c);

	*reply = NULL;
	if (rc)
		return rc;
	rc = kspec_call(c, op, fields, &text);
	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	kspec_close(c);
	*reply = cJSON_Parse(text);
	kspec_free(text);
	return *reply ? EXIT_OK : EXIT_FAIL;
}

int add_field(char *b, size_t cap, const char *name, const char *v)
{
	cJSON *s = cJSON_CreateString(v);
	char *t = s ? cJSON_PrintUnformatted(s) : NULL;
	size_t n = strlen(b);
	int w;

	cJSON_Delete(s);
	if (!t)
		return -1;
	w = snprintf(b + n, cap - n, "%s\"%s\":%s", n ? "," : "", name, t);
	free(t);
	return w < 0 || (size_t)w >= cap - n ? -1 : 0;
}

double jnum(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

const char *jstr(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : "";
}

double mono_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
