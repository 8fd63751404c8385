/*
 * The probe (exec.h): every backend of this process, its targets and
 * compiler identities, as the daemon needs them to resolve requests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"

#define MAX_TARGETS 128

int ks_exec_identity(const ks_backend_t *be, const char *target,
    ks_buf_t *out)
{
	int rc = be->identity(target, out);
#ifdef KS_TEST_PLANT
	const char *suffix = getenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX");

	if (rc == KS_OK && suffix && *suffix)
		rc = ks_buf_puts(out, suffix);
#endif
	return rc;
}

/* One requested target: what it resolves to, or why it is refused. */
static void probe_target(ks_buf_t *out, const ks_backend_t *be,
    const char *requested, int first)
{
	char target[KS_MAX_NAME + 1], why[512];
	ks_buf_t id;
	int rc;

	why[0] = '\0';
	ks_buf_init(&id);
	rc = be->resolve_target(requested, target, sizeof target, why,
	    sizeof why);
	if (rc == KS_OK) {
		rc = ks_exec_identity(be, target, &id);
		if (rc == KS_OK && !id.data)
			rc = KS_E_INTERNAL;
		if (rc != KS_OK)
			snprintf(why, sizeof why, "backend %s: cannot read the "
			    "compiler identity of %s", be->name, target);
	}
	ks_buf_puts(out, first ? "{\"requested\":" : ",{\"requested\":");
	ks_buf_json_str(out, requested);
	if (rc == KS_OK) {
		ks_buf_puts(out, ",\"target\":");
		ks_buf_json_str(out, target);
		ks_buf_puts(out, ",\"identity\":");
		ks_buf_json_str(out, id.data);
	} else {
		ks_buf_printf(out, ",\"error\":{\"code\":\"%s\",\"message\":",
		    ks_err_name(rc));
		ks_buf_json_str(out, why[0] ? why : ks_strerror(rc));
		ks_buf_puts(out, "}");
	}
	ks_buf_puts(out, "}");
	ks_buf_close(&id);
}

static void probe_backend(ks_buf_t *out, const ks_backend_t *be)
{
	char names[MAX_TARGETS][KS_MAX_NAME + 1];
	char why[512];
	int i, n;

	why[0] = '\0';
	ks_buf_puts(out, "{\"name\":");
	ks_buf_json_str(out, be->name);
	ks_buf_puts(out, ",\"format\":");
	ks_buf_json_str(out, be->default_format);
	if (be->available(why, sizeof why) != KS_OK) {
		ks_buf_puts(out, ",\"available\":false,\"reason\":");
		ks_buf_json_str(out, why[0] ? why : "unavailable");
		ks_buf_puts(out, "}");
		return;
	}
	n = be->targets ? be->targets(names, MAX_TARGETS) : 0;
	if (n < 0)
		n = 0;
	ks_buf_puts(out, ",\"available\":true,\"listed\":[");
	for (i = 0; i < n; i++) {
		ks_buf_puts(out, i ? "," : "");
		ks_buf_json_str(out, names[i]);
	}
	ks_buf_puts(out, "],\"targets\":[");
	probe_target(out, be, "auto", 1);
	for (i = 0; i < n; i++)
		probe_target(out, be, names[i], 0);
	ks_buf_puts(out, "]}");
}

int ks_exec_probe(ks_buf_t *out)
{
	const ks_backend_t *const *all;
	int i, n;

	all = ks_backends(&n);
	ks_buf_printf(out, "{\"codegen\":%d,\"backends\":[",
	    KS_CODEGEN_VERSION);
	for (i = 0; i < n; i++) {
		ks_buf_puts(out, i ? "," : "");
		probe_backend(out, all[i]);
	}
	return ks_buf_puts(out, "]}");
}
