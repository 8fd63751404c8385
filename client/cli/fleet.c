/*
 * Fleet keys and bundles (docs/fleet.md): fleet-key makes a signing key
 * pair; bundle export writes cached artifacts as one signed file, and
 * bundle import has the daemon store what it verifies of one.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sodium.h>

#include "../../proto/entry.h"
#include "cli.h"

const char usage_fleet_key[] =
"usage: kspec fleet-key generate PREFIX [--json]\n"
"\n"
"Makes a fleet signing key pair: PREFIX.secret (mode 0600; it signs\n"
"bundles, keep it with the publisher) and PREFIX.public (what daemons\n"
"verify with: kspecd --fleet-key PREFIX.public).  Never replaces a file.\n"
"Prints the key id (docs/fleet.md); --json: {\"id\",\"secret\",\"public\"}.\n"
"Warns when the files land inside a git work tree.\n";

const char usage_bundle[] =
"usage: kspec [--socket PATH] bundle export MANIFEST -o FILE\n"
"           --sign-key PREFIX.secret [--json]\n"
"       kspec [--socket PATH] bundle import FILE [--json]\n"
"\n"
"export writes the cached artifacts of MANIFEST's specs (as kspec warm\n"
"reads it) with their metadata, each signed with the fleet secret key,\n"
"as one bundle FILE (through FILE.tmp and a rename); specs not cached are\n"
"reported and left out (warm them first).  Nothing is compiled.\n"
"import has the daemon read FILE and store each entry that its\n"
"--fleet-key verifies and that this daemon would ask for (same kernel\n"
"definition, compiler and target); others are reported with the reason.\n"
"Both are for the daemon's uid, root and --admin-group (import) and\n"
"exit 1 when anything was refused or missing.\n";

/*
 * The git work tree that holds the file PATH (its top folder, in TOP),
 * found by looking for .git in PATH's folder and each above it: 1 when
 * there is one, else 0 (a folder that cannot be resolved: 0).
 */
static int in_work_tree(const char *path, char *top, size_t toplen)
{
	char dir[PATH_MAX], probe[PATH_MAX + 8];
	const char *slash = strrchr(path, '/');
	char *end;
	struct stat st;

	if (!slash)
		snprintf(probe, sizeof probe, ".");
	else
		snprintf(probe, sizeof probe, "%.*s", slash == path ? 1 :
		    (int)(slash - path), path);
	if (!realpath(probe, dir))
		return 0;
	for (;;) {
		snprintf(probe, sizeof probe, "%s/.git", dir);
		if (lstat(probe, &st) == 0) {
			snprintf(top, toplen, "%s", dir);
			return 1;
		}
		end = strrchr(dir, '/');
		if (!end || end == dir)
			return 0;
		*end = '\0';
	}
}

/* What fleet-key reads from its command line. */
typedef struct {
	const char *verb, *prefix;
	int json;
} fleet_key_args_t;

static const cli_opt_t fleet_key_opts[] = {
	CLI_OPT_OPERAND(fleet_key_args_t, verb),
	CLI_OPT_OPERAND(fleet_key_args_t, prefix),
	CLI_OPT_FLAG("json", 0, fleet_key_args_t, json),
	CLI_OPT_END
};

int cmd_fleet_key(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	fleet_key_args_t a = { 0 };
	const char *prefix;
	char id[17], err[512], top[PATH_MAX];
	int rc;

	rc = cli_parse(cmd, argc, argv, fleet_key_opts, &a);
	if (rc != CLI_GO_ON)
		return rc;
	/* "-" is an operand to the parser, not a prefix to make files of. */
	if (!a.verb || strcmp(a.verb, "generate") != 0 || !a.prefix ||
	    a.prefix[0] == '-')
		return usage_error(cmd->name, "give: generate PREFIX");
	prefix = a.prefix;
	rc = ks_fleet_keygen(prefix, id, err, sizeof err);
	if (rc) {
		fprintf(stderr, "kspec: %s: %s\n", kspec_err_name(rc), err);
		return EXIT_FAIL;
	}
	/* A secret in a repository is one `git add .` from a commit. */
	if (in_work_tree(prefix, top, sizeof top))
		fprintf(stderr, "kspec: warning: %s.secret is inside the git "
		    "work tree %s: keep secret keys out of repositories (move "
		    "it, or at least list it in .gitignore)\n", prefix, top);
	if (a.json) {
		cJSON *o = cJSON_CreateObject();
		char *text, path[4200];

		cJSON_AddStringToObject(o, "id", id);
		snprintf(path, sizeof path, "%s.secret", prefix);
		cJSON_AddStringToObject(o, "secret", path);
		snprintf(path, sizeof path, "%s.public", prefix);
		cJSON_AddStringToObject(o, "public", path);
		text = cJSON_PrintUnformatted(o);
		puts(text ? text : "{}");
		free(text);
		cJSON_Delete(o);
	} else {
		printf("fleet key %s: %s.secret (keep it secret), %s.public\n",
		    id, prefix, prefix);
	}
	return EXIT_OK;
}

/* The artifact's stored fields in a get reply's header: what follows
 * its "source" member, without the closing brace (docs/fleet.md). */
static int stored_meta(const kspec_artifact_t *a, const char **meta,
    size_t *len)
{
	const char *p = strstr(a->meta, ",\"source\":\"");

	if (!p || !(p = strchr(p + 11, '"')) || p[1] != ',' ||
	    a->meta_len < 2 || a->meta[a->meta_len - 1] != '}')
		return -1;
	*meta = p + 2;
	*len = (size_t)(a->meta + a->meta_len - 1 - *meta);
	return 0;
}

static int bundle_export(const char *socket, const char *manifest,
    const char *out, const char *sign_key, int as_json)
{
	kspec_dim_t dims[CLI_MAX_DIMS];
	const char *dyn[CLI_MAX_DIMS];
	kspec_client_t *c = NULL;
	kspec_artifact_t *a;
	ks_fleet_sec_t sk;
	ks_buf_t bundle, entries, one;
	cJSON *specs, *origin, *man, *report, *missing, *x;
	char err[512], why[256], where[32], *text;
	int i, n, rc, exported = 0, status = EXIT_OK;

	if (ks_fleet_load_secret(sign_key, &sk, err, sizeof err) != KS_OK) {
		fprintf(stderr, "kspec: --sign-key %s\n", err);
		return EXIT_FAIL;
	}
	text = slurp(manifest);
	man = text ? cJSON_Parse(text) : NULL;
	free(text);
	specs = cJSON_CreateArray();
	origin = cJSON_CreateArray();
	if (!man || expand_manifest(man, specs, origin, why, sizeof why)) {
		fprintf(stderr, "kspec: %s: %s\n", manifest, !man ? "cannot "
		    "read it as JSON" : why);
		rc = EXIT_FAIL;
		goto done_json;
	}
	rc = open_client(socket, &c);
	if (rc)
		goto done_json;
	ks_buf_init(&entries);
	report = cJSON_CreateObject();
	missing = cJSON_AddArrayToObject(report, "not_cached");
	n = cJSON_GetArraySize(specs);
	for (i = 0; i < n; i++) {
		const cJSON *s = cJSON_GetArrayItem(specs, i);
		int spec_index = cJSON_GetArrayItem(origin, i)->valueint;
		kspec_get_spec_t gs;
		const char *meta;
		size_t meta_len;
		ks_hash_t key;
		cJSON *ex;

		if (spec_of_json(s, &gs, dims, dyn) != 0) {
			fprintf(stderr, "kspec: specs[%d]: not a get-spec\n",
			    spec_index);
			status = EXIT_FAIL;
			continue;
		}
		/* Only what is cached: a bundle never costs a compile. */
		rc = kspec_explain(c, &gs, &text);
		ex = rc ? NULL : cJSON_Parse(text);
		kspec_free(text);
		if (rc || !ex) {
			snprintf(where, sizeof where, "specs[%d]", spec_index);
			status = fail_in(c, rc ? rc : KSPEC_E_PROTO, where);
			cJSON_Delete(ex);
			continue;
		}
		x = cJSON_GetObjectItemCaseSensitive(ex, "cached");
		if (!cJSON_IsString(x)) {
			cJSON_AddItemToArray(missing, cJSON_CreateNumber(
			    spec_index));
			if (!as_json)
				fprintf(stderr, "kspec: specs[%d]: %s is not "
				    "cached; left out (warm it first)\n",
				    spec_index, gs.kernel);
			status = EXIT_FAIL;
			cJSON_Delete(ex);
			continue;
		}
		cJSON_Delete(ex);
		rc = kspec_get(c, &gs, &a);
		if (rc) {
			snprintf(where, sizeof where, "specs[%d]", spec_index);
			status = fail_in(c, rc, where);
			continue;
		}
		ks_buf_init(&one);
		if (stored_meta(a, &meta, &meta_len) != 0 ||
		    ks_hash_from_hex(a->key, &key) != KS_OK ||
		    ks_entry_seal(&sk, &key, meta, meta_len, a->bytes, a->len,
		    &one) != KS_OK || ks_bundle_add(&entries, &one) != KS_OK) {
			fprintf(stderr, "kspec: specs[%d]: cannot make its "
			    "entry\n", spec_index);
			status = EXIT_FAIL;
		} else {
			exported++;
		}
		ks_buf_close(&one);
		kspec_artifact_free(a);
	}
	kspec_close(c);
	ks_buf_init(&bundle);
	rc = ks_bundle_begin(&bundle, (uint32_t)exported);
	if (rc == KS_OK)
		rc = ks_buf_append(&bundle, entries.data, entries.len);
	ks_buf_close(&entries);
	if (rc != KS_OK) {
		fprintf(stderr, "kspec: cannot assemble the bundle: %s\n",
		    ks_strerror(rc));
		status = EXIT_FAIL;
	} else if (write_file(out, bundle.data, bundle.len, 0) != 0) {
		status = EXIT_FAIL;    /* it said why */
	} else if (as_json) {
		cJSON_AddNumberToObject(report, "exported", exported);
		cJSON_AddNumberToObject(report, "bytes", (double)bundle.len);
		cJSON_AddStringToObject(report, "file", out);
		text = cJSON_PrintUnformatted(report);
		puts(text ? text : "{}");
		free(text);
	} else {
		printf("exported %d of %d specs (%zu bytes) to %s\n", exported,
		    n, bundle.len, out);
	}
	ks_buf_close(&bundle);
	cJSON_Delete(report);
	rc = status;
done_json:
	sodium_memzero(&sk, sizeof sk);
	cJSON_Delete(man);
	cJSON_Delete(specs);
	cJSON_Delete(origin);
	return rc;
}

static int bundle_import(const char *socket, const char *file,
    int as_json)
{
	kspec_client_t *c = NULL;
	char path[PATH_MAX], *fields, *text = NULL;
	const cJSON *r;
	cJSON *reply;
	ks_buf_t f;
	int rc;

	/* The daemon reads the file: it needs the whole path. */
	if (!realpath(file, path)) {
		fprintf(stderr, "kspec: %s: %s\n", file, strerror(errno));
		return EXIT_FAIL;
	}
	ks_buf_init(&f);
	ks_buf_puts(&f, "\"path\":");
	ks_buf_json_str(&f, path);
	fields = f.data;
	rc = open_client(socket, &c);
	if (rc) {
		ks_buf_close(&f);
		return rc;
	}
	rc = kspec_call(c, "import", fields, &text);
	ks_buf_close(&f);
	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	kspec_close(c);
	reply = cJSON_Parse(text);
	if (as_json) {
		puts(text);
	} else if (reply) {
		double listed = 0;

		cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(reply,
		    "refusals")) {
			fprintf(stderr, "kspec: entry %.0f refused: %s: %s\n",
			    jnum(r, "index"), jstr(r, "code"),
			    jstr(r, "message"));
			listed++;
		}
		if (jnum(reply, "refused") > listed)
			fprintf(stderr, "kspec: %.0f more entries refused (the "
			    "daemon lists the first %.0f)\n",
			    jnum(reply, "refused") - listed, listed);
		printf("imported %.0f of %.0f entries (%.0f already stored, "
		    "%.0f refused)\n", jnum(reply, "imported"),
		    jnum(reply, "entries"), jnum(reply, "present"),
		    jnum(reply, "refused"));
	}
	rc = reply && jnum(reply, "refused") == 0 ? EXIT_OK : EXIT_FAIL;
	cJSON_Delete(reply);
	kspec_free(text);
	return rc;
}

/* What bundle reads from its command line. */
typedef struct {
	const char *verb, *file;        /* export MANIFEST or import FILE */
	const char *out, *sign_key;
	int json;
} bundle_args_t;

static const cli_opt_t bundle_opts[] = {
	CLI_OPT_OPERAND(bundle_args_t, verb),
	CLI_OPT_OPERAND(bundle_args_t, file),
	CLI_OPT_STRING("output", 'o', bundle_args_t, out),
	CLI_OPT_STRING("sign-key", 0, bundle_args_t, sign_key),
	CLI_OPT_FLAG("json", 0, bundle_args_t, json),
	CLI_OPT_END
};

int cmd_bundle(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	bundle_args_t a = { 0 };
	int rc = cli_parse(cmd, argc, argv, bundle_opts, &a);

	if (rc != CLI_GO_ON)
		return rc;
	if (a.file && strcmp(a.verb, "export") == 0) {
		if (!a.out || !a.sign_key)
			return usage_error(cmd->name, "export needs -o FILE "
			    "and --sign-key PREFIX.secret");
		return bundle_export(socket, a.file, a.out, a.sign_key,
		    a.json);
	}
	if (a.file && strcmp(a.verb, "import") == 0) {
		if (a.out || a.sign_key)
			return usage_error(cmd->name, "import takes FILE "
			    "only");
		return bundle_import(socket, a.file, a.json);
	}
	return usage_error(cmd->name, "give: export MANIFEST -o FILE "
	    "--sign-key KEY, or import FILE");
}
