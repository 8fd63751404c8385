/*
 * The probe (exec.h): every backend of this process, its targets and
 * compiler identities, as the daemon needs them to resolve requests.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "exec.h"

#define MAX_TARGETS 128

int ks_exec_identity(const ks_backend_t *be, const char *target,
    ks_buf_t *out)
{
	int rc = be->identity(target, out);
#ifdef KS_TEST_PLANT
	const char *suffix = getenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX");
	/* The same from a file's first line, which no witness looks at: a
	 * compiler that changed where the witness cannot see it. */
	const char *file = getenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX_FILE");
	char line[128];
	FILE *f;

	if (rc == KS_OK && suffix && *suffix)
		rc = ks_buf_puts(out, suffix);
	if (rc == KS_OK && file && (f = fopen(file, "re"))) {
		if (fgets(line, sizeof line, f)) {
			line[strcspn(line, "\n")] = '\0';
			rc = ks_buf_puts(out, line);
		}
		fclose(f);
	}
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

/* ---- the witness ---- */

#define WITNESS_SCHEME "kspec-witness-1"
#define MAX_WITNESS_PATHS 1024

extern char **environ;

typedef struct {
	char *p[MAX_WITNESS_PATHS];
	int n;
	int unsound;             /* something could not be witnessed */
} path_set_t;

static void path_add(path_set_t *s, const char *path, size_t len)
{
	int i;

	for (i = 0; i < s->n; i++)
		if (strlen(s->p[i]) == len && memcmp(s->p[i], path, len) == 0)
			return;
	if (s->n < MAX_WITNESS_PATHS && (s->p[s->n] = strndup(path, len)))
		s->n++;
	else
		s->unsound = 1;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* DIR itself, then its entries (not . and ..) in name order. */
static void dir_add(path_set_t *s, const char *dir)
{
	char *names[256], path[4096];
	struct dirent *e;
	DIR *d;
	int i, n = 0;

	path_add(s, dir, strlen(dir));
	if (!(d = opendir(dir)))
		return;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == 256 || !(names[n] = strdup(e->d_name))) {
			s->unsound = 1;
			break;
		}
		n++;
	}
	closedir(d);
	qsort(names, (size_t)n, sizeof *names, cmp_str);
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		path_add(s, path, strlen(path));
		free(names[i]);
	}
}

/* The files of /proc/self/maps: the pathname column, after five fields.
 * Device files and pseudo files are left out (their times change at every
 * boot); a file mapped and since deleted (replaced by an upgrade under
 * the running process) makes the witness unsound: what was loaded is no
 * longer what a later start can look at. */
static void maps_add(path_set_t *s)
{
	char line[4352];
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		char *p = strchr(line, '/');
		size_t len;

		if (!p)
			continue;
		len = strcspn(p, "\n");
		if (strncmp(p, "/dev/", 5) == 0 ||
		    strncmp(p, "/proc/", 6) == 0 ||
		    strncmp(p, "/sys/", 5) == 0 ||
		    strncmp(p, "/memfd:", 7) == 0)
			continue;
		if (len >= 10 && strncmp(p + len - 10, " (deleted)", 10) == 0)
			s->unsound = 1;
		else
			path_add(s, p, len);
	}
	fclose(f);
}

int ks_exec_witness(ks_buf_t *out)
{
	const char *vendors = getenv("OCL_ICD_VENDORS"), *lp;
	char hex[KS_HASH_HEX];
	struct stat st;
	path_set_t s;
	ks_hash_t d;
	ks_buf_t b;
	size_t len;
	int i, n, rc;

	s.n = 0;
	s.unsound = 0;
	path_add(&s, "/etc/ld.so.cache", strlen("/etc/ld.so.cache"));
	if (vendors && stat(vendors, &st) == 0 && !S_ISDIR(st.st_mode))
		path_add(&s, vendors, strlen(vendors));
	else
		dir_add(&s, vendors && *vendors ? vendors :
		    "/etc/OpenCL/vendors");
	maps_add(&s);
	/* The directories a library could appear in without ldconfig (a
	 * newer NVRTC beside the one loaded): those of the mapped files and
	 * of LD_LIBRARY_PATH; a file added to or removed from one changes
	 * its times. */
	for (i = 0, n = s.n; i < n; i++) {
		const char *slash = strrchr(s.p[i], '/');

		if (slash && slash != s.p[i])
			path_add(&s, s.p[i], (size_t)(slash - s.p[i]));
	}
	for (lp = getenv("LD_LIBRARY_PATH"); lp && *lp; lp += len + !!lp[len]) {
		len = strcspn(lp, ":");
		if (len)
			path_add(&s, lp, len);
	}
	/* The digest now, right after the probe loaded what it needed. */
	rc = s.unsound ? KS_E_INVAL : ks_exec_witness_digest(
	    (const char *const *)s.p, s.n, &d);
	ks_buf_init(&b);
	if (rc == KS_OK)
		rc = ks_buf_puts(&b, "{\"paths\":[");
	for (i = 0; i < s.n; i++) {
		if (rc == KS_OK && i)
			rc = ks_buf_puts(&b, ",");
		if (rc == KS_OK)
			rc = ks_buf_json_str(&b, s.p[i]);
		free(s.p[i]);
	}
	if (rc == KS_OK) {
		ks_hash_hex(&d, hex);
		rc = ks_buf_printf(&b, "],\"digest\":\"%s\"}", hex);
	}
	if (rc == KS_OK)
		rc = ks_buf_append(out, b.data, b.len);
	ks_buf_close(&b);
	return rc;
}

static int env_witnessed(const char *e)
{
	static const char *const prefixes[] = { "KSPEC_NVRTC", "OCL_",
	    "POCL_", "CUDA_", "NVIDIA_", "LD_", "GCC_",
#ifdef KS_TEST_PLANT
	    "KSPEC_TEST_PLANT_IDENTITY",
#endif
	};
	size_t i;

	for (i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
		if (strncmp(e, prefixes[i], strlen(prefixes[i])) == 0)
			return 1;
	return 0;
}

/* The lines of the first processor of /proc/cpuinfo that say what it is
 * (what "auto" targets follow), not what it is doing. */
static void cpu_field(ks_hasher_t *h)
{
	static const char *const keys[] = { "vendor_id", "cpu family",
	    "model\t", "model name", "flags", "Features", "CPU implementer",
	    "CPU architecture", "CPU variant", "CPU part" };
	char line[8192];
	FILE *f = fopen("/proc/cpuinfo", "re");
	size_t i;

	if (!f)
		return;
	while (fgets(line, sizeof line, f) && line[0] != '\n')
		for (i = 0; i < sizeof keys / sizeof keys[0]; i++)
			if (strncmp(line, keys[i], strlen(keys[i])) == 0)
				ks_hasher_field(h, "cpu", line);
	fclose(f);
}

/* The lines of PATH that begin with one of KEYS (NULL: every line), as
 * fields NAME. */
static void file_field(ks_hasher_t *h, const char *name, const char *path,
    const char *const *keys)
{
	char line[1024];
	FILE *f = fopen(path, "re");
	int i;

	if (!f)
		return;
	while (fgets(line, sizeof line, f))
		for (i = 0; !keys || keys[i]; i++)
			if (!keys || strncmp(line, keys[i],
			    strlen(keys[i])) == 0) {
				ks_hasher_field(h, name, line);
				break;
			}
	fclose(f);
}

/* What a GPU is, not its IRQ or what it is doing. */
static const char *const gpu_keys[] = { "Model:", "GPU UUID:",
    "Bus Location:", "Video BIOS:", NULL };

/* The NVIDIA kernel driver's version and each GPU's bus id and model. */
static void nvidia_fields(ks_hasher_t *h)
{
	char path[512];
	path_set_t gpus;
	int i;

	file_field(h, "nvidia", "/proc/driver/nvidia/version", NULL);
	gpus.n = 0;
	dir_add(&gpus, "/proc/driver/nvidia/gpus");
	for (i = 0; i < gpus.n; i++) {
		if (i) {
			ks_hasher_field(h, "gpu", gpus.p[i]);
			snprintf(path, sizeof path, "%s/information",
			    gpus.p[i]);
			file_field(h, "gpu-information", path, gpu_keys);
		}
		free(gpus.p[i]);
	}
}

int ks_exec_witness_digest(const char *const *paths, int npaths,
    ks_hash_t *out)
{
	char **env = NULL, sbuf[256];
	struct stat st;
	ks_hasher_t h;
	size_t n = 0, cap = 0;
	int i;

	ks_hasher_init(&h);
	ks_hasher_field(&h, "scheme", WITNESS_SCHEME);
	snprintf(sbuf, sizeof sbuf, "%d", KS_CODEGEN_VERSION);
	ks_hasher_field(&h, "codegen", sbuf);
	for (i = 0; i < npaths; i++) {
		ks_hasher_field(&h, "path", paths[i]);
		if (stat(paths[i], &st) != 0)
			snprintf(sbuf, sizeof sbuf, "absent");
		else
			snprintf(sbuf, sizeof sbuf, "%ju:%ju:%jd:%o:%jd.%09ld:"
			    "%jd.%09ld", (uintmax_t)st.st_dev,
			    (uintmax_t)st.st_ino, (intmax_t)st.st_size,
			    (unsigned)st.st_mode, (intmax_t)st.st_mtim.tv_sec,
			    st.st_mtim.tv_nsec, (intmax_t)st.st_ctim.tv_sec,
			    st.st_ctim.tv_nsec);
		ks_hasher_field(&h, "stat", sbuf);
	}
	for (i = 0; environ && environ[i]; i++) {
		if (!env_witnessed(environ[i]))
			continue;
		if (n == cap) {
			char **grown = realloc(env, (cap = cap ? 2 * cap : 16) *
			    sizeof *env);

			if (!grown) {
				free(env);
				return KS_E_NOMEM;
			}
			env = grown;
		}
		env[n++] = environ[i];
	}
	if (n)
		qsort(env, n, sizeof *env, cmp_str);
	for (i = 0; i < (int)n; i++)
		ks_hasher_field(&h, "env", env[i]);
	free(env);
	cpu_field(&h);
	nvidia_fields(&h);
	ks_hasher_final(&h, out);
	return KS_OK;
}
